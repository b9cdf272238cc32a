//! Driving `tile-ir` at expansion time: verify, compile every variant for
//! each target of `TILE_ARCHS` (`tile_ir::compile_variants`: on sm_90a a
//! warp-specialized TMA variant may come before the general one), write
//! `TILE_DUMP` files (earlier variants named by their schedule:
//! `<kernel>.sm_90a.warp_specialized_gemm.ptx`; every schedule's decision in
//! `<kernel>.<arch>.schedules.txt`), assemble every variant with `TILE_PTXAS`
//! (`ptxas.rs`, through `TILE_PTXAS_CACHE` when set) and keep its cubin
//! (embedded beside the PTX: no JIT at start-up).
//!
//! Expects a kernel that lowered without errors and its [`SpanTable`].
//! Guarantees that every problem (a verifier or code-generation error, an
//! unknown target, a ptxas failure, a dump that cannot be written) becomes
//! a `syn::Error` at the statement it concerns or, without one, at the
//! kernel's name; identical errors from several targets are reported once,
//! naming the targets.

use crate::diag::{Errors, SpanTable};
use proc_macro2::Span;
use std::path::{Path, PathBuf};
use tile_ir::abi::TensorMapUse;
use tile_ir::{CompileError, CompileOptions, Compiled, Kernel, SpanId, Target};

/// One compiled variant of one target, ready to embed. A target may have
/// several, preferred first (`tile_ir::compile_variants`).
pub(crate) struct TargetCode {
    pub arch: &'static str,
    /// The schedule that made the variant (`tile_ir::Compiled::schedule`).
    pub schedule: &'static str,
    pub ptx: String,
    pub shared_bytes: u32,
    /// Threads per block at launch (more than `kernel.threads` when
    /// warp-specialized).
    pub threads: u32,
    /// The TMA tensor maps the variant takes after its other parameters.
    pub tensor_maps: Vec<TensorMapUse>,
    /// Launched with one block per SM (`tile_ir::Compiled::persistent`).
    pub persistent: bool,
    /// The SASS `TILE_PTXAS` assembled from `ptx` (`ptxas -arch=<arch>`),
    /// embedded beside it so that the runtime need not JIT; `None` without
    /// `TILE_PTXAS`.
    pub cubin: Option<Vec<u8>>,
}

/// The `TILE_DUMP` file-name suffix of each variant of one target: `None`
/// for the last (general) one, which keeps the plain names; before it the
/// name of the variant's schedule (`warp_specialized_gemm`, `tma_copy`),
/// made unique with the index should two share one.
fn variant_suffixes(variants: &[Compiled]) -> Vec<Option<String>> {
    let mut used: Vec<String> = Vec::new();
    variants
        .iter()
        .enumerate()
        .map(|(i, v)| {
            if i + 1 == variants.len() {
                return None;
            }
            let mut s = v.schedule.to_string();
            if used.contains(&s) {
                s = format!("{s}{i}");
            }
            used.push(s.clone());
            Some(s)
        })
        .collect()
}

/// `TILE_ARCHS`: unset → `sm_80,sm_90a`; empty → no targets (interpreter only).
pub(crate) fn targets_from_env() -> Result<Vec<Target>, String> {
    let spec = std::env::var("TILE_ARCHS").unwrap_or_else(|_| "sm_80,sm_90a".to_string());
    parse_targets(&spec)
}

pub(crate) fn parse_targets(spec: &str) -> Result<Vec<Target>, String> {
    parse_target_list(spec).map_err(|name| {
        format!(
            "TILE_ARCHS names an unknown target `{name}`; the known targets are {} (an empty TILE_ARCHS embeds none: interpreter only)",
            Target::known_names()
        )
    })
}

/// A comma-separated list of target names, duplicates dropped; the first
/// unknown name as the error.
pub(crate) fn parse_target_list(spec: &str) -> Result<Vec<Target>, String> {
    let mut targets = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match Target::from_name(name) {
            Some(t) if !targets.contains(&t) => targets.push(t),
            Some(_) => {}
            None => return Err(name.to_string()),
        }
    }
    Ok(targets)
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// What the build environment asks of the backend: the targets
/// (`TILE_ARCHS`, or why it names none that exist), `TILE_DUMP`,
/// `TILE_PTXAS`, `TILE_PTXAS_CACHE`. Tests (the fuzz test) build one by hand instead of setting
/// environment variables.
pub(crate) struct BuildEnv {
    pub targets: Result<Vec<Target>, String>,
    pub dump: Option<PathBuf>,
    pub ptxas: Option<String>,
    /// `TILE_PTXAS_CACHE`: a folder where `ptxas`'s results are kept by
    /// content and reused (`ptxas.rs`).
    pub ptxas_cache: Option<PathBuf>,
    /// The compiler's options: the defaults less the switches
    /// `TILE_OPTIONS_OFF` names, with the experiments `TILE_OPTIONS_ON`
    /// names (or why one names something that does not exist).
    pub options: Result<CompileOptions, String>,
}

impl BuildEnv {
    pub(crate) fn from_env() -> BuildEnv {
        BuildEnv {
            targets: targets_from_env(),
            dump: non_empty_env("TILE_DUMP").map(PathBuf::from),
            ptxas: non_empty_env("TILE_PTXAS"),
            ptxas_cache: non_empty_env("TILE_PTXAS_CACHE").map(PathBuf::from),
            options: CompileOptions::default()
                .with_off(&non_empty_env("TILE_OPTIONS_OFF").unwrap_or_default())
                .and_then(|o| o.with_on(&non_empty_env("TILE_OPTIONS_ON").unwrap_or_default())),
        }
    }

    /// The targets of `TILE_ARCHS` and nothing else set (tests).
    #[cfg(test)]
    pub(crate) fn plain(targets: Vec<Target>) -> BuildEnv {
        BuildEnv {
            targets: Ok(targets),
            dump: None,
            ptxas: None,
            ptxas_cache: None,
            options: Ok(CompileOptions::default()),
        }
    }
}

/// A target's compile errors: what [`compile_targets`] leaves to the
/// caller (`report`, or dropping the target for a tuned instance).
pub(crate) type TargetFailures = Vec<(CompileError, Option<&'static str>)>;

/// Verifies and compiles `kernel` for every target. The verifier's,
/// dumps' and ptxas's errors go to `errors`; the errors of compiling for a
/// target are returned with their target, unreported (`report` them): a
/// tuned kernel drops an instance from a target where another
/// configuration compiles (`expand.rs`).
pub(crate) fn compile_targets(
    kernel: &Kernel,
    spans: &SpanTable,
    name_span: Span,
    archs: Option<&[Target]>,
    env: &BuildEnv,
    errors: &mut Errors,
) -> (Vec<TargetCode>, TargetFailures) {
    let mut targets = match &env.targets {
        Ok(t) => t.clone(),
        Err(msg) => {
            errors.at(name_span, msg);
            return (Vec::new(), Vec::new());
        }
    };
    let options = match &env.options {
        Ok(o) => *o,
        Err(msg) => {
            errors.at(name_span, msg);
            return (Vec::new(), Vec::new());
        }
    };
    // `archs = ".."` in the attribute: only those (a Hopper-only kernel need
    // not fit sm_80's shared memory); the runtime says so on other GPUs.
    if let Some(archs) = archs {
        targets.retain(|t| archs.contains(t));
    }
    let dump = &env.dump;
    let ptxas = &env.ptxas;
    let name = &kernel.name;
    if let Some(dir) = dump {
        write_dump(dir, &format!("{name}.tile"), &tile_ir::print::print_kernel(kernel), name_span, errors);
    }
    if let Err(errs) = tile_ir::verify::verify(kernel) {
        report(errs.into_iter().map(|e| (e, None)).collect(), spans, errors);
        return (Vec::new(), Vec::new());
    }
    let mut out = Vec::new();
    let mut failures: Vec<(CompileError, Option<&'static str>)> = Vec::new();
    for target in targets {
        let arch = target.name();
        let variants = match tile_ir::compile_variants(kernel, target, options) {
            Ok(variants) => variants,
            Err(errs) => {
                failures.extend(errs.into_iter().map(|e| (e, Some(arch))));
                continue;
            }
        };
        if let Some(dir) = dump {
            // Which schedules took the kernel, and why the others did not.
            let mut text = tile_ir::schedule::describe_decisions(kernel, target, options);
            let names: Vec<&str> = variants.iter().map(|v| v.schedule).collect();
            text.push_str(&format!("variants, preferred first: {}\n", names.join(", ")));
            write_dump(dir, &format!("{name}.{arch}.schedules.txt"), &text, name_span, errors);
        }
        let suffixes = variant_suffixes(&variants);
        for (compiled, suffix) in variants.into_iter().zip(suffixes) {
            // The last (general) variant keeps the plain file names.
            let stem = match &suffix {
                Some(s) => format!("{name}.{arch}.{s}"),
                None => format!("{name}.{arch}"),
            };
            if let Some(dir) = dump {
                write_dump(dir, &format!("{stem}.thread"), &compiled.thread_ir, name_span, errors);
                write_dump(dir, &format!("{stem}.ptx"), &compiled.ptx, name_span, errors);
            }
            let mut cubin = None;
            if let Some(ptxas) = ptxas {
                match crate::ptxas::assemble(ptxas, arch, name, &compiled.ptx, env.ptxas_cache.as_deref()) {
                    Ok(assembled) => {
                        if let Some(dir) = dump {
                            write_dump(dir, &format!("{stem}.ptxas.txt"), &assembled.report, name_span, errors);
                        }
                        cubin = Some(assembled.cubin);
                    }
                    Err(msg) => {
                        let which = suffix.as_ref().map_or_else(String::new, |s| format!(", variant `{s}`"));
                        errors.at(
                            name_span,
                            format!("ptxas rejected the PTX generated for `{name}` ({arch}{which}):\n{msg}"),
                        );
                    }
                }
            }
            out.push(TargetCode {
                arch,
                schedule: compiled.schedule,
                ptx: compiled.ptx,
                shared_bytes: compiled.shared_bytes,
                threads: compiled.threads,
                tensor_maps: compiled.tensor_maps,
                persistent: compiled.persistent,
                cubin,
            });
        }
    }
    (out, failures)
}

/// Turns `tile-ir` errors into spanned errors, merging the same error
/// reported by several targets.
pub(crate) fn report(failures: TargetFailures, spans: &SpanTable, errors: &mut Errors) {
    let mut merged: Vec<(SpanId, String, Vec<&'static str>)> = Vec::new();
    for (e, arch) in failures {
        match merged.iter_mut().find(|(s, m, _)| *s == e.span && *m == e.message) {
            Some((_, _, archs)) => archs.extend(arch),
            None => merged.push((e.span, e.message, arch.into_iter().collect())),
        }
    }
    for (span, message, archs) in merged {
        let message =
            if archs.is_empty() { message } else { format!("{message} (compiling for {})", archs.join(", ")) };
        errors.push(spans.range(span).error(message));
    }
}

pub(crate) fn write_dump(dir: &Path, file: &str, contents: &str, span: Span, errors: &mut Errors) {
    let path = dir.join(file);
    let result = std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, contents));
    if let Err(e) = result {
        errors.at(span, format!("TILE_DUMP: cannot write `{}`: {e}", path.display()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::SpanRange;

    #[test]
    fn compile_errors_merge_across_targets() {
        let mut spans = SpanTable::new(Span::call_site());
        let s0 = spans.add_range(SpanRange::single(Span::call_site()));
        let mut errors = Errors::default();
        let failures = vec![
            (CompileError::new(s0, "layout conflict"), Some("sm_80")),
            (CompileError::new(s0, "layout conflict"), Some("sm_90a")),
            (CompileError::new(SpanId::NONE, "too much shared memory"), Some("sm_80")),
            (CompileError::new(SpanId(77), "verifier: bad handle"), None),
        ];
        report(failures, &spans, &mut errors);
        assert_eq!(
            errors.messages(),
            vec![
                "layout conflict (compiling for sm_80, sm_90a)".to_string(),
                "too much shared memory (compiling for sm_80)".to_string(),
                "verifier: bad handle".to_string(),
            ]
        );
    }

    fn variant(schedule: &'static str, threads: u32, maps: usize) -> Compiled {
        let map = TensorMapUse {
            param: "tm".into(),
            tensor: 0,
            box_shape: vec![64, 64],
            swizzle: tile_ir::hopper::Swizzle::B128,
        };
        Compiled {
            target: Target::Sm90a,
            ptx: String::new(),
            shared_bytes: 0,
            thread_ir: String::new(),
            layouts: Vec::new(),
            function: tile_ir::thread_ir::Function::default(),
            threads,
            tensor_maps: vec![map; maps],
            persistent: false,
            schedule,
        }
    }

    #[test]
    fn extra_variants_get_dump_suffixes() {
        let (ws, tma, pipe) = ("warp_specialized_gemm", "tma_copy", "cp_async_pipeline");
        assert_eq!(variant_suffixes(&[variant(pipe, 256, 0)]), vec![None]);
        assert_eq!(variant_suffixes(&[variant(ws, 384, 2), variant(pipe, 256, 0)]), vec![Some(ws.to_string()), None]);
        assert_eq!(
            variant_suffixes(&[
                variant(ws, 384, 2),
                variant(ws, 384, 1),
                variant(tma, 256, 1),
                variant("general", 256, 0),
                variant("general", 256, 0)
            ]),
            vec![Some(ws.into()), Some(format!("{ws}1")), Some(tma.into()), Some("general".into()), None]
        );
    }

    #[test]
    fn target_lists() {
        assert_eq!(parse_targets("sm_80,sm_90a"), Ok(vec![Target::Sm80, Target::Sm90a]));
        assert_eq!(parse_targets(" sm_90a , sm_90a"), Ok(vec![Target::Sm90a]));
        assert_eq!(parse_targets(""), Ok(vec![]));
        assert!(parse_targets("sm_80,sm_70").unwrap_err().contains("`sm_70`"));
    }
}
