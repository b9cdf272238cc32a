//! A layout's coordinates as operands: the thread part of each dimension
//! (computed once, in the entry code), a register's coordinate, and the
//! validity predicate of a register (padding, idle threads, inside a
//! warpgroup's branch for a layout that warpgroup owns).

use super::*;

impl<'a> Lx<'a> {
    /// The thread part of dim `d`'s coordinate for the calling thread
    /// (computed once, in the prologue).
    pub(crate) fn tbase(&mut self, root: &RootLayout, d: usize) -> Operand {
        let fields = root.dims[d].fields.clone();
        self.thread_bits_value(&fields)
    }

    /// `Σ ((tid >> shift) & (count - 1)) · mult` over `fields`, in the
    /// prologue (`% count` for a count that is not a power of two: the
    /// highest run, [`ThreadField`]).
    pub(crate) fn thread_bits_value(&mut self, fields: &[ThreadField]) -> Operand {
        if fields.is_empty() {
            return Operand::Imm(0);
        }
        if let Some(r) = self.tbases.get(fields) {
            return Operand::Reg(*r);
        }
        let tid = self.tid;
        let mut acc: Option<Reg> = None;
        for f in fields {
            let a = self.new_reg(RegClass::B32);
            self.emit_pro(Inst::Op {
                op: "shr.u32".into(),
                dst: a,
                args: vec![tid.into(), Operand::Imm(f.shift as i64)],
            });
            let b = self.new_reg(RegClass::B32);
            let (op, arg) = if f.count.count_ones() == 1 { ("and.b32", f.count - 1) } else { ("rem.u32", f.count) };
            self.emit_pro(Inst::Op { op: op.into(), dst: b, args: vec![a.into(), Operand::Imm(arg)] });
            let c = self.new_reg(RegClass::B32);
            match acc {
                None if f.mult.count_ones() == 1 => self.emit_pro(Inst::Op {
                    op: "shl.b32".into(),
                    dst: c,
                    args: vec![b.into(), Operand::Imm(log2(f.mult))],
                }),
                None => self.emit_pro(Inst::Op {
                    op: "mul.lo.s32".into(),
                    dst: c,
                    args: vec![b.into(), Operand::Imm(f.mult)],
                }),
                Some(prev) => self.emit_pro(Inst::Op {
                    op: "mad.lo.s32".into(),
                    dst: c,
                    args: vec![b.into(), Operand::Imm(f.mult), prev.into()],
                }),
            }
            acc = Some(c);
        }
        let r = acc.unwrap_or(tid);
        self.tbases.insert(fields.to_vec(), r);
        Operand::Reg(r)
    }

    /// The bits of `x` selected by `mask`, packed to the low end (`pext`).
    pub(crate) fn extract_bits(&mut self, x: Reg, mask: u64) -> Operand {
        let mut out: Option<Operand> = None;
        let mut packed = 0u32;
        let mut b = 0u32;
        while b < 32 {
            if mask & (1 << b) == 0 {
                b += 1;
                continue;
            }
            let start = b;
            while b < 32 && mask & (1 << b) != 0 {
                b += 1;
            }
            let width = b - start;
            let s = self.op("shr.u32", RegClass::B32, vec![x.into(), Operand::Imm(start as i64)]);
            let v = self.op("and.b32", RegClass::B32, vec![s.into(), Operand::Imm((1i64 << width) - 1)]);
            out = Some(match out {
                None => Operand::Reg(v),
                Some(prev) => Operand::Reg(self.op(
                    "mad.lo.s32",
                    RegClass::B32,
                    vec![v.into(), Operand::Imm(1i64 << packed), prev],
                )),
            });
            packed += width;
        }
        out.unwrap_or(Operand::Imm(0))
    }

    /// Coordinate along kept dim `a` of per-dim register index `l`.
    pub(crate) fn coord(&mut self, lay: &FragLayout, a: usize, l: i64) -> Operand {
        let d = lay.kept[a];
        let base = self.tbase(&lay.root, d);
        self.add_i32(base, Operand::Imm(lay.root.reg_offset(d, l)))
    }

    /// Whether the calling thread is one of `root`'s active threads
    /// (`None`: all are). A layout of one warpgroup
    /// ([`RootLayout::owner`]) is only ever used inside that warpgroup's
    /// branch ([`Lx::owner_of`]): there only its threads past the active
    /// ones are idle.
    pub(crate) fn active_pred(&mut self, root: &RootLayout) -> Option<Reg> {
        let active = root.active_threads();
        let tid = self.tid;
        match root.owner {
            Some(_) if active >= 128 => None,
            Some(_) => {
                let lane = self.op("and.b32", RegClass::B32, vec![tid.into(), Operand::Imm(127)]);
                Some(self.op("setp.lt.u32", RegClass::Pred, vec![lane.into(), Operand::Imm(active)]))
            }
            None if active < self.k.threads as i64 => {
                Some(self.op("setp.lt.u32", RegClass::Pred, vec![tid.into(), Operand::Imm(active)]))
            }
            None => None,
        }
    }

    /// Whether the calling thread's register group `l` holds valid elements.
    pub(crate) fn valid_pred(&mut self, lay: &FragLayout, l: &[i64]) -> Option<Reg> {
        let mut p = self.active_pred(&lay.root.clone());
        for (a, &d) in lay.kept.iter().enumerate() {
            let root = &lay.root;
            if !root.dim_padded(d) {
                continue;
            }
            // Valid when thread part + register offset < extent.
            let bound = root.shape[d] - root.reg_offset(d, l[a]);
            if bound > root.dims[d].max_thread_part() {
                continue;
            }
            let base = self.tbase(&lay.root.clone(), d);
            let q = if bound <= 0 {
                self.const_pred(false)
            } else {
                let b = self.materialize(&Val { op: base, ty: DType::I32 });
                self.op("setp.lt.s32", RegClass::Pred, vec![b.into(), Operand::Imm(bound)])
            };
            p = self.and_pred(p, Some(q));
        }
        p
    }
}
