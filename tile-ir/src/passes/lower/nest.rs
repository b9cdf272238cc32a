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

/// The buffers the condition of `s` loads, when `s` is a nest whose body
/// is one `if` testing some of its variables only ([`row_guard`]); `None`
/// for any other statement.
pub(crate) fn row_guard_loads(k: &Kernel, s: &TStmt) -> Option<Vec<BufferId>> {
    let n = crate::passes::layout_infer::parallel_nest(s)?.ok()?;
    let (_, cond, _) = row_guard(k, &n)?;
    let mut loads = Vec::new();
    cond.collect_loads(&mut loads);
    Some(loads)
}

impl<'a> Lx<'a> {
    pub(crate) fn lower_nest(&mut self, n: &Nest<'_>) -> R<()> {
        // A vote asked for by the schedule (`Lx::vote_wait`) is this nest's.
        let vote = std::mem::take(&mut self.vote_wait);
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
                let guarded = (cond, then);
                let result = self.lower_guarded_nest(n, &layout, primary, &var_regs, &regs, &dims, guarded, vote);
                self.nest = None;
                self.nest_bound = saved_bound;
                return result;
            }
        }
        if vote {
            // No row test to vote on: the wait the vote would have guarded.
            self.emit(Inst::WgmmaWait { pending: 0 });
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
    ///
    /// `vote`: every group's test first, then a vote of the warpgroup
    /// (`bar.red.or` on its own barrier) and, where any of its threads
    /// takes a branch, `wgmma.wait_group 0` and the groups' branches: the
    /// accumulator the body rescales may still be written by a wgmma in
    /// flight (a deferred gemm of the warp-specialized loop), which only a
    /// warpgroup-uniform wait may retire.
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
        vote: bool,
    ) -> R<()> {
        let mut groups: BTreeMap<Vec<i64>, Vec<&Vec<i64>>> = BTreeMap::new();
        for l in regs {
            groups.entry(dims.iter().map(|&a| l[a]).collect()).or_default().push(l);
        }
        let before = self.errors.len();
        let mut branches: Vec<(Reg, Vec<Stmt>)> = Vec::new();
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
            if vote {
                branches.push((c, body));
            } else {
                self.emit_if(Some(c), false, body, vec![]);
            }
        }
        let Some(&(mut any, _)) = branches.first().filter(|_| vote) else {
            return Ok(());
        };
        for &(c, _) in &branches[1..] {
            any = self.op("or.pred", RegClass::Pred, vec![any.into(), c.into()]);
        }
        let id = self.warpgroup_barrier_id();
        let taken = self.f.new_reg(RegClass::Pred);
        self.emit(Inst::BarRedOr { dst: taken, src: any, id: id.into(), threads: 128 });
        let mut code = vec![Stmt::Inst { inst: Inst::WgmmaWait { pending: 0 }, guard: None }];
        for (c, body) in branches {
            code.push(Stmt::If { cond: c, negate: false, uniform: false, then: body, otherwise: vec![] });
        }
        // Uniform over the warpgroup (the vote's), so over each warp.
        self.cur().push(Stmt::If { cond: taken, negate: false, uniform: true, then: code, otherwise: vec![] });
        Ok(())
    }
}
