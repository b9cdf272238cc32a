//! Emission helpers of the lowering: the current block, fresh registers,
//! instructions, guarded and captured code, the entry code.

use super::*;

impl<'a> Lx<'a> {
    pub(crate) fn err(&self, msg: impl Into<String>) -> CompileError {
        CompileError::new(self.span, msg)
    }
    pub(crate) fn cur(&mut self) -> &mut Vec<Stmt> {
        if self.blocks.is_empty() {
            self.blocks.push(Vec::new());
        }
        let n = self.blocks.len() - 1;
        &mut self.blocks[n]
    }
    pub(crate) fn emit(&mut self, inst: Inst) {
        self.cur().push(Stmt::Inst { inst, guard: None });
    }
    pub(crate) fn emit_guarded(&mut self, inst: Inst, guard: Option<(Reg, bool)>) {
        self.cur().push(Stmt::Inst { inst, guard });
    }
    pub(crate) fn emit_pro(&mut self, inst: Inst) {
        self.push_pro(vec![Stmt::Inst { inst, guard: None }]);
    }
    /// Appends to the entry code, or to the local entry code of an epilogue
    /// copy (see [`Lx::local_prologue`]).
    pub(crate) fn push_pro(&mut self, code: Vec<Stmt>) {
        match &mut self.local_prologue {
            Some(local) => local.extend(code),
            None => self.prologue.extend(code),
        }
    }
    pub(crate) fn new_reg(&mut self, c: RegClass) -> Reg {
        self.f.new_reg(c)
    }
    pub(crate) fn op(&mut self, op: impl Into<String>, c: RegClass, args: Vec<Operand>) -> Reg {
        let dst = self.new_reg(c);
        self.emit(Inst::Op { op: op.into(), dst, args });
        dst
    }
    pub(crate) fn op_into(&mut self, op: impl Into<String>, dst: Reg, args: Vec<Operand>) {
        self.emit(Inst::Op { op: op.into(), dst, args });
    }
    pub(crate) fn mov(&mut self, dst: Reg, src: Operand, t: DType) {
        self.op_into(format!("mov.{}", mov_ty(t)), dst, vec![src]);
    }
    pub(crate) fn materialize(&mut self, v: &Val) -> Reg {
        match v.op {
            Operand::Reg(r) => r,
            _ => {
                if v.ty == DType::Bool {
                    let b = if let Operand::Imm(x) = v.op { x } else { 0 };
                    return self.const_pred(b != 0);
                }
                let r = self.new_reg(class_of(v.ty));
                self.mov(r, v.op.clone(), v.ty);
                r
            }
        }
    }
    pub(crate) fn const_pred(&mut self, b: bool) -> Reg {
        let r = self.op("mov.u32", RegClass::B32, vec![Operand::Imm(b as i64)]);
        self.op("setp.ne.u32", RegClass::Pred, vec![r.into(), Operand::Imm(0)])
    }
    /// Lane 0's `src` in every lane (`shfl.sync.idx`), for a value that is
    /// warp-uniform by construction (the warpgroup index `tid >> 7`): said
    /// so, ptxas keeps what derives from it (wgmma descriptors) in uniform
    /// registers.
    pub(crate) fn warp_uniform(&mut self, src: Reg) -> Reg {
        let dst = self.new_reg(RegClass::B32);
        self.emit(Inst::WarpBroadcast { dst, src });
        dst
    }
    /// Runs `f` with a fresh current block and returns what it emitted.
    pub(crate) fn capture(&mut self, f: impl FnOnce(&mut Self) -> R<()>) -> R<Vec<Stmt>> {
        self.blocks.push(Vec::new());
        let r = f(self);
        let b = self.blocks.pop().unwrap_or_default();
        r.map(|_| b)
    }
    /// Emits `then` under `cond` (directly when there is no condition).
    pub(crate) fn emit_if(&mut self, cond: Option<Reg>, uniform: bool, then: Vec<Stmt>, otherwise: Vec<Stmt>) {
        match cond {
            None => self.cur().extend(then),
            Some(c) => self.cur().push(Stmt::If { cond: c, negate: false, uniform, then, otherwise }),
        }
    }
    pub(crate) fn and_pred(&mut self, a: Option<Reg>, b: Option<Reg>) -> Option<Reg> {
        match (a, b) {
            (None, x) | (x, None) => x,
            (Some(a), Some(b)) => Some(self.op("and.pred", RegClass::Pred, vec![a.into(), b.into()])),
        }
    }
}
