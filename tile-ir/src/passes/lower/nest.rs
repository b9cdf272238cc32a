//! Parallel nests: unrolled over the registers of their layout, guarded by
//! the layout's validity and, for replicated layouts, the first replica.

use super::*;

impl<'a> Lx<'a> {
    pub(crate) fn lower_nest(&mut self, n: &Nest<'_>) -> R<()> {
        let layout = self
            .plan
            .nests
            .get(&n.vars[0])
            .cloned()
            .ok_or_else(|| self.err("internal: parallel loop has no layout"))?;
        if layout.shape() != n.extents {
            return Err(self.err("internal: parallel loop layout does not match its extents"));
        }
        if layout.num_regs() > MAX_REGS_PER_THREAD {
            return Err(self.err(format!(
                "this parallel loop gives each thread {} iterations to unroll (at most {MAX_REGS_PER_THREAD}); use a serial loop around a smaller parallel loop",
                layout.num_regs()
            )));
        }
        // Replicas (threads that differ only along dims the layout drops) run
        // the same iterations; only the first one may touch memory.
        let mut primary = None;
        for d in 0..layout.root.rank() {
            if layout.kept.contains(&d) || layout.root.dims[d].fields.is_empty() {
                continue;
            }
            let b = self.tbase(&layout.root.clone(), d);
            let q = self.op("setp.eq.u32", RegClass::Pred, vec![b, Operand::Imm(0)]);
            primary = self.and_pred(primary, Some(q));
        }
        let var_regs: Vec<Reg> = n.vars.iter().map(|_| self.new_reg(RegClass::B32)).collect();
        for (v, r) in n.vars.iter().zip(&var_regs) {
            self.vars.insert(*v, *r);
        }
        let saved_bound = std::mem::take(&mut self.nest_bound);
        let mut result = Ok(());
        for r in 0..layout.num_regs() {
            let l = layout.unflatten(r);
            let valid = self.valid_pred(&layout, &l);
            let body = self.capture(|s| {
                for a in 0..l.len() {
                    let c = s.coord(&layout, a, l[a]);
                    let c = s.add_i32(c, Operand::Imm(n.starts[a]));
                    s.mov(var_regs[a], c, DType::I32);
                }
                s.nest = Some(NestCtx { layout: layout.clone(), vars: n.vars.clone(), l: l.clone(), primary });
                let before = s.errors.len();
                s.lower_block(n.body);
                s.nest = None;
                // Report each problem once, not once per register.
                if s.errors.len() > before {
                    return Err(s.errors.remove(before));
                }
                Ok(())
            });
            match body {
                Ok(b) => self.emit_if(valid, false, b, vec![]),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.nest = None;
        self.nest_bound = saved_bound;
        result
    }
}
