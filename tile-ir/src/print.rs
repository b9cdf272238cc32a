//! The text form of the Tile IR (for `TILE_DUMP` and snapshot tests).
//!
//! Expects: any [`Kernel`], verified or not (dangling handles print as
//! `%7?`/`@7?` rather than panicking). Guarantees: the output is deterministic
//! and every construct of the IR is printed. Example:
//!
//! ```text
//! kernel softmax<%0 M, %1 N>(@0 x: &f16[M, N], @1 y: &mut f16[M, N], %2 scale: f32) threads=128 grid=(M, 1, 1) {
//!   %3 bx = block_idx.x
//!   @2 row: fragment f32[1024]
//!   @3 mx: fragment f32[1]
//!   copy x[bx, 0] -> row fill(-inf)
//!   reduce.max row -> mx, dim=0
//!   for %4 j in parallel 0..1024 {
//!     row[j] = exp2((row[j] - mx[0]) * scale)
//!   }
//!   copy row -> y[bx, 0]
//! }
//! ```
//!
//! Syntax:
//! - Header: `kernel NAME<DIMS>(PARAMS) threads=T grid=(X, Y, Z) {`, with
//!   before the `{`, when not the default, `swizzle=P` (`rasterize`),
//!   `cluster=(X, Y, Z)`, `warp_specialize=false`, `blocks_per_sm=N` and
//!   `dependent_launch=true`, in that order. Dims are declared `%id name`; tensor params `@id name: &T[shape]` (`&mut` if
//!   mutable); scalar params `%id name: T`.
//! - Then block indices `%id name = block_idx.x|y|z`, then every non-parameter
//!   buffer `@id name: shared|fragment|local|global T[shape]` (a shared buffer
//!   with an `annotate_layout` reads `shared(swizzle(3))`, `shared(padded(16))`
//!   or `shared(row_major())`; a sub-view of a shared buffer adds
//!   `= view @parent[origin]`, e.g. `@3 k_pe: shared f16[64, 64] = view @2[0, 512]`),
//!   then the body.
//! - Variables and buffers are referred to by name when the name is unique in
//!   its arena and an identifier, else by `%id` / `@id` (declarations always
//!   give both).
//! - Constants: `i32` bare (`7`), `f32` with a point or exponent (`1.0`,
//!   `1e-7`, `inf`, `-inf`, `NaN`), other types suffixed (`7u32`, `7i64`,
//!   `1.5f16`, `1.5bf16`), `true`/`false`.
//! - Expressions: Rust precedence and operators (`+ - * / % & | ^ << >>`,
//!   comparisons, unary `-` and `!`), `x as T`, calls `min(a, b)`,
//!   `max(a, b)`, `exp2(a)` .., `fma(a, b, c)`, `select(c, a, b)`; element
//!   reads `buf[i, j]`.
//! - Statements: `let %id name: T = e`, `let mut ..`, `name = e`,
//!   `buf[i, j] = e`, `for %id i in [parallel |pipelined(S) ]a..b { .. }`,
//!   `if c { .. } else { .. }`, `copy SRC -> DST[ fill(e)]` (a global side
//!   is `t[origin..]`, the tile's corner), `fill buf, e`,
//!   `reduce.sum|max|min src -> dst, dim=D[, keep]`,
//!   `gemm a[.t], b[.t] -> c[, clear][, policy=full_row|full_col]`
//!   (`.t`: the operand is stored transposed; no policy printed: `square`),
//!   `atomic_add t[i, j], e`, `barrier`.
//! - Rasterization (`use_swizzle`), when set, follows the grid in the header:
//!   `grid=(X, Y, Z) swizzle=8`.
//!
//! [`parse_kernel`] reads this form back (tests written as text, replaying a
//! `TILE_DUMP`).

mod parse;

pub use parse::{parse_kernel, ParseError};

use crate::ir::CacheHint;
use crate::ir::{
    BinOp, BufferId, DType, Expr, Extent, Kernel, LoopKind, ParamKind, ReduceOp, Scope, Stmt, StmtKind, TileRef, UnOp,
    Value, VarId, VarKind, WarpPolicy,
};
use crate::verify::unop_name;
use std::collections::HashMap;
use std::fmt::Write;

/// The text form of `kernel`.
pub fn print_kernel(kernel: &Kernel) -> String {
    let p = Printer::new(kernel);
    let mut out = String::new();
    p.header(&mut out);
    for s in &kernel.body {
        p.stmt(&mut out, s, 1);
    }
    out.push_str("}\n");
    out
}

/// The text of one expression, with names as [`print_kernel`] prints them.
pub fn print_expr(kernel: &Kernel, e: &Expr) -> String {
    let p = Printer::new(kernel);
    let mut out = String::new();
    p.expr(&mut out, e, 0);
    out
}

/// The first line of one statement's text form (a loop's or `if`'s header
/// ends with `{`), with names as [`print_kernel`] prints them.
pub fn print_stmt(kernel: &Kernel, s: &Stmt) -> String {
    let p = Printer::new(kernel);
    let mut out = String::new();
    p.stmt(&mut out, s, 0);
    out.lines().next().unwrap_or("").trim().to_string()
}

struct Printer<'k> {
    k: &'k Kernel,
    var_unique: Vec<bool>,
    buf_unique: Vec<bool>,
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(
            s,
            "let"
                | "mut"
                | "for"
                | "in"
                | "if"
                | "else"
                | "copy"
                | "fill"
                | "reduce"
                | "atomic_add"
                | "barrier"
                | "gemm"
                | "swizzle"
                | "parallel"
                | "pipelined"
                | "kernel"
                | "true"
                | "false"
                | "as"
                | "select"
                | "fma"
                | "min"
                | "max"
                | "block_idx"
                | "threads"
                | "grid"
                | "dim"
                | "keep"
                | "shared"
                | "fragment"
                | "local"
                | "global"
                | "exp2"
                | "exp"
                | "log2"
                | "log"
                | "abs"
                | "sqrt"
                | "rsqrt"
        )
        && !(s.starts_with("inf") || s.starts_with("NaN"))
        && DType::from_name(s).is_none()
}

fn uniqueness<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Vec<bool> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for n in names.clone() {
        *count.entry(n).or_default() += 1;
    }
    names.map(|n| count[n] == 1 && is_ident(n)).collect()
}

/// Binding strength of an expression's outermost operator (higher binds tighter).
fn prec(e: &Expr) -> u8 {
    match e {
        Expr::Binary { op, .. } => binop_prec(*op),
        Expr::Cast { .. } => 11,
        Expr::Unary { op: UnOp::Neg | UnOp::Not, .. } => 12,
        Expr::Const(Value::F32(v)) if v.is_sign_negative() => 12,
        Expr::Const(Value::F16(v)) if v.is_sign_negative() => 12,
        Expr::Const(Value::BF16(v)) if v.is_sign_negative() => 12,
        Expr::Const(Value::I32(v)) if *v < 0 => 12,
        Expr::Const(Value::I64(v)) if *v < 0 => 12,
        _ => 13,
    }
}

fn binop_prec(op: BinOp) -> u8 {
    match op {
        BinOp::Mul | BinOp::Div | BinOp::Rem => 10,
        BinOp::Add | BinOp::Sub => 9,
        BinOp::Shl | BinOp::Shr => 8,
        BinOp::And => 7,
        BinOp::Xor => 6,
        BinOp::Or => 5,
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => 4,
        BinOp::Min | BinOp::Max => 13,
    }
}

fn binop_symbol(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Rem => "%",
        BinOp::Min => "min",
        BinOp::Max => "max",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Gt => ">",
        BinOp::Ge => ">=",
        BinOp::Eq => "==",
        BinOp::Ne => "!=",
        BinOp::And => "&",
        BinOp::Or => "|",
        BinOp::Xor => "^",
        BinOp::Shl => "<<",
        BinOp::Shr => ">>",
    }
}

/// A float in the shortest text that reads back to the same value.
fn float_text(v: f32) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        }
    } else {
        format!("{v:?}")
    }
}

/// The text of a constant.
pub fn value_text(v: Value) -> String {
    match v {
        Value::F32(x) => float_text(x),
        Value::F16(x) => format!("{}f16", float_text(x.to_f32())),
        Value::BF16(x) => format!("{}bf16", float_text(x.to_f32())),
        Value::I32(x) => x.to_string(),
        Value::U32(x) => format!("{x}u32"),
        Value::I64(x) => format!("{x}i64"),
        Value::Bool(x) => x.to_string(),
    }
}

impl<'k> Printer<'k> {
    fn new(k: &'k Kernel) -> Self {
        Printer {
            k,
            var_unique: uniqueness(k.vars.iter().map(|v| v.name.as_str())),
            buf_unique: uniqueness(k.buffers.iter().map(|b| b.name.as_str())),
        }
    }

    fn var_ref(&self, id: VarId) -> String {
        match self.k.vars.get(id.0 as usize) {
            Some(v) if self.var_unique[id.0 as usize] => v.name.clone(),
            Some(_) => id.to_string(),
            None => format!("{id}?"),
        }
    }

    fn var_decl(&self, id: VarId) -> String {
        match self.k.vars.get(id.0 as usize) {
            Some(v) => format!("{id} {}", v.name),
            None => format!("{id}?"),
        }
    }

    fn var_type(&self, id: VarId) -> String {
        self.k.vars.get(id.0 as usize).map_or_else(|| "?".into(), |v| v.dtype.name().into())
    }

    fn buf_ref(&self, id: BufferId) -> String {
        match self.k.buffers.get(id.0 as usize) {
            Some(b) if self.buf_unique[id.0 as usize] => b.name.clone(),
            Some(_) => id.to_string(),
            None => format!("{id}?"),
        }
    }

    fn shape(&self, shape: &[Extent]) -> String {
        let parts: Vec<String> = shape
            .iter()
            .map(|e| match e {
                Extent::Const(c) => c.to_string(),
                Extent::Dyn(v) => self.var_ref(*v),
            })
            .collect();
        format!("[{}]", parts.join(", "))
    }

    fn header(&self, out: &mut String) {
        let k = self.k;
        let _ = write!(out, "kernel {}", k.name);
        if !k.dims.is_empty() {
            let dims: Vec<String> = k.dims.iter().map(|&d| self.var_decl(d)).collect();
            let _ = write!(out, "<{}>", dims.join(", "));
        }
        let params: Vec<String> = k
            .params
            .iter()
            .map(|p| match p.kind {
                ParamKind::Tensor(b) => match k.buffers.get(b.0 as usize) {
                    Some(buf) => format!(
                        "{b} {}: &{}{}{}",
                        buf.name,
                        if buf.mutable { "mut " } else { "" },
                        buf.dtype,
                        self.shape(&buf.shape)
                    ),
                    None => format!("{b}? {}", p.name),
                },
                ParamKind::Scalar(v) => format!("{}: {}", self.var_decl(v), self.var_type(v)),
            })
            .collect();
        let grid: Vec<String> = k.grid.iter().map(|e| self.expr_text(e)).collect();
        let _ = write!(out, "({}) threads={} grid=({})", params.join(", "), k.threads, grid.join(", "));
        if let Some(panel) = k.rasterize {
            let _ = write!(out, " swizzle={panel}");
        }
        if k.cluster != [1, 1, 1] {
            let [x, y, z] = k.cluster;
            let _ = write!(out, " cluster=({x}, {y}, {z})");
        }
        if !k.warp_specialize {
            out.push_str(" warp_specialize=false");
        }
        if k.blocks_per_sm != 1 {
            let _ = write!(out, " blocks_per_sm={}", k.blocks_per_sm);
        }
        if k.dependent_launch {
            out.push_str(" dependent_launch=true");
        }
        out.push_str(" {\n");
        for (i, v) in k.vars.iter().enumerate() {
            if let VarKind::BlockIdx(axis) = v.kind {
                let axis = match axis {
                    0 => "x".to_string(),
                    1 => "y".to_string(),
                    2 => "z".to_string(),
                    n => n.to_string(),
                };
                let _ = writeln!(out, "  {} = block_idx.{axis}", self.var_decl(VarId(i as u32)));
            }
        }
        for (i, b) in k.buffers.iter().enumerate() {
            let id = BufferId(i as u32);
            let is_param = k.params.iter().any(|p| p.kind == ParamKind::Tensor(id));
            if is_param && b.scope == Scope::Global {
                continue;
            }
            let scope = match b.scope {
                Scope::Global => "global",
                Scope::Shared => "shared",
                Scope::Fragment => "fragment",
                Scope::Local => "local",
            };
            let layout = b.layout.map(|l| format!("({l})")).unwrap_or_default();
            let view = match &b.view {
                Some(v) => {
                    let origin: Vec<String> = v.origin.iter().map(|o| o.to_string()).collect();
                    format!(" = view {}[{}]", self.buf_ref(v.of), origin.join(", "))
                }
                None => String::new(),
            };
            let _ = writeln!(out, "  {id} {}: {scope}{layout} {}{}{view}", b.name, b.dtype, self.shape(&b.shape));
        }
    }

    fn expr_text(&self, e: &Expr) -> String {
        let mut s = String::new();
        self.expr(&mut s, e, 0);
        s
    }

    fn args(&self, out: &mut String, name: &str, args: &[&Expr]) {
        out.push_str(name);
        out.push('(');
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            self.expr(out, a, 0);
        }
        out.push(')');
    }

    fn index(&self, out: &mut String, buf: BufferId, index: &[Expr]) {
        out.push_str(&self.buf_ref(buf));
        out.push('[');
        for (i, e) in index.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            self.expr(out, e, 0);
        }
        out.push(']');
    }

    /// Prints `e`, parenthesised if it binds less tightly than `min_prec`.
    fn expr(&self, out: &mut String, e: &Expr, min_prec: u8) {
        let p = prec(e);
        let paren = p < min_prec;
        if paren {
            out.push('(');
        }
        match e {
            Expr::Const(v) => out.push_str(&value_text(*v)),
            Expr::Var(v) => out.push_str(&self.var_ref(*v)),
            Expr::Load { buf, index } => self.index(out, *buf, index),
            // `-(1)`, not `-1`: that is the constant -1.
            Expr::Unary { op: UnOp::Neg, arg } if matches!(**arg, Expr::Const(c) if c.dtype() != DType::Bool) => {
                out.push_str("-(");
                self.expr(out, arg, 0);
                out.push(')');
            }
            Expr::Unary { op: UnOp::Neg, arg } => {
                out.push('-');
                self.expr(out, arg, 12);
            }
            Expr::Unary { op: UnOp::Not, arg } => {
                out.push('!');
                self.expr(out, arg, 12);
            }
            Expr::Unary { op, arg } => self.args(out, unop_name(*op), &[arg]),
            Expr::Binary { op: op @ (BinOp::Min | BinOp::Max), lhs, rhs } => {
                self.args(out, binop_symbol(*op), &[lhs, rhs])
            }
            Expr::Binary { op, lhs, rhs } => {
                // Left-associative; comparisons do not chain (as in Rust).
                let lp = if op.is_comparison() { p + 1 } else { p };
                self.expr(out, lhs, lp);
                let _ = write!(out, " {} ", binop_symbol(*op));
                self.expr(out, rhs, p + 1);
            }
            Expr::Fma { a, b, c } => self.args(out, "fma", &[a, b, c]),
            Expr::Cast { to, arg } => {
                self.expr(out, arg, 11);
                let _ = write!(out, " as {to}");
            }
            Expr::Select { cond, then, otherwise } => self.args(out, "select", &[cond, then, otherwise]),
        }
        if paren {
            out.push(')');
        }
    }

    /// A tile: `x` (a whole buffer), `x[r, c]` (every dim spanned), or with
    /// squeezed dims `x[b, s0.., h, 0..]` (spanned entries end in `..`).
    fn tile(&self, out: &mut String, t: &TileRef) {
        if t.origin.is_empty() {
            out.push_str(&self.buf_ref(t.buf));
        } else if t.squeezed.is_empty() {
            self.index(out, t.buf, &t.origin);
        } else {
            out.push_str(&self.buf_ref(t.buf));
            out.push('[');
            for (i, e) in t.origin.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                self.expr(out, e, 0);
                if !t.squeezed.contains(&i) {
                    out.push_str("..");
                }
            }
            out.push(']');
        }
    }

    fn block(&self, out: &mut String, body: &[Stmt], depth: usize) {
        out.push_str("{\n");
        for s in body {
            self.stmt(out, s, depth + 1);
        }
        indent(out, depth);
        out.push('}');
    }

    fn stmt(&self, out: &mut String, s: &Stmt, depth: usize) {
        indent(out, depth);
        match &s.kind {
            StmtKind::Let { var, value } => {
                let m = match self.k.vars.get(var.0 as usize) {
                    Some(v) if v.kind == VarKind::Mut => "mut ",
                    _ => "",
                };
                let _ = write!(out, "let {m}{}: {} = ", self.var_decl(*var), self.var_type(*var));
                self.expr(out, value, 0);
            }
            StmtKind::Assign { var, value } => {
                let _ = write!(out, "{} = ", self.var_ref(*var));
                self.expr(out, value, 0);
            }
            StmtKind::Store { buf, index, value } => {
                self.index(out, *buf, index);
                out.push_str(" = ");
                self.expr(out, value, 0);
            }
            StmtKind::For { var, start, end, kind, body } => {
                let _ = write!(out, "for {} in ", self.var_decl(*var));
                match kind {
                    LoopKind::Serial => {}
                    LoopKind::Parallel => out.push_str("parallel "),
                    LoopKind::Pipelined { stages } => {
                        let _ = write!(out, "pipelined({stages}) ");
                    }
                }
                self.expr(out, start, 9);
                out.push_str("..");
                self.expr(out, end, 9);
                out.push(' ');
                self.block(out, body, depth);
            }
            StmtKind::If { cond, then, otherwise } => {
                out.push_str("if ");
                self.expr(out, cond, 0);
                out.push(' ');
                self.block(out, then, depth);
                if !otherwise.is_empty() {
                    out.push_str(" else ");
                    self.block(out, otherwise, depth);
                }
            }
            StmtKind::Copy { src, dst, fill, cache } => {
                out.push_str("copy ");
                self.tile(out, src);
                out.push_str(" -> ");
                self.tile(out, dst);
                if let Some(f) = fill {
                    out.push_str(" fill(");
                    self.expr(out, f, 0);
                    out.push(')');
                }
                if *cache == CacheHint::EvictFirst {
                    out.push_str(", cache=evict_first");
                }
            }
            StmtKind::Fill { buf, value } => {
                let _ = write!(out, "fill {}, ", self.buf_ref(*buf));
                self.expr(out, value, 0);
            }
            StmtKind::Reduce { op, src, dst, dim, keep } => {
                let op = match op {
                    ReduceOp::Sum => "sum",
                    ReduceOp::Max => "max",
                    ReduceOp::Min => "min",
                };
                let _ = write!(out, "reduce.{op} {} -> {}, dim={dim}", self.buf_ref(*src), self.buf_ref(*dst));
                if *keep {
                    out.push_str(", keep");
                }
            }
            StmtKind::AtomicAdd { buf, index, value } => {
                out.push_str("atomic_add ");
                self.index(out, *buf, index);
                out.push_str(", ");
                self.expr(out, value, 0);
            }
            StmtKind::Barrier => out.push_str("barrier"),
            StmtKind::Print { format, args } => {
                let _ = write!(out, "print {format:?}");
                for a in args {
                    out.push_str(", ");
                    self.expr(out, a, 0);
                }
            }
            StmtKind::Gemm { a, b, c, trans_a, trans_b, clear, policy } => {
                let t = |trans: &bool| if *trans { ".t" } else { "" };
                let _ = write!(
                    out,
                    "gemm {}{}, {}{} -> {}",
                    self.buf_ref(*a),
                    t(trans_a),
                    self.buf_ref(*b),
                    t(trans_b),
                    self.buf_ref(*c)
                );
                if *clear {
                    out.push_str(", clear");
                }
                if *policy != WarpPolicy::Square {
                    let _ = write!(out, ", policy={}", policy_text(*policy));
                    if let Some(w) = policy.owner() {
                        let _ = write!(out, "({w})");
                    }
                }
            }
        }
        out.push('\n');
    }
}

/// The name of a warp policy: `square`, `full_row`, `full_col`,
/// `warpgroup` (whose text is followed by `(w)`).
pub fn policy_text(p: WarpPolicy) -> &'static str {
    match p {
        WarpPolicy::Square => "square",
        WarpPolicy::FullRow => "full_row",
        WarpPolicy::FullCol => "full_col",
        WarpPolicy::Warpgroup(_) => "warpgroup",
    }
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}
