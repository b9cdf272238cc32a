//! The timeline of a traced launch (a variant built with
//! `TILE_OPTIONS_ON=trace`: `tile_ir::passes::trace`) as a Chrome trace
//! (Perfetto, `chrome://tracing`): one process per traced block, one thread
//! per warpgroup, one span per event, from the warpgroup's previous event
//! to this one, named `N: what` after the PTX's `// trace event N: what`
//! comment, in cycles of the block's SM (the viewer's microseconds) from the
//! block's first event. A long span ending at a wait is time spent reaching
//! and in that wait.
//!
//! Written to the file `TILE_TRACE` names (`{kernel}` in it replaced by the
//! kernel's name), after the launch has completed (the launch synchronizes
//! its stream: a debugging build).

use std::collections::HashMap;
use std::fmt::Write as _;

use tile_ir::abi::{TRACE_BLOCKS, TRACE_CAPACITY, TRACE_WARPGROUPS};

/// The words of a trace buffer.
pub(super) const TRACE_WORDS: usize = (TRACE_BLOCKS * TRACE_WARPGROUPS * TRACE_CAPACITY) as usize;

/// The events' descriptions in `ptx` (`// trace event N: what`), by number.
fn event_names(ptx: &str) -> HashMap<u64, String> {
    ptx.lines()
        .filter_map(|l| l.trim().strip_prefix("// trace event "))
        .filter_map(|l| {
            let (n, what) = l.split_once(": ")?;
            Some((n.parse().ok()?, format!("{n}: {what}")))
        })
        .collect()
}

/// The Chrome trace of buffer `words` of a launch of `ptx`.
pub(super) fn chrome_trace(ptx: &str, words: &[u64]) -> String {
    let names = event_names(ptx);
    let mut out = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
    let mut first = true;
    let cap = TRACE_CAPACITY as usize;
    for block in 0..TRACE_BLOCKS as usize {
        let slots: Vec<&[u64]> = (0..TRACE_WARPGROUPS as usize)
            .map(|w| {
                let s = &words[(block * TRACE_WARPGROUPS as usize + w) * cap..][..cap];
                &s[..s.iter().position(|&x| x == 0).unwrap_or(cap)]
            })
            .collect();
        let Some(t0) = slots.iter().filter_map(|s| s.first()).map(|x| x & ((1 << 48) - 1)).min() else {
            continue;
        };
        for (w, slot) in slots.iter().enumerate() {
            let mut prev = t0;
            for &x in slot.iter() {
                let (id, t) = (x >> 48, x & ((1 << 48) - 1));
                let name = names.get(&id).cloned().unwrap_or_else(|| format!("{id}"));
                let sep = if first { "" } else { "," };
                first = false;
                let _ = write!(
                    out,
                    "{sep}{{\"name\":{name:?},\"ph\":\"X\",\"pid\":{block},\"tid\":{w},\"ts\":{},\"dur\":{}}}",
                    prev.saturating_sub(t0),
                    t.saturating_sub(prev)
                );
                prev = t;
            }
        }
    }
    out.push_str("]}\n");
    out
}

/// Where `TILE_TRACE` asks the timeline of kernel `name` to go.
pub(super) fn trace_path(name: &str) -> Option<String> {
    let spec = std::env::var("TILE_TRACE").ok().filter(|v| !v.trim().is_empty())?;
    Some(spec.replace("{kernel}", name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_run_from_each_warpgroups_previous_event() {
        let ptx = "    // trace event 0: mbarrier.try_wait\n    // trace event 1: wgmma.wait_group\n";
        let mut words = vec![0u64; TRACE_WORDS];
        let cap = TRACE_CAPACITY as usize;
        // Block 0: warpgroup 0 at 100 (event 0), 250 (event 1); warpgroup 1 at 130 (event 1).
        words[0] = 100;
        words[1] = (1 << 48) | 250;
        words[cap] = (1 << 48) | 130;
        let t = chrome_trace(ptx, &words);
        assert!(t.contains(r#""name":"0: mbarrier.try_wait","ph":"X","pid":0,"tid":0,"ts":0,"dur":0"#), "{t}");
        assert!(t.contains(r#""name":"1: wgmma.wait_group","ph":"X","pid":0,"tid":0,"ts":0,"dur":150"#), "{t}");
        assert!(t.contains(r#""name":"1: wgmma.wait_group","ph":"X","pid":0,"tid":1,"ts":0,"dur":30"#), "{t}");
        assert_eq!(t.matches("\"ph\"").count(), 3, "untraced blocks and empty slots add nothing: {t}");
    }
}
