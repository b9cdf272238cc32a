//! Helpers: a closure bound by `let name = |params| { .. };` inside a kernel
//! is inlined wherever it is called (`name(args);`, a statement), so that
//! a kernel doing the same work on several buffers (two warpgroups' online
//! softmax, two halves of a tile) writes it once.
//!
//! Expects a closure of plain parameters (`x`, `mut x`, `x: f32`, `s: &mut
//! _`), no `move`, `async`, `const`, `for<..>` or return type.
//! Guarantees, for each call, exactly the statements the body would lower
//! to if written out at the call with its parameters replaced by the
//! arguments: a buffer argument (`&buf`, `&mut buf`) makes the parameter
//! another name of that buffer; a scalar argument is evaluated once at the
//! call into a new variable (immutable unless the parameter is `mut x`;
//! a variable that cannot change, passed as itself, is not copied). The
//! body sees the names visible where the helper is defined (lexical
//! capture, as a Rust closure), its parameters, and the kernel's constants
//! and type parameters; what it captures it reads and writes at the call. A
//! helper cannot call itself (its name is bound after its body, as in Rust).
//! Writing through a parameter passed as `&buf` is an error at the write
//! (Rust's rule for `&`), as is a helper never called (its body would never
//! be compiled or checked) and a call whose value is used (helpers are
//! statements: they return nothing). Errors inside the body point into it
//! (each reported once, however many calls make it), followed by one at
//! each call they come from; the code each call produces carries the
//! body's spans.

use super::syntax::path_ident;
use super::{Binding, Lowerer};
use crate::diag::{Lowered, Reported};
use syn::{Expr as SynExpr, Ident, Pat, Stmt as SynStmt};
use tile_ir::{Scope, Stmt, StmtKind, VarKind};

/// A helper's definition: its closure and what it captures.
pub(super) struct Helper {
    pub(super) name: Ident,
    closure: syn::ExprClosure,
    /// The names visible where it was defined (its captures).
    scopes: Vec<Vec<(String, Binding)>>,
    /// Of those, the buffers that are read-only aliases (`&buf` parameters
    /// of an enclosing helper).
    read_only: Vec<String>,
    /// How many calls named it (failed ones too).
    pub(super) calls: usize,
}

/// One parameter of a helper: its name, whether it is `mut`, its type.
struct Param<'a> {
    ident: &'a Ident,
    mutable: bool,
    ty: Option<&'a syn::Type>,
}

impl Lowerer<'_> {
    /// `let name = |params| body;`: checks the closure's form and binds the
    /// name; the body is lowered at each call.
    pub(super) fn helper_decl(&mut self, local: &syn::Local, closure: &syn::ExprClosure) -> Lowered<()> {
        let ident = match &local.pat {
            // `let mut f = ..`, as Rust wants of a closure that writes what it captures, is fine.
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => &p.ident,
            other => {
                self.bind_pattern_poisoned(other);
                return Err(self.errors.spanned(other, "a helper is bound to one name: `let name = |a, b| { .. };`"));
            }
        };
        let fail = |this: &mut Self, r: Reported| {
            this.bind(ident, Binding::Poisoned);
            Err(r)
        };
        let unsupported = if let Some(l) = &closure.lifetimes {
            Some((l.for_token.span, "`for<..>`"))
        } else if let Some(c) = &closure.constness {
            Some((c.span, "`const`"))
        } else if let Some(a) = &closure.asyncness {
            Some((a.span, "`async`"))
        } else {
            closure.capture.as_ref().map(|m| (m.span, "`move`"))
        };
        if let Some((span, what)) = unsupported {
            let why = if what == "`move`" {
                "; a helper is inlined where it is called and reads what it captures there"
            } else {
                ""
            };
            let r = self.errors.at(span, format!("{what} is not supported on a helper{why}"));
            return fail(self, r);
        }
        if matches!(closure.output, syn::ReturnType::Type(..)) {
            let r = self.errors.spanned(
                &closure.output,
                "a helper returns nothing (its calls are statements): remove the return type and write results into a buffer parameter (`out: &mut _`)",
            );
            return fail(self, r);
        }
        let mut bad = None;
        for p in &closure.inputs {
            if let Err(r) = helper_param(p).map_err(|(at, msg)| self.errors.spanned(&at, msg)) {
                bad = Some(r);
            }
        }
        if let Some(r) = bad {
            return fail(self, r);
        }
        let read_only = self.read_only_aliases.clone();
        self.helpers.push(Helper {
            name: ident.clone(),
            closure: closure.clone(),
            scopes: self.scopes.clone(),
            read_only,
            calls: 0,
        });
        self.bind(ident, Binding::Helper(self.helpers.len() - 1));
        Ok(())
    }

    /// `name(args);` for a helper: the body inlined into `out`.
    pub(super) fn helper_call(
        &mut self,
        h: usize,
        call: &syn::ExprCall,
        modifiers: &[&syn::ExprMethodCall],
        out: &mut Vec<Stmt>,
    ) -> Lowered<()> {
        self.helpers[h].calls += 1;
        let name = self.helpers[h].name.clone();
        if let Some(m) = modifiers.first() {
            return Err(self
                .errors
                .at(m.method.span(), format!("`{name}` is a helper; `.{}()` does not apply to it", m.method)));
        }
        let closure = self.helpers[h].closure.clone();
        let n = closure.inputs.len();
        if call.args.len() != n {
            return Err(self.errors.spanned(
                call,
                format!(
                    "the helper `{name}` takes {n} argument{}, but {} {} given",
                    if n == 1 { "" } else { "s" },
                    call.args.len(),
                    if call.args.len() == 1 { "was" } else { "were" }
                ),
            ));
        }
        // The arguments, in the caller's scope: buffers by name, scalars
        // evaluated once into a variable each.
        let mut bound: Vec<(Ident, Binding, bool)> = Vec::new();
        let mut failed = false;
        for (pat, arg) in closure.inputs.iter().zip(call.args.iter()) {
            let Ok(param) = helper_param(pat) else {
                failed = true;
                continue;
            };
            match self.helper_arg(&name, &param, arg, out) {
                Ok((binding, read_only)) => bound.push((param.ident.clone(), binding, read_only)),
                Err(Reported) => failed = true,
            }
        }
        if failed {
            return Err(Reported);
        }
        // The body, in the scope of the definition plus the parameters.
        let scopes = std::mem::replace(&mut self.scopes, self.helpers[h].scopes.clone());
        let read_only = std::mem::replace(&mut self.read_only_aliases, self.helpers[h].read_only.clone());
        self.scopes.push(Vec::new());
        for (ident, binding, ro) in bound {
            self.bind(&ident, binding);
            if ro {
                self.read_only_aliases.push(ident.to_string());
            }
        }
        let before = self.errors.len();
        let result = match &*closure.body {
            SynExpr::Block(b) if b.label.is_none() => {
                let body = self.block(&b.block.stmts);
                out.extend(body);
                Ok(())
            }
            e => self.stmt(&SynStmt::Expr(e.clone(), Some(Default::default())), out),
        };
        self.scopes = scopes;
        self.read_only_aliases = read_only;
        // The body's errors point into the body (each once, whatever the
        // number of calls); say which call they come from.
        let found = self.errors.len() - before;
        self.errors.drop_repeats_from(before);
        if found > 0 {
            self.errors.spanned(
                call,
                format!(
                    "in this call of the helper `{name}`: the error{} above {} in its body, with these arguments",
                    if found == 1 { "" } else { "s" },
                    if found == 1 { "is" } else { "are" }
                ),
            );
        }
        result
    }

    /// One argument of a helper call: the parameter's binding and whether
    /// it is a read-only alias of a buffer.
    fn helper_arg(
        &mut self,
        helper: &Ident,
        param: &Param<'_>,
        arg: &SynExpr,
        out: &mut Vec<Stmt>,
    ) -> Lowered<(Binding, bool)> {
        let wants_ref = match param.ty {
            Some(syn::Type::Reference(r)) => Some(r.mutability.is_some()),
            _ => None,
        };
        let p = param.ident;
        if let SynExpr::Reference(r) = arg {
            let Some(ident) = path_ident(&r.expr) else {
                return Err(self.errors.spanned(
                    arg,
                    "a helper takes a buffer by reference to its name (`&buf`, `&mut buf`); pass a scalar by value",
                ));
            };
            let buf = match self.lookup(&ident.to_string()) {
                Some(Binding::Buffer(b)) => b,
                Some(Binding::Poisoned) => return Err(Reported),
                Some(Binding::Var { .. }) => {
                    return Err(self.errors.spanned(
                        arg,
                        format!(
                        "`{ident}` is a scalar: pass it by value (`{ident}`), helpers take only buffers by reference"
                    ),
                    ))
                }
                Some(Binding::Helper(_)) => {
                    return Err(self
                        .errors
                        .at(ident.span(), format!("`{ident}` is a helper; a helper takes buffers and scalars")))
                }
                None => return Err(self.unknown_name(ident)),
            };
            let mutable = r.mutability.is_some();
            if wants_ref == Some(true) && !mutable {
                return Err(self
                    .errors
                    .spanned(arg, format!("the parameter `{p}` of `{helper}` is `&mut`: pass `&mut {ident}`")));
            }
            let b = self.k.buffer(buf);
            if mutable && b.scope == Scope::Global && !b.mutable {
                return Err(self.read_only(ident));
            }
            if mutable {
                self.write_through(ident)?;
            }
            if param.mutable {
                return Err(self.errors.at(
                    p.span(),
                    format!(
                        "`mut {p}` takes a scalar by value, but `{helper}` is given a buffer here; remove the `mut`"
                    ),
                ));
            }
            return Ok((Binding::Buffer(buf), !mutable));
        }
        if wants_ref.is_some() {
            return Err(self.errors.spanned(
                arg,
                format!("the parameter `{p}` of `{helper}` is a reference: pass a buffer (`&buf` or `&mut buf`)"),
            ));
        }
        // A variable that cannot change (not `let mut`) is passed as itself:
        // the same value as a copy, without one.
        if let Some(ident) = path_ident(arg).filter(|_| !param.mutable) {
            if let Some(Binding::Var { id, parallel, depth }) = self.lookup(&ident.to_string()) {
                let (kind, dtype) = (self.k.var(id).kind, self.k.var(id).dtype);
                let same_type = match param.ty {
                    Some(syn::Type::Infer(_)) | None => true,
                    Some(ty) => self.dtype_of_type(ty)? == dtype,
                };
                if kind != VarKind::Mut && same_type {
                    return Ok((Binding::Var { id, parallel, depth }, false));
                }
            }
        }
        let v = self.expr(arg)?;
        let (value, dtype) = match param.ty {
            Some(syn::Type::Infer(_)) | None => self.materialize(v, arg)?,
            Some(ty) => {
                let dtype = self.dtype_of_type(ty)?;
                (self.coerce(v, dtype, arg, &format!("the parameter `{p}`"))?, dtype)
            }
        };
        let kind = if param.mutable { VarKind::Mut } else { VarKind::Let };
        let var = self.k.add_var(p.to_string(), dtype, kind);
        let span = self.span_id(arg);
        out.push(Stmt::spanned(StmtKind::Let { var, value }, span));
        Ok((Binding::Var { id: var, parallel: false, depth: self.parallel_depth }, false))
    }

    /// A write through `ident`: an error where it names a buffer that a
    /// helper's caller passed as `&buf`.
    pub(super) fn write_through(&mut self, ident: &Ident) -> Lowered<()> {
        if !self.read_only_aliases.iter().any(|n| ident == n) {
            return Ok(());
        }
        Err(self.errors.at(
            ident.span(),
            format!("cannot write to `{ident}`: the helper's caller passed it as `&buf`; pass `&mut buf` to let the helper write it"),
        ))
    }

    /// Every helper that no call named: an error at its name.
    pub(super) fn uncalled_helpers(&mut self) {
        let uncalled: Vec<Ident> = self.helpers.iter().filter(|h| h.calls == 0).map(|h| h.name.clone()).collect();
        for name in uncalled {
            self.errors.at(
                name.span(),
                format!("the helper `{name}` is never called; its body is compiled only where it is called: call it or remove it"),
            );
        }
    }

    /// A helper's name used where a value, buffer or tile operation goes.
    pub(super) fn helper_misused(&mut self, ident: &Ident) -> Reported {
        self.errors.at(
            ident.span(),
            format!("`{ident}` is a helper: call it as a statement (`{ident}(..);`); it returns nothing"),
        )
    }
}

/// A helper parameter's name, `mut` and type; or where and why it is not one.
fn helper_param(p: &Pat) -> Result<Param<'_>, (proc_macro2::TokenStream, &'static str)> {
    use quote::ToTokens;
    const FORM: &str = "a helper parameter is a name (`x`, `mut x`), optionally typed (`x: f32`, `s: &mut _`, `q: &_`)";
    let (pat, ty) = match p {
        Pat::Type(t) => (&*t.pat, Some(&*t.ty)),
        other => (other, None),
    };
    match pat {
        Pat::Ident(i) if i.by_ref.is_none() && i.subpat.is_none() => {
            Ok(Param { ident: &i.ident, mutable: i.mutability.is_some(), ty })
        }
        other => Err((other.to_token_stream(), FORM)),
    }
}
