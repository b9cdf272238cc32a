//! The Thread IR: what one thread executes, after layouts are fixed.
//!
//! A [`Function`] owns a register file (virtual registers of a PTX register
//! class, addressed by [`Reg`]) and a body of [`Stmt`]s: explicit
//! instructions ([`Inst`]) and structured control flow (`If`, `For`), each
//! marked uniform (every thread of the block takes the same path) or not.
//! Memory instructions name their state space and, for shared memory, the
//! [`Region`] they touch, so that passes (barrier insertion, later
//! pipelining) can reason about dependences without re-deriving addresses.
//!
//! Instructions are close to PTX on purpose: printing PTX from here is a
//! mechanical walk ([`crate::ptx`]). New hardware features (mma.sync,
//! ldmatrix, wgmma, TMA, mbarrier, setmaxnreg) become new [`Inst`]
//! variants; nothing else changes.

use std::fmt::{self, Write};

/// A PTX register class.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegClass {
    Pred,
    B16,
    B32,
    B64,
    F32,
}

impl RegClass {
    /// The PTX name prefix and declaration type.
    pub fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "%p",
            RegClass::B16 => "%h",
            RegClass::B32 => "%r",
            RegClass::B64 => "%rd",
            RegClass::F32 => "%f",
        }
    }
    pub fn decl_type(self) -> &'static str {
        match self {
            RegClass::Pred => ".pred",
            RegClass::B16 => ".b16",
            RegClass::B32 => ".b32",
            RegClass::B64 => ".b64",
            RegClass::F32 => ".f32",
        }
    }
}

/// A virtual register: an index into [`Function::regs`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(pub u32);

/// A PTX special register.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Special {
    TidX,
    CtaId(u8),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    Reg(Reg),
    /// An integer immediate (printed in decimal).
    Imm(i64),
    /// An f32 immediate (printed as its bit pattern, `0f3F800000`).
    F32(f32),
    /// A 16-bit immediate bit pattern (`0x3C00`).
    B16(u16),
    Special(Special),
    /// The address of a module-level or function-level symbol.
    Symbol(String),
}

impl From<Reg> for Operand {
    fn from(r: Reg) -> Operand {
        Operand::Reg(r)
    }
}

/// A PTX state space for memory instructions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Space {
    Global,
    Shared,
    Local,
    Param,
}

impl Space {
    pub fn name(self) -> &'static str {
        match self {
            Space::Global => "global",
            Space::Shared => "shared",
            Space::Local => "local",
            Space::Param => "param",
        }
    }
}

/// A region of shared memory (a shared buffer or a compiler scratch area,
/// `id`) as touched by one collective operation (`op`): the unit of
/// dependence for barrier insertion. Accesses of one region by one operation
/// never conflict with each other (a tile op touches each element once, from
/// the thread that owns it); accesses by different operations may.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Region {
    pub id: u32,
    pub op: u32,
}

/// `[base + offset]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Address {
    pub base: Operand,
    pub offset: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Inst {
    /// A register-to-register operation printed as `op dst, args..;`, where
    /// `op` carries the full PTX opcode with its modifiers and type
    /// (`add.s32`, `ex2.approx.ftz.f32`, `cvt.rzi.sat.s32.f32`, `setp.lt.s32`).
    Op { op: String, dst: Reg, args: Vec<Operand> },
    /// `mov.b32 dst, {lo, hi};` (pack two 16-bit registers).
    Pack { dst: Reg, lo: Reg, hi: Reg },
    /// `mov.b32 {lo, hi}, src;` (split a 32-bit register).
    Unpack { lo: Reg, hi: Reg, src: Reg },
    /// `ld.space[.vN].ty {dsts}, [addr];`
    Ld { space: Space, ty: &'static str, dsts: Vec<Reg>, addr: Address, region: Option<Region> },
    /// `ld.param.ty dst, [name];`
    LdParam { ty: &'static str, dst: Reg, name: String },
    /// `st.space[.vN].ty [addr], {srcs};`
    St { space: Space, ty: &'static str, srcs: Vec<Operand>, addr: Address, region: Option<Region> },
    /// `atom.space.add[.noftz].ty dst, [addr], src;` (result unused).
    AtomAdd { space: Space, ty: &'static str, dst: Reg, addr: Address, src: Operand },
    /// `shfl.sync.bfly.b32 dst, src, lane_mask, 31, 0xffffffff;`
    ShflBfly { dst: Reg, src: Reg, lane_mask: u32 },
    /// `bar.sync 0;`
    BarSync,
    /// `cp.async.{ca,cg}.shared.global [dst], [src], bytes[, src_bytes];`:
    /// an asynchronous copy of `bytes` (4, 8 or 16; `.cg` only for 16) from
    /// global to shared memory, of which the first `src_bytes` come from
    /// `src` and the rest are zero-filled. The data lands in shared memory
    /// only once a `cp.async.wait_group` retires the group it was committed
    /// in; `src` is not read beyond `src_bytes`.
    CpAsync { bytes: u32, dst: Address, src: Address, src_bytes: Operand, region: Option<Region> },
    /// `cp.async.commit_group;`: closes the group of this thread's
    /// `cp.async`s issued since the previous commit (possibly empty).
    CpAsyncCommit,
    /// `cp.async.wait_group pending;`: waits until at most `pending` of this
    /// thread's committed groups are still in flight.
    CpAsyncWait { pending: u32 },
    /// `ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 {dsts}, [addr];`
    /// (warp-collective): lane `8j + i` gives the address of row `i` of
    /// matrix `j` (16 bytes); `dsts[j]` receives matrix `j`'s elements
    /// `(lane / 4, 2·(lane % 4) + {0, 1})`, transposed with `trans`.
    Ldmatrix { trans: bool, dsts: Vec<Reg>, addr: Address, region: Option<Region> },
    /// `mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32 {d}, {a}, {b}, {c};`
    /// (warp-collective), `ab` = `f16` or `bf16`.
    Mma { ab: &'static str, d: [Reg; 4], a: [Reg; 4], b: [Reg; 2], c: [Reg; 4] },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// An instruction, optionally predicated (`@p` / `@!p`).
    Inst { inst: Inst, guard: Option<(Reg, bool)> },
    /// `if cond (negated when `negate`) { then } else { otherwise }`.
    If { cond: Reg, negate: bool, uniform: bool, then: Vec<Stmt>, otherwise: Vec<Stmt> },
    /// `for var in start..end` (32-bit signed counter, step 1); `exit` is a
    /// predicate register the loop test uses.
    For { var: Reg, start: Operand, end: Operand, exit: Reg, uniform: bool, body: Vec<Stmt> },
    Comment(String),
}

/// One kernel entry.
#[derive(Clone, Debug, Default)]
pub struct Function {
    pub name: String,
    /// PTX parameter names and types (`.u64`, `.s32`, `.f32`, `.u32`, `.b16`), in ABI order.
    pub params: Vec<(String, &'static str)>,
    pub threads: u32,
    pub regs: Vec<RegClass>,
    /// Dynamic shared memory in bytes.
    pub shared_bytes: u32,
    /// Per-thread `.local` arrays: (name, bytes).
    pub local_arrays: Vec<(String, u32)>,
    pub body: Vec<Stmt>,
}

impl Function {
    pub fn new_reg(&mut self, class: RegClass) -> Reg {
        self.regs.push(class);
        Reg(self.regs.len() as u32 - 1)
    }
    pub fn reg_name(&self, r: Reg) -> String {
        format!("{}{}", self.regs[r.0 as usize].prefix(), r.0)
    }
}

/// Name of the dynamic shared memory symbol.
pub const SMEM: &str = "smem";

pub(crate) fn fmt_operand(f: &Function, o: &Operand) -> String {
    match o {
        Operand::Reg(r) => f.reg_name(*r),
        Operand::Imm(v) => v.to_string(),
        Operand::F32(x) => format!("0f{:08X}", x.to_bits()),
        Operand::B16(b) => format!("0x{b:04X}"),
        Operand::Special(Special::TidX) => "%tid.x".into(),
        Operand::Special(Special::CtaId(a)) => format!("%ctaid.{}", ["x", "y", "z"][*a as usize % 3]),
        Operand::Symbol(s) => s.clone(),
    }
}

pub(crate) fn fmt_address(f: &Function, a: &Address) -> String {
    let base = fmt_operand(f, &a.base);
    match a.offset {
        0 => format!("[{base}]"),
        o if o > 0 => format!("[{base}+{o}]"),
        o => format!("[{base}{o}]"),
    }
}

fn fmt_list(f: &Function, regs: &[Operand]) -> String {
    let parts: Vec<String> = regs.iter().map(|o| fmt_operand(f, o)).collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("{{{}}}", parts.join(", "))
    }
}

fn vec_suffix(n: usize) -> String {
    if n > 1 {
        format!(".v{n}")
    } else {
        String::new()
    }
}

/// The PTX text of one instruction (without guard and `;`).
pub(crate) fn fmt_inst(f: &Function, inst: &Inst) -> String {
    match inst {
        Inst::Op { op, dst, args } => {
            let mut s = format!("{op} {}", f.reg_name(*dst));
            for a in args {
                let _ = write!(s, ", {}", fmt_operand(f, a));
            }
            s
        }
        Inst::Pack { dst, lo, hi } => format!("mov.b32 {}, {{{}, {}}}", f.reg_name(*dst), f.reg_name(*lo), f.reg_name(*hi)),
        Inst::Unpack { lo, hi, src } => format!("mov.b32 {{{}, {}}}, {}", f.reg_name(*lo), f.reg_name(*hi), f.reg_name(*src)),
        Inst::Ld { space, ty, dsts, addr, .. } => {
            let d: Vec<Operand> = dsts.iter().map(|r| Operand::Reg(*r)).collect();
            format!("ld.{}{}.{ty} {}, {}", space.name(), vec_suffix(dsts.len()), fmt_list(f, &d), fmt_address(f, addr))
        }
        Inst::LdParam { ty, dst, name } => format!("ld.param.{ty} {}, [{name}]", f.reg_name(*dst)),
        Inst::St { space, ty, srcs, addr, .. } => {
            format!("st.{}{}.{ty} {}, {}", space.name(), vec_suffix(srcs.len()), fmt_address(f, addr), fmt_list(f, srcs))
        }
        Inst::AtomAdd { space, ty, dst, addr, src } => {
            let noftz = if *ty == "f16" || *ty == "bf16" { ".noftz" } else { "" };
            format!("atom.{}.add{noftz}.{ty} {}, {}, {}", space.name(), f.reg_name(*dst), fmt_address(f, addr), fmt_operand(f, src))
        }
        Inst::ShflBfly { dst, src, lane_mask } => {
            format!("shfl.sync.bfly.b32 {}, {}, {lane_mask}, 31, -1", f.reg_name(*dst), f.reg_name(*src))
        }
        Inst::BarSync => "bar.sync 0".into(),
        Inst::CpAsync { bytes, dst, src, src_bytes, .. } => {
            // `.cg` (L2 only) exists for 16-byte copies; narrower ones use `.ca`.
            let cache = if *bytes == 16 { "cg" } else { "ca" };
            let tail = match src_bytes {
                Operand::Imm(b) if *b == *bytes as i64 => String::new(),
                o => format!(", {}", fmt_operand(f, o)),
            };
            format!("cp.async.{cache}.shared.global {}, {}, {bytes}{tail}", fmt_address(f, dst), fmt_address(f, src))
        }
        Inst::CpAsyncCommit => "cp.async.commit_group".into(),
        Inst::CpAsyncWait { pending } => format!("cp.async.wait_group {pending}"),
        Inst::Ldmatrix { trans, dsts, addr, .. } => {
            let d: Vec<Operand> = dsts.iter().map(|r| Operand::Reg(*r)).collect();
            format!(
                "ldmatrix.sync.aligned.m8n8.x{}{}.shared.b16 {{{}}}, {}",
                dsts.len(),
                if *trans { ".trans" } else { "" },
                d.iter().map(|o| fmt_operand(f, o)).collect::<Vec<_>>().join(", "),
                fmt_address(f, addr)
            )
        }
        Inst::Mma { ab, d, a, b, c } => {
            let l = |rs: &[Reg]| rs.iter().map(|r| f.reg_name(*r)).collect::<Vec<_>>().join(", ");
            format!("mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32 {{{}}}, {{{}}}, {{{}}}, {{{}}}", l(d), l(a), l(b), l(c))
        }
    }
}

fn guard_text(f: &Function, guard: &Option<(Reg, bool)>) -> String {
    match guard {
        Some((p, false)) => format!("@{} ", f.reg_name(*p)),
        Some((p, true)) => format!("@!{} ", f.reg_name(*p)),
        None => String::new(),
    }
}

/// The text form of the Thread IR: PTX-like instructions inside structured,
/// indented `if` / `for` blocks.
pub fn print_function(f: &Function) -> String {
    let mut out = String::new();
    let params: Vec<String> = f.params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
    let _ = writeln!(out, "fn {}({}) threads={} shared_bytes={} {{", f.name, params.join(", "), f.threads, f.shared_bytes);
    for (name, bytes) in &f.local_arrays {
        let _ = writeln!(out, "  local {name}[{bytes} bytes]");
    }
    print_block(f, &f.body, 1, &mut out);
    out.push_str("}\n");
    out
}

fn print_block(f: &Function, body: &[Stmt], depth: usize, out: &mut String) {
    let ind = "  ".repeat(depth);
    for s in body {
        match s {
            Stmt::Inst { inst, guard } => {
                let region = match inst {
                    Inst::Ld { region: Some(r), .. }
                    | Inst::St { region: Some(r), .. }
                    | Inst::CpAsync { region: Some(r), .. }
                    | Inst::Ldmatrix { region: Some(r), .. } => format!("  // region {}.{}", r.id, r.op),
                    _ => String::new(),
                };
                let _ = writeln!(out, "{ind}{}{}{region}", guard_text(f, guard), fmt_inst(f, inst));
            }
            Stmt::If { cond, negate, uniform, then, otherwise } => {
                let kind = if *uniform { "if.uniform" } else { "if" };
                let _ = writeln!(out, "{ind}{kind} {}{} {{", if *negate { "!" } else { "" }, f.reg_name(*cond));
                print_block(f, then, depth + 1, out);
                if !otherwise.is_empty() {
                    let _ = writeln!(out, "{ind}}} else {{");
                    print_block(f, otherwise, depth + 1, out);
                }
                let _ = writeln!(out, "{ind}}}");
            }
            Stmt::For { var, start, end, uniform, body, .. } => {
                let kind = if *uniform { "for.uniform" } else { "for" };
                let _ = writeln!(
                    out,
                    "{ind}{kind} {} in {}..{} {{",
                    f.reg_name(*var),
                    fmt_operand(f, start),
                    fmt_operand(f, end)
                );
                print_block(f, body, depth + 1, out);
                let _ = writeln!(out, "{ind}}}");
            }
            Stmt::Comment(c) => {
                let _ = writeln!(out, "{ind}// {c}");
            }
        }
    }
}

impl fmt::Display for Function {
    fn fmt(&self, fm: &mut fmt::Formatter<'_>) -> fmt::Result {
        fm.write_str(&print_function(self))
    }
}
