//! An intra-kernel timeline (`CompileOptions::trace`, a debugging build:
//! `TILE_OPTIONS_ON=trace`): each warpgroup's thread 0 of the first
//! [`TRACE_BLOCKS`] blocks records, after every
//! synchronizing instruction (an `mbarrier` wait or arrival, a
//! `wgmma` commit or wait, a `bar.sync`, a TMA load), the event's number
//! and the SM's `%clock64`, so that the runtime can draw where each
//! warpgroup waits and when (`tile_runtime`: `TILE_TRACE`).
//!
//! Expects the final Thread IR (after the barrier, merge and split passes:
//! what ptxas will see). Guarantees: the kernel gets one more parameter,
//! [`TRACE_PARAM`] (`u64`, before the tensor maps),
//! a buffer of [`TRACE_BLOCKS`] ×
//! [`TRACE_WARPGROUPS`] ×
//! [`TRACE_CAPACITY`] words, the slot of
//! (linear block `b`, warpgroup `w`) from word
//! `(b · TRACE_WARPGROUPS + w) · TRACE_CAPACITY`, each word
//! `event << 48 | (clock64 mod 2⁴⁸)` in the order the thread passed them
//! (the first `TRACE_CAPACITY`; the rest dropped); event `i` is marked in
//! the PTX by the comment `// trace event i: <what>` before its store. No
//! instruction of the kernel is moved or changed; each event adds a clock
//! read, a predicated store and a counter increment to every thread.

use crate::abi::{TRACE_BLOCKS, TRACE_CAPACITY, TRACE_PARAM, TRACE_WARPGROUPS};
use crate::thread_ir::{Address, Function, Inst, Operand, Reg, RegClass, Space, Special, Stmt, TENSOR_MAP_PARAM};

/// The event an instruction marks, if it is one.
fn event(inst: &Inst) -> Option<&'static str> {
    Some(match inst {
        Inst::MbarWait { .. } => "mbarrier.try_wait",
        Inst::MbarArrive { .. } | Inst::MbarArriveCluster { .. } => "mbarrier.arrive",
        Inst::WgmmaCommit => "wgmma.commit_group",
        Inst::WgmmaWait { .. } => "wgmma.wait_group",
        Inst::BarSync | Inst::NamedBarSync { .. } | Inst::BarrierSync { .. } => "bar.sync",
        Inst::BarrierArrive { .. } => "bar.arrive",
        Inst::TmaLoad { .. } => "cp.async.bulk.tensor",
        _ => return None,
    })
}

struct Tracer {
    /// The thread records (its warpgroup's thread 0, a traced block).
    on: Reg,
    /// Its slot's first word's address.
    base: Reg,
    /// Events it recorded so far.
    count: Reg,
    /// The events' descriptions, by number.
    events: Vec<String>,
}

fn op(f: &mut Function, out: &mut Vec<Stmt>, op: &str, class: RegClass, args: Vec<Operand>) -> Reg {
    let dst = f.new_reg(class);
    out.push(Stmt::Inst { inst: Inst::Op { op: op.into(), dst, args }, guard: None });
    dst
}

impl Tracer {
    /// The stamp of event `what` (its number the next one).
    fn stamp(&mut self, f: &mut Function, what: &str) -> Vec<Stmt> {
        let id = self.events.len() as i64;
        self.events.push(what.to_string());
        let mut out = vec![Stmt::Comment(format!("trace event {id}: {what}"))];
        let clock = op(f, &mut out, "mov.u64", RegClass::B64, vec![Operand::Special(Special::Clock64)]);
        let low = op(f, &mut out, "and.b64", RegClass::B64, vec![clock.into(), Operand::Imm((1 << 48) - 1)]);
        let word = op(f, &mut out, "or.b64", RegClass::B64, vec![low.into(), Operand::Imm(id << 48)]);
        let room =
            op(f, &mut out, "setp.lt.u32", RegClass::Pred, vec![self.count.into(), Operand::Imm(TRACE_CAPACITY)]);
        let store = op(f, &mut out, "and.pred", RegClass::Pred, vec![self.on.into(), room.into()]);
        let off = op(f, &mut out, "mul.wide.u32", RegClass::B64, vec![self.count.into(), Operand::Imm(8)]);
        let at = op(f, &mut out, "add.s64", RegClass::B64, vec![self.base.into(), off.into()]);
        out.push(Stmt::Inst {
            inst: Inst::St {
                space: Space::Global,
                ty: "u64",
                srcs: vec![word.into()],
                addr: Address { base: at.into(), offset: 0 },
                region: None,
            },
            guard: Some((store, false)),
        });
        let count = self.count;
        out.push(Stmt::Inst {
            inst: Inst::Op { op: "add.u32".into(), dst: count, args: vec![count.into(), Operand::Imm(1)] },
            guard: None,
        });
        out
    }

    fn walk(&mut self, f: &mut Function, body: Vec<Stmt>) -> Vec<Stmt> {
        let mut out = Vec::with_capacity(body.len());
        for s in body {
            match s {
                Stmt::Inst { inst, guard } => {
                    let what = event(&inst);
                    out.push(Stmt::Inst { inst, guard });
                    if let Some(what) = what {
                        out.extend(self.stamp(f, what));
                    }
                }
                Stmt::If { cond, negate, uniform, then, otherwise } => {
                    let then = self.walk(f, then);
                    let otherwise = self.walk(f, otherwise);
                    out.push(Stmt::If { cond, negate, uniform, then, otherwise });
                }
                Stmt::For { var, start, end, exit, uniform, body } => {
                    let body = self.walk(f, body);
                    out.push(Stmt::For { var, start, end, exit, uniform, body });
                }
                Stmt::Comment(c) => out.push(Stmt::Comment(c)),
            }
        }
        out
    }
}

/// Instruments `f` (see the module docs); the events' descriptions, by
/// number.
pub fn instrument(f: &mut Function) -> Vec<String> {
    let at = f.params.iter().position(|(_, ty)| *ty == TENSOR_MAP_PARAM).unwrap_or(f.params.len());
    f.params.insert(at, (TRACE_PARAM.to_string(), ".u64"));
    let mut entry = Vec::new();
    let ptr = f.new_reg(RegClass::B64);
    entry.push(Stmt::Inst { inst: Inst::LdParam { ty: "u64", dst: ptr, name: TRACE_PARAM.to_string() }, guard: None });
    let tid = op(f, &mut entry, "mov.u32", RegClass::B32, vec![Operand::Special(Special::TidX)]);
    let lane = op(f, &mut entry, "and.b32", RegClass::B32, vec![tid.into(), Operand::Imm(127)]);
    let lead = op(f, &mut entry, "setp.eq.u32", RegClass::Pred, vec![lane.into(), Operand::Imm(0)]);
    let wg = op(f, &mut entry, "shr.u32", RegClass::B32, vec![tid.into(), Operand::Imm(7)]);
    let special = |f: &mut Function, entry: &mut Vec<Stmt>, s: Special| {
        op(f, entry, "mov.u32", RegClass::B32, vec![Operand::Special(s)])
    };
    let (x, y, z) = (
        special(f, &mut entry, Special::CtaId(0)),
        special(f, &mut entry, Special::CtaId(1)),
        special(f, &mut entry, Special::CtaId(2)),
    );
    let (nx, ny) = (special(f, &mut entry, Special::NctaId(0)), special(f, &mut entry, Special::NctaId(1)));
    let zy = op(f, &mut entry, "mad.lo.u32", RegClass::B32, vec![z.into(), ny.into(), y.into()]);
    let block = op(f, &mut entry, "mad.lo.u32", RegClass::B32, vec![zy.into(), nx.into(), x.into()]);
    let traced = op(f, &mut entry, "setp.lt.u32", RegClass::Pred, vec![block.into(), Operand::Imm(TRACE_BLOCKS)]);
    let fits = op(f, &mut entry, "setp.lt.u32", RegClass::Pred, vec![wg.into(), Operand::Imm(TRACE_WARPGROUPS)]);
    let traced = op(f, &mut entry, "and.pred", RegClass::Pred, vec![traced.into(), fits.into()]);
    let on = op(f, &mut entry, "and.pred", RegClass::Pred, vec![lead.into(), traced.into()]);
    let slot =
        op(f, &mut entry, "mad.lo.u32", RegClass::B32, vec![block.into(), Operand::Imm(TRACE_WARPGROUPS), wg.into()]);
    let words = op(f, &mut entry, "mul.wide.u32", RegClass::B64, vec![slot.into(), Operand::Imm(TRACE_CAPACITY * 8)]);
    let base = op(f, &mut entry, "add.s64", RegClass::B64, vec![ptr.into(), words.into()]);
    let count = op(f, &mut entry, "mov.u32", RegClass::B32, vec![Operand::Imm(0)]);
    let mut tracer = Tracer { on, base, count, events: Vec::new() };
    let body = std::mem::take(&mut f.body);
    let mut body = tracer.walk(f, body);
    entry.append(&mut body);
    f.body = entry;
    tracer.events
}
