//! A parser for the text form printed by [`super::print_kernel`], so that
//! tests can be written as text and a dumped kernel can be replayed.
//!
//! Expects: text as [`super::print_kernel`] prints it (whitespace is free;
//! one statement per line is not required). Every variable and buffer must be
//! declared (`%id name` / `@id name`) somewhere, with ids forming `0..n`.
//! Guarantees, for a kernel whose every variable and buffer is declared in
//! its text (dims, params, block indices, buffers, and variables bound by a
//! `let` or `for`; true of every kernel that verifies, unless it has unused
//! variables): `print_kernel(&parse_kernel(&print_kernel(k))?)` equals
//! `print_kernel(k)`, and the parsed kernel equals `k` except for spans
//! (`SpanId::NONE`), parameter names (taken from the buffer/variable) and the
//! `mutable` flag of non-global buffers (false), which the text omits.
//! Errors carry the line number; the parser never panics.

use crate::ir::CacheHint;
use crate::ir::{
    BinOp, Buffer, BufferId, DType, Expr, Extent, Kernel, LoopKind, Param, ParamKind, ReduceOp, Scope, SpanId, Stmt,
    StmtKind, TileRef, UnOp, Value, Var, VarId, VarKind, WarpPolicy,
};
use std::collections::HashMap;

/// A syntax or naming error in the text form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// The line (1-based) of the text where the problem is.
    pub line: usize,
    /// What is wrong there.
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// A number literal as written (with its suffix).
    Num(String),
    VarRef(u32),
    BufRef(u32),
    Punct(&'static str),
    /// A string literal (the debug print's format), unescaped.
    Str(String),
}

const PUNCTS: &[&str] = &[
    "->", "..", "<<", ">>", "<=", ">=", "==", "!=", "(", ")", "[", "]", "{", "}", "<", ">", "=", "+", "-", "*", "/",
    "%", "&", "|", "^", "!", ",", ":", ".",
];

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'"' {
            // Rust's escapes, as the printer writes them (`{:?}`).
            let mut s = String::new();
            let mut chars = text[i + 1..].char_indices();
            let unclosed = |line| ParseError { line, message: "unclosed string literal".into() };
            loop {
                let (k, ch) = chars.next().ok_or_else(|| unclosed(line))?;
                match ch {
                    '"' => {
                        i += 1 + k + 1;
                        break;
                    }
                    '\\' => {
                        let (_, e) = chars.next().ok_or_else(|| unclosed(line))?;
                        match e {
                            'n' => s.push('\n'),
                            'r' => s.push('\r'),
                            't' => s.push('\t'),
                            '0' => s.push('\0'),
                            '\\' | '"' | '\'' => s.push(e),
                            'u' => {
                                let mut hex = String::new();
                                for (_, h) in chars.by_ref() {
                                    match h {
                                        '{' => {}
                                        '}' => break,
                                        h => hex.push(h),
                                    }
                                }
                                let ch =
                                    u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32).ok_or_else(|| {
                                        ParseError { line, message: format!("bad escape `\\u{{{hex}}}`") }
                                    })?;
                                s.push(ch);
                            }
                            other => return Err(ParseError { line, message: format!("unknown escape `\\{other}`") }),
                        }
                    }
                    '\n' => {
                        line += 1;
                        s.push(ch);
                    }
                    ch => s.push(ch),
                }
            }
            out.push((Tok::Str(s), line));
        } else if (c == b'%' || c == b'@') && b.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
            let start = i + 1;
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let n: u32 = text[start..i]
                .parse()
                .map_err(|_| ParseError { line, message: format!("id `{}` is too large", &text[start..i]) })?;
            out.push((if c == b'%' { Tok::VarRef(n) } else { Tok::BufRef(n) }, line));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Ident(text[start..i].to_string()), line));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            // A fraction only if a digit follows the point (`0..N` is a range).
            if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i < b.len() && b[i] == b'e' {
                let mut j = i + 1;
                if j < b.len() && (b[j] == b'-' || b[j] == b'+') {
                    j += 1;
                }
                if j < b.len() && b[j].is_ascii_digit() {
                    i = j;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            while i < b.len() && b[i].is_ascii_alphanumeric() {
                i += 1;
            }
            out.push((Tok::Num(text[start..i].to_string()), line));
        } else {
            let rest = &text[i..];
            let Some(p) = PUNCTS.iter().find(|p| rest.starts_with(**p)) else {
                let ch = rest.chars().next().unwrap_or('?');
                return Err(ParseError { line, message: format!("unexpected character `{ch}`") });
            };
            out.push((Tok::Punct(p), line));
            i += p.len();
        }
    }
    Ok(out)
}

/// Parses the text form of one kernel.
pub fn parse_kernel(text: &str) -> Result<Kernel, ParseError> {
    let toks = lex(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        var_names: HashMap::new(),
        buf_names: HashMap::new(),
        vars: Vec::new(),
        bufs: Vec::new(),
        depth: 0,
        var_refs: Vec::new(),
        buf_refs: Vec::new(),
    };
    p.prescan();
    p.kernel()
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    /// Name → the ids declared with it (a name resolves only if one).
    var_names: HashMap<String, Vec<u32>>,
    buf_names: HashMap<String, Vec<u32>>,
    vars: Vec<Option<Var>>,
    bufs: Vec<Option<Buffer>>,
    /// Nesting of `{ }` blocks (a guard against stack exhaustion).
    depth: usize,
    /// Every id referred to, checked against the declarations at the end.
    var_refs: Vec<(u32, usize)>,
    buf_refs: Vec<(u32, usize)>,
}

type PResult<T> = Result<T, ParseError>;

fn dtype_of(name: &str) -> Option<DType> {
    DType::from_name(name)
}

impl Parser {
    /// Records every declaration (`%id name`, `@id name`) so that names can be
    /// resolved wherever they are used.
    fn prescan(&mut self) {
        for w in self.toks.windows(2) {
            match (&w[0].0, &w[1].0) {
                (Tok::VarRef(id), Tok::Ident(n)) if n != "as" => {
                    let ids = self.var_names.entry(n.clone()).or_default();
                    if !ids.contains(id) {
                        ids.push(*id);
                    }
                }
                (Tok::BufRef(id), Tok::Ident(n)) => {
                    let ids = self.buf_names.entry(n.clone()).or_default();
                    if !ids.contains(id) {
                        ids.push(*id);
                    }
                }
                _ => {}
            }
        }
    }

    fn line(&self) -> usize {
        self.toks.get(self.pos).or(self.toks.last()).map_or(1, |t| t.1)
    }

    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        Err(ParseError { line: self.line(), message: message.into() })
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }

    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.pos + k).map(|t| &t.0)
    }

    fn next(&mut self) -> PResult<Tok> {
        match self.toks.get(self.pos) {
            Some((t, _)) => {
                self.pos += 1;
                Ok(t.clone())
            }
            None => self.err("unexpected end of text"),
        }
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }

    fn is_ident(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(q)) if q == s)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        if self.is_punct(p) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// `true` or `false`, the value of header option `name`.
    fn bool_value(&mut self, name: &str) -> PResult<bool> {
        match self.ident()?.as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            other => self.err(format!("{name}={other}: expected `true` or `false`")),
        }
    }

    fn eat_ident(&mut self, s: &str) -> bool {
        if self.is_ident(s) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, p: &str) -> PResult<()> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            let found = self.describe();
            self.err(format!("expected `{p}`, found {found}"))
        }
    }

    fn expect_ident(&mut self, s: &str) -> PResult<()> {
        if self.eat_ident(s) {
            Ok(())
        } else {
            let found = self.describe();
            self.err(format!("expected `{s}`, found {found}"))
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "the end of the text".into(),
            Some(Tok::Ident(s)) | Some(Tok::Num(s)) => format!("`{s}`"),
            Some(Tok::VarRef(n)) => format!("`%{n}`"),
            Some(Tok::BufRef(n)) => format!("`@{n}`"),
            Some(Tok::Punct(p)) => format!("`{p}`"),
            Some(Tok::Str(s)) => format!("the string {s:?}"),
        }
    }

    fn ident(&mut self) -> PResult<String> {
        match self.next()? {
            Tok::Ident(s) => Ok(s),
            _ => {
                self.pos -= 1;
                let found = self.describe();
                self.err(format!("expected a name, found {found}"))
            }
        }
    }

    /// `row_major()`, `padded(bytes)` or `swizzle(bits)`.
    fn layout_spec(&mut self) -> PResult<crate::ir::SharedLayoutSpec> {
        use crate::ir::SharedLayoutSpec as S;
        let name = self.ident()?;
        self.expect_punct("(")?;
        let spec = match name.as_str() {
            "row_major" => S::RowMajor,
            "padded" => S::Padded { bytes: self.int()? },
            "swizzle" => {
                let bits = self.int()?;
                S::Swizzle {
                    bits: u32::try_from(bits).or_else(|_| self.err(format!("swizzle width {bits} is out of range")))?,
                }
            }
            other => {
                return self.err(format!("unknown shared layout `{other}` (expected row_major, padded or swizzle)"))
            }
        };
        self.expect_punct(")")?;
        Ok(spec)
    }

    fn int(&mut self) -> PResult<i64> {
        match self.next()? {
            Tok::Num(s) => s.parse().or_else(|_| self.err(format!("expected an integer, found `{s}`"))),
            _ => {
                self.pos -= 1;
                let found = self.describe();
                self.err(format!("expected an integer, found {found}"))
            }
        }
    }

    fn dtype(&mut self) -> PResult<DType> {
        let name = self.ident()?;
        dtype_of(&name).map_or_else(|| self.err(format!("unknown type `{name}`")), Ok)
    }

    // ---- declarations ----

    fn declare_var(&mut self, id: u32, var: Var) -> PResult<VarId> {
        let i = id as usize;
        if i >= 1 << 24 {
            return self.err(format!("variable id %{id} is too large"));
        }
        if self.vars.len() <= i {
            self.vars.resize(i + 1, None);
        }
        match &self.vars[i] {
            // A variable may be declared again only identically (the same
            // loop variable in two loops is one variable bound twice).
            Some(prev) if *prev != var => return self.err(format!("variable %{id} is declared twice, differently")),
            _ => self.vars[i] = Some(var),
        }
        Ok(VarId(id))
    }

    fn declare_buf(&mut self, id: u32, buf: Buffer) -> PResult<BufferId> {
        let i = id as usize;
        if i >= 1 << 24 {
            return self.err(format!("buffer id @{id} is too large"));
        }
        if self.bufs.len() <= i {
            self.bufs.resize(i + 1, None);
        }
        if self.bufs[i].is_some() {
            return self.err(format!("buffer @{id} is declared twice"));
        }
        self.bufs[i] = Some(buf);
        Ok(BufferId(id))
    }

    /// `%id name` (a declaration).
    fn var_decl_head(&mut self) -> PResult<(u32, String)> {
        match self.next()? {
            Tok::VarRef(id) => Ok((id, self.ident()?)),
            _ => {
                self.pos -= 1;
                let found = self.describe();
                self.err(format!("expected a variable declaration `%id name`, found {found}"))
            }
        }
    }

    fn resolve(&self, names: &HashMap<String, Vec<u32>>, name: &str, what: &str) -> PResult<u32> {
        match names.get(name).map(|v| v.as_slice()) {
            Some([id]) => Ok(*id),
            Some(_) => self.err(format!("{what} name `{name}` is ambiguous; refer to it by id")),
            None => self.err(format!("unknown {what} `{name}`")),
        }
    }

    /// A variable reference: `%id` or a unique name.
    fn var_ref(&mut self) -> PResult<VarId> {
        let line = self.line();
        let id = match self.next()? {
            Tok::VarRef(id) => id,
            Tok::Ident(name) => self.resolve(&self.var_names, &name, "variable")?,
            _ => {
                self.pos -= 1;
                let found = self.describe();
                return self.err(format!("expected a variable, found {found}"));
            }
        };
        self.var_refs.push((id, line));
        Ok(VarId(id))
    }

    fn buf_ref(&mut self) -> PResult<BufferId> {
        let line = self.line();
        let id = match self.next()? {
            Tok::BufRef(id) => id,
            Tok::Ident(name) => self.resolve(&self.buf_names, &name, "buffer")?,
            _ => {
                self.pos -= 1;
                let found = self.describe();
                return self.err(format!("expected a buffer, found {found}"));
            }
        };
        self.buf_refs.push((id, line));
        Ok(BufferId(id))
    }

    fn shape(&mut self) -> PResult<Vec<Extent>> {
        self.expect_punct("[")?;
        let mut out = Vec::new();
        while !self.eat_punct("]") {
            if !out.is_empty() {
                self.expect_punct(",")?;
            }
            if matches!(self.peek(), Some(Tok::Num(_))) {
                out.push(Extent::Const(self.int()?));
            } else {
                out.push(Extent::Dyn(self.var_ref()?));
            }
        }
        Ok(out)
    }

    fn kernel(&mut self) -> PResult<Kernel> {
        self.expect_ident("kernel")?;
        let name = self.ident()?;
        let mut k = Kernel::new(name, 0);
        if self.eat_punct("<") {
            while !self.eat_punct(">") {
                if !k.dims.is_empty() {
                    self.expect_punct(",")?;
                }
                let (id, name) = self.var_decl_head()?;
                let v = self.declare_var(id, Var { name, dtype: DType::I32, kind: VarKind::Dim })?;
                k.dims.push(v);
            }
        }
        self.expect_punct("(")?;
        while !self.eat_punct(")") {
            if !k.params.is_empty() {
                self.expect_punct(",")?;
            }
            match self.peek() {
                Some(Tok::BufRef(id)) => {
                    let id = *id;
                    self.pos += 1;
                    let name = self.ident()?;
                    self.expect_punct(":")?;
                    self.expect_punct("&")?;
                    let mutable = self.eat_ident("mut");
                    let dtype = self.dtype()?;
                    let shape = self.shape()?;
                    let b = self.declare_buf(
                        id,
                        Buffer {
                            name: name.clone(),
                            scope: Scope::Global,
                            dtype,
                            shape,
                            mutable,
                            span: SpanId::NONE,
                            layout: None,
                            view: None,
                        },
                    )?;
                    k.params.push(Param { name, kind: ParamKind::Tensor(b) });
                }
                _ => {
                    let (id, name) = self.var_decl_head()?;
                    self.expect_punct(":")?;
                    let dtype = self.dtype()?;
                    let v = self.declare_var(id, Var { name: name.clone(), dtype, kind: VarKind::Param })?;
                    k.params.push(Param { name, kind: ParamKind::Scalar(v) });
                }
            }
        }
        self.expect_ident("threads")?;
        self.expect_punct("=")?;
        let threads = self.int()?;
        k.threads = u32::try_from(threads).or_else(|_| self.err(format!("threads = {threads} is out of range")))?;
        self.expect_ident("grid")?;
        self.expect_punct("=")?;
        self.expect_punct("(")?;
        for axis in 0..3 {
            if axis > 0 {
                self.expect_punct(",")?;
            }
            k.grid[axis] = self.expr()?;
        }
        self.expect_punct(")")?;
        if self.eat_ident("swizzle") {
            self.expect_punct("=")?;
            let panel = self.int()?;
            k.rasterize = Some(u32::try_from(panel).or_else(|_| self.err(format!("swizzle={panel} is out of range")))?);
        }
        if self.eat_ident("cluster") {
            self.expect_punct("=")?;
            self.expect_punct("(")?;
            for axis in 0..3 {
                if axis > 0 {
                    self.expect_punct(",")?;
                }
                let extent = self.int()?;
                k.cluster[axis] =
                    u32::try_from(extent).or_else(|_| self.err(format!("cluster extent {extent} is out of range")))?;
            }
            self.expect_punct(")")?;
        }
        if self.eat_ident("warp_specialize") {
            self.expect_punct("=")?;
            k.warp_specialize = self.bool_value("warp_specialize")?;
        }
        if self.eat_ident("blocks_per_sm") {
            self.expect_punct("=")?;
            let n = self.int()?;
            k.blocks_per_sm = u32::try_from(n).or_else(|_| self.err(format!("blocks_per_sm={n} is out of range")))?;
        }
        if self.eat_ident("dependent_launch") {
            self.expect_punct("=")?;
            k.dependent_launch = self.bool_value("dependent_launch")?;
        }
        self.expect_punct("{")?;
        // Declarations: block indices and buffers.
        loop {
            match (self.peek(), self.peek_at(1)) {
                (Some(Tok::VarRef(id)), Some(Tok::Ident(_))) => {
                    let id = *id;
                    self.pos += 1;
                    let name = self.ident()?;
                    self.expect_punct("=")?;
                    self.expect_ident("block_idx")?;
                    self.expect_punct(".")?;
                    let axis = match self.ident()?.as_str() {
                        "x" => 0,
                        "y" => 1,
                        "z" => 2,
                        other => return self.err(format!("unknown block index axis `{other}`")),
                    };
                    self.declare_var(id, Var { name, dtype: DType::I32, kind: VarKind::BlockIdx(axis) })?;
                }
                (Some(Tok::BufRef(id)), Some(Tok::Ident(_))) => {
                    let id = *id;
                    self.pos += 1;
                    let name = self.ident()?;
                    self.expect_punct(":")?;
                    let scope = match self.ident()?.as_str() {
                        "shared" => Scope::Shared,
                        "fragment" => Scope::Fragment,
                        "local" => Scope::Local,
                        "global" => Scope::Global,
                        other => return self.err(format!("unknown scope `{other}`")),
                    };
                    let layout = if self.eat_punct("(") {
                        let spec = self.layout_spec()?;
                        self.expect_punct(")")?;
                        Some(spec)
                    } else {
                        None
                    };
                    let dtype = self.dtype()?;
                    let shape = self.shape()?;
                    let view = if self.eat_punct("=") {
                        self.expect_ident("view")?;
                        let of = self.buf_ref()?;
                        self.expect_punct("[")?;
                        let mut origin = Vec::new();
                        while !self.eat_punct("]") {
                            if !origin.is_empty() {
                                self.expect_punct(",")?;
                            }
                            origin.push(self.int()?);
                        }
                        Some(crate::ir::View { of, origin })
                    } else {
                        None
                    };
                    self.declare_buf(
                        id,
                        Buffer { name, scope, dtype, shape, mutable: false, span: SpanId::NONE, layout, view },
                    )?;
                }
                _ => break,
            }
        }
        k.body = self.stmts()?;
        if self.pos != self.toks.len() {
            let found = self.describe();
            return self.err(format!("unexpected {found} after the kernel"));
        }
        for (refs, declared, sigil) in [(&self.var_refs, self.vars.len(), '%'), (&self.buf_refs, self.bufs.len(), '@')]
        {
            if let Some(&(id, line)) = refs.iter().find(|(id, _)| *id as usize >= declared) {
                return Err(ParseError { line, message: format!("{sigil}{id} is never declared") });
            }
        }
        for (i, v) in std::mem::take(&mut self.vars).into_iter().enumerate() {
            match v {
                Some(v) => k.vars.push(v),
                None => return self.err(format!("variable %{i} is never declared")),
            }
        }
        for (i, b) in std::mem::take(&mut self.bufs).into_iter().enumerate() {
            match b {
                Some(b) => k.buffers.push(b),
                None => return self.err(format!("buffer @{i} is never declared")),
            }
        }
        Ok(k)
    }

    /// Statements up to and including the closing `}`.
    fn stmts(&mut self) -> PResult<Vec<Stmt>> {
        let mut out = Vec::new();
        while !self.eat_punct("}") {
            out.push(Stmt::new(self.stmt()?));
        }
        Ok(out)
    }

    fn block(&mut self) -> PResult<Vec<Stmt>> {
        self.expect_punct("{")?;
        self.depth += 1;
        if self.depth > 200 {
            return self.err("blocks nested too deeply");
        }
        let body = self.stmts();
        self.depth -= 1;
        body
    }

    /// `x`, `x[r, c]`, or `x[b, s0.., h, 0..]`: when any entry ends in `..`,
    /// the others are squeezed dims.
    fn tile(&mut self) -> PResult<TileRef> {
        let buf = self.buf_ref()?;
        if !self.is_punct("[") {
            return Ok(TileRef::new(buf, Vec::new()));
        }
        self.expect_punct("[")?;
        let (mut origin, mut ranged) = (Vec::new(), Vec::new());
        while !self.eat_punct("]") {
            if !origin.is_empty() {
                self.expect_punct(",")?;
            }
            origin.push(self.expr()?);
            ranged.push(self.eat_punct(".."));
        }
        let squeezed =
            if ranged.iter().any(|&r| r) { (0..origin.len()).filter(|&d| !ranged[d]).collect() } else { Vec::new() };
        Ok(TileRef { buf, origin, squeezed })
    }

    /// A gemm operand: a buffer, `.t` if stored transposed.
    fn gemm_operand(&mut self) -> PResult<(BufferId, bool)> {
        let buf = self.buf_ref()?;
        let trans = self.is_punct(".") && matches!(self.peek_at(1), Some(Tok::Ident(s)) if s == "t");
        if trans {
            self.pos += 2;
        }
        Ok((buf, trans))
    }

    fn index(&mut self) -> PResult<Vec<Expr>> {
        self.expect_punct("[")?;
        let mut out = Vec::new();
        while !self.eat_punct("]") {
            if !out.is_empty() {
                self.expect_punct(",")?;
            }
            out.push(self.expr()?);
        }
        Ok(out)
    }

    fn stmt(&mut self) -> PResult<StmtKind> {
        let keyword = match self.peek() {
            Some(Tok::Ident(s)) => s.clone(),
            _ => String::new(),
        };
        // A name followed by `[` or `=` is a store or an assignment, whatever it is called.
        let is_target = matches!(self.peek_at(1), Some(Tok::Punct("[" | "=")));
        match keyword.as_str() {
            "let" if !is_target => {
                self.pos += 1;
                let mutable = self.eat_ident("mut");
                let (id, name) = self.var_decl_head()?;
                self.expect_punct(":")?;
                let dtype = self.dtype()?;
                let kind = if mutable { VarKind::Mut } else { VarKind::Let };
                let var = self.declare_var(id, Var { name, dtype, kind })?;
                self.expect_punct("=")?;
                Ok(StmtKind::Let { var, value: self.expr()? })
            }
            "for" if !is_target => {
                self.pos += 1;
                let (id, name) = self.var_decl_head()?;
                let var = self.declare_var(id, Var { name, dtype: DType::I32, kind: VarKind::Loop })?;
                self.expect_ident("in")?;
                let kind = if self.eat_ident("parallel") {
                    LoopKind::Parallel
                } else if self.eat_ident("pipelined") {
                    self.expect_punct("(")?;
                    let stages = self.int()?;
                    self.expect_punct(")")?;
                    LoopKind::Pipelined {
                        stages: u32::try_from(stages)
                            .or_else(|_| self.err(format!("{stages} stages is out of range")))?,
                    }
                } else {
                    LoopKind::Serial
                };
                let start = self.expr()?;
                self.expect_punct("..")?;
                let end = self.expr()?;
                let body = self.block()?;
                Ok(StmtKind::For { var, start, end, kind, body })
            }
            "if" if !is_target => {
                self.pos += 1;
                let cond = self.expr()?;
                let then = self.block()?;
                let otherwise = if self.eat_ident("else") { self.block()? } else { Vec::new() };
                Ok(StmtKind::If { cond, then, otherwise })
            }
            "copy" if !is_target => {
                self.pos += 1;
                let src = self.tile()?;
                self.expect_punct("->")?;
                let dst = self.tile()?;
                let fill = if self.is_ident("fill") && matches!(self.peek_at(1), Some(Tok::Punct("("))) {
                    self.pos += 2;
                    let e = self.expr()?;
                    self.expect_punct(")")?;
                    Some(e)
                } else {
                    None
                };
                let mut cache = CacheHint::Normal;
                if self.eat_punct(",") {
                    self.expect_ident("cache")?;
                    self.expect_punct("=")?;
                    cache = match self.ident()?.as_str() {
                        "evict_first" => CacheHint::EvictFirst,
                        "normal" => CacheHint::Normal,
                        other => {
                            let message = format!("unknown cache hint `{other}`; expected `evict_first` or `normal`");
                            self.pos -= 1;
                            return self.err(message);
                        }
                    };
                }
                Ok(StmtKind::Copy { src, dst, fill, cache })
            }
            "fill" if !is_target => {
                self.pos += 1;
                let buf = self.buf_ref()?;
                self.expect_punct(",")?;
                Ok(StmtKind::Fill { buf, value: self.expr()? })
            }
            "reduce" if !is_target => {
                self.pos += 1;
                self.expect_punct(".")?;
                let op = match self.ident()?.as_str() {
                    "sum" => ReduceOp::Sum,
                    "max" => ReduceOp::Max,
                    "min" => ReduceOp::Min,
                    other => return self.err(format!("unknown reduction `{other}`")),
                };
                let src = self.buf_ref()?;
                self.expect_punct("->")?;
                let dst = self.buf_ref()?;
                self.expect_punct(",")?;
                self.expect_ident("dim")?;
                self.expect_punct("=")?;
                let dim = self.int()?;
                let dim = usize::try_from(dim).or_else(|_| self.err(format!("dim = {dim} is out of range")))?;
                let keep = if self.is_punct(",") && matches!(self.peek_at(1), Some(Tok::Ident(s)) if s == "keep") {
                    self.pos += 2;
                    true
                } else {
                    false
                };
                Ok(StmtKind::Reduce { op, src, dst, dim, keep })
            }
            "gemm" if !is_target => {
                self.pos += 1;
                let (a, trans_a) = self.gemm_operand()?;
                self.expect_punct(",")?;
                let (b, trans_b) = self.gemm_operand()?;
                self.expect_punct("->")?;
                let c = self.buf_ref()?;
                let (mut clear, mut policy) = (false, WarpPolicy::Square);
                while self.eat_punct(",") {
                    match self.ident()?.as_str() {
                        "clear" => clear = true,
                        "policy" => {
                            self.expect_punct("=")?;
                            policy = match self.ident()?.as_str() {
                                "square" => WarpPolicy::Square,
                                "full_row" => WarpPolicy::FullRow,
                                "full_col" => WarpPolicy::FullCol,
                                "warpgroup" => {
                                    self.expect_punct("(")?;
                                    let w = self.int()?;
                                    self.expect_punct(")")?;
                                    match u32::try_from(w) {
                                        Ok(w) => WarpPolicy::Warpgroup(w),
                                        Err(_) => {
                                            self.pos -= 2;
                                            return self.err(format!("warpgroup index {w} out of range"));
                                        }
                                    }
                                }
                                other => {
                                    let message = format!("unknown warp policy `{other}`");
                                    self.pos -= 1;
                                    return self.err(message);
                                }
                            };
                        }
                        other => {
                            let message = format!("unknown gemm modifier `{other}`; expected `clear` or `policy=..`");
                            self.pos -= 1;
                            return self.err(message);
                        }
                    }
                }
                Ok(StmtKind::Gemm { a, b, c, trans_a, trans_b, clear, policy })
            }
            "atomic_add" if !is_target => {
                self.pos += 1;
                let buf = self.buf_ref()?;
                let index = self.index()?;
                self.expect_punct(",")?;
                Ok(StmtKind::AtomicAdd { buf, index, value: self.expr()? })
            }
            "barrier" if !is_target => {
                self.pos += 1;
                Ok(StmtKind::Barrier)
            }
            "print" if !is_target && matches!(self.peek_at(1), Some(Tok::Str(_))) => {
                self.pos += 1;
                let Some(Tok::Str(format)) = self.peek_at(0).cloned() else {
                    return self.err("expected the format string of `print`");
                };
                self.pos += 1;
                let mut args = Vec::new();
                while self.eat_punct(",") {
                    args.push(self.expr()?);
                }
                Ok(StmtKind::Print { format, args })
            }
            _ => match self.peek_at(1) {
                Some(Tok::Punct("[")) => {
                    let buf = self.buf_ref()?;
                    let index = self.index()?;
                    self.expect_punct("=")?;
                    Ok(StmtKind::Store { buf, index, value: self.expr()? })
                }
                Some(Tok::Punct("=")) => {
                    let var = self.var_ref()?;
                    self.expect_punct("=")?;
                    Ok(StmtKind::Assign { var, value: self.expr()? })
                }
                _ => {
                    let found = self.describe();
                    self.err(format!("expected a statement, found {found}"))
                }
            },
        }
    }

    // ---- expressions (precedence as in the printer: Rust's) ----

    fn expr(&mut self) -> PResult<Expr> {
        self.binary(0, 0)
    }

    fn binop(&self) -> Option<(BinOp, u8)> {
        let Some(Tok::Punct(p)) = self.peek() else { return None };
        Some(match *p {
            "*" => (BinOp::Mul, 10),
            "/" => (BinOp::Div, 10),
            "%" => (BinOp::Rem, 10),
            "+" => (BinOp::Add, 9),
            "-" => (BinOp::Sub, 9),
            "<<" => (BinOp::Shl, 8),
            ">>" => (BinOp::Shr, 8),
            "&" => (BinOp::And, 7),
            "^" => (BinOp::Xor, 6),
            "|" => (BinOp::Or, 5),
            "<" => (BinOp::Lt, 4),
            "<=" => (BinOp::Le, 4),
            ">" => (BinOp::Gt, 4),
            ">=" => (BinOp::Ge, 4),
            "==" => (BinOp::Eq, 4),
            "!=" => (BinOp::Ne, 4),
            _ => return None,
        })
    }

    fn binary(&mut self, min_prec: u8, depth: usize) -> PResult<Expr> {
        if depth > 200 {
            return self.err("expression nested too deeply");
        }
        let mut lhs = self.cast(depth + 1)?;
        while let Some((op, prec)) = self.binop() {
            if prec < min_prec {
                break;
            }
            self.pos += 1;
            let rhs = self.binary(prec + 1, depth + 1)?;
            lhs = Expr::binary(op, lhs, rhs);
        }
        Ok(lhs)
    }

    fn cast(&mut self, depth: usize) -> PResult<Expr> {
        let mut e = self.unary(depth)?;
        while self.eat_ident("as") {
            let to = self.dtype()?;
            e = Expr::cast(to, e);
        }
        Ok(e)
    }

    fn unary(&mut self, depth: usize) -> PResult<Expr> {
        if depth > 200 {
            return self.err("expression nested too deeply");
        }
        if self.is_punct("-") {
            // `-1` is a constant; `-(1)` and `-x` are negations.
            match self.peek_at(1) {
                Some(Tok::Num(_)) => {
                    self.pos += 1;
                    return self.number(true);
                }
                Some(Tok::Ident(s)) if s.starts_with("inf") => {
                    self.pos += 1;
                    return self.number(true);
                }
                _ => {
                    self.pos += 1;
                    return Ok(Expr::unary(UnOp::Neg, self.unary(depth + 1)?));
                }
            }
        }
        if self.eat_punct("!") {
            return Ok(Expr::unary(UnOp::Not, self.unary(depth + 1)?));
        }
        self.primary(depth)
    }

    /// A number literal (or `inf`/`NaN`, with a type suffix), negated if `neg`.
    fn number(&mut self, neg: bool) -> PResult<Expr> {
        let text = match self.next()? {
            Tok::Num(s) | Tok::Ident(s) => s,
            _ => return self.err("expected a number"),
        };
        let (body, suffix) = ["bf16", "f16", "f32", "u32", "i64", "i32"]
            .iter()
            .find_map(|s| text.strip_suffix(s).map(|b| (b.to_string(), Some(*s))))
            .unwrap_or((text.clone(), None));
        let is_float = body.contains('.') || body.contains('e') || body == "inf" || body == "NaN";
        let bad = || ParseError { line: self.line(), message: format!("bad number `{text}`") };
        let float = |b: &str| -> Result<f32, ParseError> {
            let v = match b {
                "inf" => f32::INFINITY,
                "NaN" => f32::NAN,
                _ => b.parse::<f32>().map_err(|_| bad())?,
            };
            Ok(if neg { -v } else { v })
        };
        let int = |b: &str| -> Result<i128, ParseError> {
            let v: i128 = b.parse().map_err(|_| bad())?;
            Ok(if neg { -v } else { v })
        };
        let value = match (suffix, is_float) {
            (Some("f16"), _) => Value::F16(half::f16::from_f32(float(&body)?)),
            (Some("bf16"), _) => Value::BF16(half::bf16::from_f32(float(&body)?)),
            (Some("f32"), _) | (None, true) => Value::F32(float(&body)?),
            (Some("u32"), false) => Value::U32(u32::try_from(int(&body)?).map_err(|_| bad())?),
            (Some("i64"), false) => Value::I64(i64::try_from(int(&body)?).map_err(|_| bad())?),
            (Some("i32") | None, false) => Value::I32(i32::try_from(int(&body)?).map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        Ok(Expr::Const(value))
    }

    fn args(&mut self, n: usize) -> PResult<Vec<Expr>> {
        self.expect_punct("(")?;
        let mut out = Vec::new();
        for i in 0..n {
            if i > 0 {
                self.expect_punct(",")?;
            }
            out.push(self.expr()?);
        }
        self.expect_punct(")")?;
        Ok(out)
    }

    fn primary(&mut self, depth: usize) -> PResult<Expr> {
        match self.peek().cloned() {
            Some(Tok::Num(_)) => self.number(false),
            Some(Tok::Punct("(")) => {
                self.pos += 1;
                let e = self.binary(0, depth + 1)?;
                self.expect_punct(")")?;
                Ok(e)
            }
            Some(Tok::BufRef(_)) => {
                let buf = self.buf_ref()?;
                Ok(Expr::Load { buf, index: self.index()? })
            }
            Some(Tok::VarRef(_)) => Ok(Expr::Var(self.var_ref()?)),
            Some(Tok::Ident(name)) => {
                let call = matches!(self.peek_at(1), Some(Tok::Punct("(")));
                let load = matches!(self.peek_at(1), Some(Tok::Punct("[")));
                let unop = match name.as_str() {
                    "exp2" => Some(UnOp::Exp2),
                    "exp" => Some(UnOp::Exp),
                    "log2" => Some(UnOp::Log2),
                    "log" => Some(UnOp::Log),
                    "abs" => Some(UnOp::Abs),
                    "sqrt" => Some(UnOp::Sqrt),
                    "rsqrt" => Some(UnOp::Rsqrt),
                    _ => None,
                };
                if load {
                    let buf = self.buf_ref()?;
                    return Ok(Expr::Load { buf, index: self.index()? });
                }
                if call {
                    self.pos += 1;
                    if let Some(op) = unop {
                        let mut a = self.args(1)?;
                        return Ok(Expr::unary(op, a.remove(0)));
                    }
                    return match name.as_str() {
                        "min" | "max" => {
                            let mut a = self.args(2)?;
                            let (l, r) = (a.remove(0), a.remove(0));
                            Ok(Expr::binary(if name == "min" { BinOp::Min } else { BinOp::Max }, l, r))
                        }
                        "fma" => {
                            let mut a = self.args(3)?;
                            let (x, y, z) = (a.remove(0), a.remove(0), a.remove(0));
                            Ok(Expr::Fma { a: Box::new(x), b: Box::new(y), c: Box::new(z) })
                        }
                        "select" => {
                            let mut a = self.args(3)?;
                            let (c, t, o) = (a.remove(0), a.remove(0), a.remove(0));
                            Ok(Expr::Select { cond: Box::new(c), then: Box::new(t), otherwise: Box::new(o) })
                        }
                        other => self.err(format!("unknown function `{other}`")),
                    };
                }
                match name.as_str() {
                    "true" | "false" => {
                        self.pos += 1;
                        Ok(Expr::Const(Value::Bool(name == "true")))
                    }
                    n if n.starts_with("inf") || n.starts_with("NaN") => self.number(false),
                    _ => Ok(Expr::Var(self.var_ref()?)),
                }
            }
            _ => {
                let found = self.describe();
                self.err(format!("expected an expression, found {found}"))
            }
        }
    }
}
