//! `gemm(&a, &b, &mut acc)` with `.t()` on an operand and the modifiers
//! `.clear()` and `.policy(..)`.
//!
//! Recognizes the chain and the operands, and checks placement (not inside
//! `parallel`) and the modifiers. The operand and accumulator rules
//! (`tile_ir::verify::rules`: scopes, element types, rank 2) are asked here
//! so that the error points at the operand at fault; whether the shapes
//! agree is left to the verifier, which reports it at the `gemm(..)` call
//! with the `.t()` that would fit.

use super::syntax::{const_shape_of, format_shape, path_ident, scope_phrase, transposed, warp_policy};
use super::{Binding, Lowerer};
use crate::diag::{Lowered, Reported};
use syn::Expr as SynExpr;
use tile_ir::verify::rules;
use tile_ir::{BufferId, DType, Scope, Stmt, StmtKind, WarpPolicy};

impl Lowerer<'_> {
    /// `gemm(&a, &b, &mut acc)` with optional `.t()` on `a`/`b` and the
    /// modifiers `.clear()` and `.policy(FullRow | FullCol | Square | Warpgroup(w))`.
    pub(super) fn gemm_stmt(
        &mut self,
        call: &syn::ExprCall,
        modifiers: &[&syn::ExprMethodCall],
        out: &mut Vec<Stmt>,
    ) -> Lowered<()> {
        // The statement is the call: errors about it underline `gemm(..)`,
        // not the modifiers after it, which have their own errors.
        let span = self.span_id(call);
        let mut failed = false;
        if self.parallel_depth > 0 {
            self.errors.spanned(
                &*call.func,
                "`gemm` is a block-wide operation and cannot be used inside a `parallel` loop, whose iterations run on different threads; call it once per tile, outside the loop",
            );
            failed = true;
        }
        let mut clear: Option<&syn::Ident> = None;
        let mut policy: Option<(WarpPolicy, &syn::Ident)> = None;
        for m in modifiers {
            let method = m.method.to_string();
            match method.as_str() {
                "clear" => {
                    if !m.args.is_empty() {
                        self.errors.spanned(&m.args, "`.clear()` takes no arguments");
                        failed = true;
                    } else if let Some(prev) = clear {
                        let mut e = syn::Error::new(m.method.span(), "`.clear()` is given twice");
                        e.combine(syn::Error::new(prev.span(), "first given here"));
                        self.errors.push(e);
                        failed = true;
                    }
                    clear = Some(&m.method);
                }
                "policy" => {
                    let parsed = match m.args.first() {
                        Some(arg) if m.args.len() == 1 => warp_policy(arg),
                        _ => None,
                    };
                    match parsed {
                        None => {
                            self.errors.spanned(
                                *m,
                                "`.policy(..)` takes one warp policy: `FullRow` (warps split M), `FullCol` (warps split N), `Square` or `Warpgroup(w)` (warpgroup `w` alone, `w` an integer literal)",
                            );
                            failed = true;
                        }
                        Some(p) => {
                            if let Some((_, prev)) = policy {
                                let mut e = syn::Error::new(m.method.span(), "`.policy(..)` is given twice");
                                e.combine(syn::Error::new(prev.span(), "first given here"));
                                self.errors.push(e);
                                failed = true;
                            }
                            policy = Some((p, &m.method));
                        }
                    }
                }
                "t" => {
                    self.errors.at(
                        m.method.span(),
                        "`.t()` transposes an operand of `gemm`, not its result: write `gemm(&a, &b.t(), &mut acc)`",
                    );
                    failed = true;
                }
                _ => {
                    self.errors.at(
                        m.method.span(),
                        format!("unknown method `.{method}()` on `gemm(..)`; it supports `.clear()` and `.policy(FullRow | FullCol | Square | Warpgroup(w))`"),
                    );
                    failed = true;
                }
            }
        }
        if call.args.len() != 3 {
            let n = call.args.len();
            self.errors.spanned(
                call,
                format!(
                    "`gemm` takes 3 arguments, but {n} {} given: `gemm(&a, &b, &mut acc)` computes acc += a · b",
                    if n == 1 { "was" } else { "were" }
                ),
            );
            return Err(Reported);
        }
        let args: Vec<&SynExpr> = call.args.iter().collect();
        let a = self.gemm_operand(args[0], 'A');
        let b = self.gemm_operand(args[1], 'B');
        let c = self.gemm_accumulator(args[2]);
        let (Ok((a, trans_a)), Ok((b, trans_b)), Ok(c)) = (a, b, c) else {
            return Err(Reported);
        };
        let (ab, bb) = (self.k.buffer(a).clone(), self.k.buffer(b).clone());
        // Element types: f16/bf16 operands of one type (checked per operand
        // in `gemm_operand`), an f32 accumulator (in `gemm_accumulator`).
        if rules::gemm_operand_dtype_ok(ab.dtype) && rules::gemm_operand_dtype_ok(bb.dtype) && ab.dtype != bb.dtype {
            self.errors.spanned(
                args[1],
                format!(
                    "`gemm` operands must hold the same element type, but `{}` holds `{}` and `{}` holds `{}`; convert one with `copy` into a buffer of the other type",
                    ab.name, ab.dtype, bb.name, bb.dtype
                ),
            );
            failed = true;
        }
        // Whether the shapes agree (`M`, `N`, `K`) is the verifier's rule
        // (`tile_ir::verify::rules::gemm_mismatch`), reported at this
        // statement with the `.t()` that would fit.
        if failed {
            return Err(Reported);
        }
        let kind = StmtKind::Gemm {
            a,
            b,
            c,
            trans_a,
            trans_b,
            clear: clear.is_some(),
            policy: policy.map_or(WarpPolicy::Square, |(p, _)| p),
        };
        out.push(Stmt::spanned(kind, span));
        Ok(())
    }

    /// Operand `A` (a shared buffer or a fragment) or `B` (a shared buffer)
    /// of `gemm`: `&x` or `&x.t()`, a rank-2 f16/bf16 buffer. Returns the
    /// buffer and whether it is transposed.
    pub(super) fn gemm_operand(&mut self, e: &SynExpr, which: char) -> Lowered<(BufferId, bool)> {
        let SynExpr::Reference(r) = e else {
            let fix = match (transposed(e), path_ident(e)) {
                (Some(t), _) => match path_ident(&t.receiver) {
                    Some(name) => format!("`&{name}.t()`"),
                    None => "`&buf.t()`".to_string(),
                },
                (None, Some(name)) => format!("`&{name}`"),
                (None, None) => "`&buf`".to_string(),
            };
            return Err(self.errors.spanned(e, format!("pass the operand of `gemm` by reference: {fix}")));
        };
        let (inner, trans) = match transposed(&r.expr) {
            Some(t) => {
                if !t.args.is_empty() {
                    return Err(self.errors.spanned(&t.args, "`.t()` takes no arguments"));
                }
                if transposed(&t.receiver).is_some() {
                    return Err(self.errors.spanned(t, "`.t()` twice is no transpose; remove both"));
                }
                (&*t.receiver, true)
            }
            None => (&*r.expr, false),
        };
        let Some(ident) = path_ident(inner) else {
            return Err(self.errors.spanned(
                e,
                format!(
                    "operand {which} of `gemm` is a buffer by name: `&{}` (or `&{}.t()` for a transposed one)",
                    if which == 'A' { "a" } else { "b" },
                    if which == 'A' { "a" } else { "b" }
                ),
            ));
        };
        let buf = match self.lookup(&ident.to_string()) {
            Some(Binding::Buffer(b)) => b,
            Some(Binding::Poisoned) => return Err(Reported),
            Some(Binding::Var { .. }) => {
                return Err(self.errors.at(ident.span(), format!("`{ident}` is a scalar; `gemm` multiplies buffers")))
            }
            Some(Binding::Helper(_)) => return Err(self.helper_misused(ident)),
            None => return Err(self.unknown_name(ident)),
        };
        let b = self.k.buffer(buf).clone();
        let scope_ok = match which {
            'A' => rules::gemm_a_scope_ok(b.scope),
            _ => rules::gemm_b_scope_ok(b.scope),
        };
        if !scope_ok {
            let expected = if which == 'A' { "a shared buffer or a fragment" } else { "a shared buffer" };
            let fix = if b.scope == Scope::Global {
                "; copy a tile of the tensor into a `shared::<..>()` buffer first"
            } else {
                ""
            };
            return Err(self.errors.at(
                ident.span(),
                format!("operand {which} of `gemm` is {expected}, but `{ident}` is a {}{fix}", scope_phrase(b.scope)),
            ));
        }
        let mut failed = false;
        if b.rank() != 2 {
            self.errors.at(
                ident.span(),
                format!(
                    "operand {which} of `gemm` is a matrix, but `{ident}` has rank {} ({})",
                    b.rank(),
                    format_shape(&const_shape_of(&b))
                ),
            );
            failed = true;
        }
        if !rules::gemm_operand_dtype_ok(b.dtype) {
            self.errors.at(
                ident.span(),
                format!(
                    "`gemm` multiplies `f16` or `bf16` operands (on tensor cores), but `{ident}` holds `{}`",
                    b.dtype
                ),
            );
            failed = true;
        }
        if failed {
            return Err(Reported);
        }
        Ok((buf, trans))
    }

    /// The accumulator of `gemm`: `&mut acc`, a rank-2 f32 fragment.
    pub(super) fn gemm_accumulator(&mut self, e: &SynExpr) -> Lowered<BufferId> {
        if let Some(t) = transposed(e) {
            return Err(self.errors.spanned(
                t,
                "the accumulator of `gemm` cannot be transposed; transpose an operand instead: (a · b)ᵀ = bᵀ · aᵀ",
            ));
        }
        let buf = self.buffer_arg(e, true, "gemm")?;
        let b = self.k.buffer(buf).clone();
        if !rules::gemm_accumulator_ok(b.scope, b.dtype) || b.rank() != 2 {
            let what = if b.scope != Scope::Fragment {
                format!("a {}", scope_phrase(b.scope))
            } else if b.dtype != DType::F32 {
                format!("a fragment of `{}`", b.dtype)
            } else {
                format!("a fragment of rank {}", b.rank())
            };
            return Err(self.errors.spanned(
                e,
                format!(
                    "the accumulator of `gemm` is an `f32` fragment of shape [M, N] (`fragment::<f32, M, N>()`), but `{}` is {what}",
                    b.name
                ),
            ));
        }
        Ok(buf)
    }
}
