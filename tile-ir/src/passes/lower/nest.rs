//! Parallel nests: unrolled over the registers of their layout, guarded by
//! the layout's validity and, for replicated layouts, the first replica.
//!
//! A nest whose body is one `if` testing only some of its variables (a row
//! factor's test, `if alpha[i] != 1.0 { acc[(i, j)] = acc[(i, j)] * alpha[i]; }`)
//! tests it once per distinct value of those variables, around all the
//! registers that share it ([`row_guard`]): a branch over a row's
//! multiplications instead of one predicated multiplication per register,
//! so that a thread whose rows skip does not issue them. Iterations of a
//! parallel nest are independent, so grouping them reorders nothing
//! observable.

use super::*;
use crate::passes::pipeline::expr_vars;
use std::collections::BTreeMap;

/// The nest dims a body of one `if` (no `else`) tests, when testing it once
/// per group of registers agreeing on them is the same as testing it per
/// register: the condition reads some but not all of the nest's variables,
/// and no buffer or variable the body writes.
fn row_guard<'b>(k: &Kernel, n: &Nest<'b>) -> Option<(Vec<usize>, &'b Expr, &'b [TStmt])> {
    let [TStmt { kind: StmtKind::If { cond, then, otherwise }, .. }] = n.body else {
        return None;
    };
    if !otherwise.is_empty() {
        return None;
    }
    let (mut vars, mut loads) = (HashSet::new(), false);
    expr_vars(cond, &mut vars, &mut loads);
    let dims: Vec<usize> = (0..n.vars.len()).filter(|&a| vars.contains(&n.vars[a])).collect();
    if dims.len() == n.vars.len() {
        return None;
    }
    let mut bufs = Vec::new();
    cond.collect_loads(&mut bufs);
    let mut bound = HashSet::new();
    crate::passes::pipeline::bound_vars(then, &mut bound);
    let writes = |b: BufferId| then.iter().any(|s| crate::passes::pipeline::touches_memory(k, s, b).1);
    if bufs.iter().any(|&b| writes(b)) || !vars.is_disjoint(&bound) {
        return None;
    }
    Some((dims, cond, then))
}

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
        if let Some((dims, cond, then)) = row_guard(self.k, n) {
            let regs: Vec<Vec<i64>> = (0..layout.num_regs()).map(|r| layout.unflatten(r)).collect();
            if regs.iter().all(|l| self.valid_pred(&layout, l).is_none()) {
                let result = self.lower_guarded_nest(n, &layout, primary, &var_regs, &regs, &dims, (cond, then));
                self.nest = None;
                self.nest_bound = saved_bound;
                return result;
            }
        }
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

    /// A nest whose body is `if cond { then }` with `cond` reading the
    /// variables of `dims` only ([`row_guard`]): per group of registers
    /// agreeing on those dims, `cond` once (bound at the group's first
    /// register), then the group's iterations of `then` under one branch
    /// (ptxas turns a branch per register into a chain of branches).
    #[allow(clippy::too_many_arguments)]
    fn lower_guarded_nest(
        &mut self,
        n: &Nest<'_>,
        layout: &FragLayout,
        primary: Option<Reg>,
        var_regs: &[Reg],
        regs: &[Vec<i64>],
        dims: &[usize],
        (cond, then): (&Expr, &[TStmt]),
    ) -> R<()> {
        let mut groups: BTreeMap<Vec<i64>, Vec<&Vec<i64>>> = BTreeMap::new();
        for l in regs {
            groups.entry(dims.iter().map(|&a| l[a]).collect()).or_default().push(l);
        }
        let before = self.errors.len();
        for members in groups.values() {
            let bind = |s: &mut Self, l: &Vec<i64>, only: Option<&[usize]>| {
                for a in 0..l.len() {
                    if only.is_some_and(|d| !d.contains(&a)) {
                        continue;
                    }
                    let c = s.coord(layout, a, l[a]);
                    let c = s.add_i32(c, Operand::Imm(n.starts[a]));
                    s.mov(var_regs[a], c, DType::I32);
                }
                s.nest = Some(NestCtx { layout: layout.clone(), vars: n.vars.clone(), l: l.clone(), primary });
            };
            bind(self, members[0], Some(dims));
            let c = self.expr(cond)?;
            let c = self.materialize(&c);
            let body = self.capture(|s| {
                for l in members {
                    bind(s, l, None);
                    s.lower_block(then);
                }
                Ok(())
            })?;
            self.nest = None;
            if self.errors.len() > before {
                return Err(self.errors.remove(before));
            }
            self.emit_if(Some(c), false, body, vec![]);
        }
        Ok(())
    }
}
