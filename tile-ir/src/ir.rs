//! The Tile IR: what one thread block does, in tile-level operations.
//!
//! A [`Kernel`] owns two arenas, [`Kernel::vars`] (scalar variables) and
//! [`Kernel::buffers`] (tensors, shared tiles, fragments, locals), addressed by
//! the typed handles [`VarId`] and [`BufferId`]. Expressions are small owned
//! trees ([`Expr`]) that are free of side effects; statements ([`Stmt`]) form
//! a tree and say when things happen.
//!
//! Semantics are *block-level*: the body is executed once per thread block.
//! Tile operations (`Copy`, `Fill`, `Reduce`) are collective. A `Parallel`
//! loop nest says its iterations are independent; the compiler maps them to
//! threads (layout inference). Code outside parallel loops is *uniform*: every
//! thread computes the same scalars; its side effects on shared or global
//! memory happen once.
//!
//! Types are explicit: every expression has a [`DType`] computable with
//! [`Kernel::expr_type`]; binary operators take operands of one type (the
//! frontend inserts `Cast`s); indices are `I32`.
//!
//! Invariants that [`crate::verify`] checks: handles are in range; shapes of
//! shared/fragment/local buffers are constant; fragments are only indexed
//! inside parallel loops, by the loop variables; copy extents agree; reduce
//! dims exist; stores to read-only tensors are absent.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Index of a scalar variable in [`Kernel::vars`]. Prints as `%3`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VarId(pub u32);

/// Index of a buffer in [`Kernel::buffers`]. Prints as `@2`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BufferId(pub u32);

/// Opaque source location. The frontend keeps a table from `SpanId` to its
/// own spans so that errors found by passes point at the user's code.
/// `SpanId::NONE` when there is no source (IR built by hand).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpanId(pub u32);

impl SpanId {
    /// No source location: the span of statements built by hand or parsed from
    /// text. Errors at it carry no user position.
    pub const NONE: SpanId = SpanId(u32::MAX);
}

impl fmt::Display for VarId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

impl fmt::Display for BufferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "@{}", self.0)
    }
}

/// Element and scalar types.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    /// IEEE binary16 (`half::f16`): 2 bytes.
    F16,
    /// bfloat16 (`half::bf16`): 2 bytes, f32's exponent range.
    BF16,
    /// IEEE binary32: 4 bytes.
    F32,
    /// Signed 32-bit integer, wrapping arithmetic; the type of indices and dims.
    I32,
    /// Unsigned 32-bit integer, wrapping arithmetic.
    U32,
    /// Signed 64-bit integer, wrapping arithmetic.
    I64,
    /// A truth value: the type of comparisons and conditions (1 byte in memory).
    Bool,
}

impl DType {
    /// Size in bytes in memory (`Bool` is stored as one byte).
    pub fn size_bytes(self) -> u32 {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::I64 => 8,
            DType::Bool => 1,
        }
    }
    /// Whether this is `F16`, `BF16` or `F32`.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32)
    }
    /// Whether this is `I32`, `U32` or `I64` (not `Bool`).
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32 | DType::I64)
    }
    /// The spelling users write: `f16`, `bf16`, `f32`, `i32`, `u32`, `i64`, `bool`.
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }
    /// The type a user spelling names (the inverse of [`DType::name`]); `None`
    /// for anything else.
    pub fn from_name(name: &str) -> Option<DType> {
        Some(match name {
            "f16" => DType::F16,
            "bf16" => DType::BF16,
            "f32" => DType::F32,
            "i32" => DType::I32,
            "u32" => DType::U32,
            "i64" => DType::I64,
            "bool" => DType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A constant. Floats of 16 bits are kept as their bit patterns (`half`).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// An `f16` constant.
    F16(half::f16),
    /// A `bf16` constant.
    BF16(half::bf16),
    /// An `f32` constant (in JSON, non-finite values as `"inf"`, `"-inf"`, `"NaN"`).
    F32(#[serde(with = "f32_json")] f32),
    /// An `i32` constant.
    I32(i32),
    /// A `u32` constant.
    U32(u32),
    /// An `i64` constant.
    I64(i64),
    /// A `bool` constant.
    Bool(bool),
}

impl Value {
    /// The constant's type.
    pub fn dtype(self) -> DType {
        match self {
            Value::F16(_) => DType::F16,
            Value::BF16(_) => DType::BF16,
            Value::F32(_) => DType::F32,
            Value::I32(_) => DType::I32,
            Value::U32(_) => DType::U32,
            Value::I64(_) => DType::I64,
            Value::Bool(_) => DType::Bool,
        }
    }
}

/// JSON cannot hold infinities or NaN (serde_json writes them as `null`,
/// which does not read back): finite f32 constants are numbers, the others
/// the strings `"inf"`, `"-inf"`, `"NaN"`.
mod f32_json {
    use serde::{de, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f32(*v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrName {
        Number(f32),
        Name(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
        match NumberOrName::deserialize(d)? {
            NumberOrName::Number(v) => Ok(v),
            NumberOrName::Name(n) => match n.as_str() {
                "inf" => Ok(f32::INFINITY),
                "-inf" => Ok(f32::NEG_INFINITY),
                "NaN" => Ok(f32::NAN),
                other => {
                    Err(de::Error::custom(format!("expected an f32 or \"inf\", \"-inf\", \"NaN\", got {other:?}")))
                }
            },
        }
    }
}

/// Where a buffer lives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// A kernel parameter in device memory. Row-major and contiguous.
    Global,
    /// Shared memory of the block; every thread can read every element.
    Shared,
    /// A tile distributed over the block's threads in registers; its layout
    /// (which thread holds which element) is inferred by the compiler.
    Fragment,
    /// A small block-uniform array (every thread holds a full copy).
    Local,
}

/// One extent of a buffer's shape.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Extent {
    /// A constant extent, in `1..=i32::MAX` (`verify` checks).
    Const(i64),
    /// A dynamic dimension: the variable (of kind [`VarKind::Dim`]) bound at
    /// launch from the tensor's shape. Only global buffers have these.
    Dyn(VarId),
}

/// A buffer of the kernel: a tensor parameter, a shared-memory tile, a
/// fragment or a local array ([`Scope`]), an entry of [`Kernel::buffers`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Buffer {
    /// The user's name for it (in messages, dumps and the text form).
    pub name: String,
    /// Where it lives, and so who sees which element.
    pub scope: Scope,
    /// The element type.
    pub dtype: DType,
    /// One extent per dimension, outermost first (row-major). Constant except
    /// for global buffers, whose extents may be dynamic dims.
    pub shape: Vec<Extent>,
    /// For global buffers: whether the kernel may write it (`&mut Tensor`).
    pub mutable: bool,
    /// Where the buffer was declared (the parameter or the `let`).
    pub span: SpanId,
    /// For shared buffers: the layout the user asked for with
    /// `annotate_layout(..)`; `None` lets layout inference choose. It changes
    /// where elements sit in shared memory, never what the kernel computes
    /// (the interpreter ignores it).
    #[serde(default)]
    pub layout: Option<SharedLayoutSpec>,
    /// For shared buffers: `Some` when this buffer is a sub-view of another
    /// shared buffer ([`View`]): it owns no memory, its elements are the
    /// parent's elements in the window (`kv_s.view([.., 512..])`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<View>,
}

/// A rectangular window of a shared buffer `of` (never itself a view), at
/// constant `origin` (one coordinate per dim): element `i` of the view is
/// element `origin + i` of `of`; the view's `shape` (constant, the same rank
/// as `of`'s) is the window's extents. The view has the parent's element
/// type and shares its bytes (and its layout, its pipeline stages, its
/// dependences): writing one is writing the other.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct View {
    /// The shared buffer that owns the bytes (not itself a view).
    pub of: BufferId,
    /// The window's first element in `of`, one coordinate per dimension.
    pub origin: Vec<i64>,
}

/// A user-chosen placement of a shared buffer `[rows, cols]` (outer extents
/// folded into `rows`) in shared memory; see [`crate::layout::SharedLayout::from_spec`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SharedLayoutSpec {
    /// Rows one after another, unpadded and unswizzled.
    RowMajor,
    /// Each row followed by `bytes` unused bytes (a positive multiple of 16,
    /// so that 16-byte chunks stay aligned for cp.async and ldmatrix).
    Padded {
        /// The padding after each row, in bytes.
        bytes: i64,
    },
    /// The 16-byte chunk index within a row is XORed with the row index
    /// modulo `2^bits` (`bits` in 1..=3); rows must be a power of two of at
    /// least `16 · 2^bits` bytes. With 128-byte rows this is CuTe's
    /// `Swizzle<bits, 4, 3>` on byte offsets.
    Swizzle {
        /// How many low bits of the row index are XORed in (1..=3).
        bits: u32,
    },
}

impl fmt::Display for SharedLayoutSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SharedLayoutSpec::RowMajor => write!(f, "row_major()"),
            SharedLayoutSpec::Padded { bytes } => write!(f, "padded({bytes})"),
            SharedLayoutSpec::Swizzle { bits } => write!(f, "swizzle({bits})"),
        }
    }
}

impl Buffer {
    /// The shape as constants, if every extent is constant.
    pub fn const_shape(&self) -> Option<Vec<i64>> {
        self.shape
            .iter()
            .map(|e| match e {
                Extent::Const(c) => Some(*c),
                Extent::Dyn(_) => None,
            })
            .collect()
    }
    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// A plain (non-view) buffer.
    pub fn new(name: impl Into<String>, scope: Scope, dtype: DType, shape: Vec<Extent>) -> Buffer {
        Buffer { name: name.into(), scope, dtype, shape, mutable: false, span: SpanId::NONE, layout: None, view: None }
    }
}

/// What a scalar variable is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VarKind {
    /// A dynamic dimension of a tensor parameter (an `i32` kernel argument).
    Dim,
    /// A scalar kernel parameter.
    Param,
    /// The block index along axis 0 (x), 1 (y) or 2 (z), from `grid(...)`.
    BlockIdx(u8),
    /// A loop induction variable.
    Loop,
    /// Bound once by `let`.
    Let,
    /// Bound by `let mut`, reassigned by [`StmtKind::Assign`].
    Mut,
}

/// A scalar variable of the kernel, an entry of [`Kernel::vars`]: uniform
/// (one value for the whole block) outside parallel loops, per iteration
/// inside them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Var {
    /// The user's name for it (not necessarily unique: shadowing makes new vars).
    pub name: String,
    /// Its type; every value it holds has it.
    pub dtype: DType,
    /// How it gets its value.
    pub kind: VarKind,
}

/// Unary operators. The float ones compute in f32 and round to the operand's
/// type; on integers only `Neg`, `Not` and `Abs` apply (wrapping).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnOp {
    /// `-x` (floats: the sign bit flipped; integers: wrapping).
    Neg,
    /// Logical not on `Bool`, bitwise not on integers.
    Not,
    /// `2^x` (floats).
    Exp2,
    /// `e^x` (floats).
    Exp,
    /// Base-2 logarithm (floats).
    Log2,
    /// Natural logarithm (floats).
    Log,
    /// `|x|` (integers wrapping: `abs(i32::MIN) = i32::MIN`).
    Abs,
    /// Square root (floats).
    Sqrt,
    /// `1 / sqrt(x)` (floats).
    Rsqrt,
}

/// Binary operators; both operands have one type (see [`Kernel::expr_type`]
/// for the result's). Float operations compute in f32 and round to the
/// operands' type; integer ones wrap.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// Integer division truncates toward zero (Rust semantics).
    Div,
    /// Integer remainder has the sign of the dividend (Rust semantics).
    Rem,
    /// The smaller operand (floats: a NaN operand gives the other one).
    Min,
    /// The larger operand (floats: a NaN operand gives the other one).
    Max,
    /// `a < b` (a `Bool`).
    Lt,
    /// `a <= b` (a `Bool`).
    Le,
    /// `a > b` (a `Bool`).
    Gt,
    /// `a >= b` (a `Bool`).
    Ge,
    /// `a == b` (a `Bool`; floats: NaN equals nothing).
    Eq,
    /// `a != b` (a `Bool`).
    Ne,
    /// Logical on `Bool`, bitwise on integers.
    And,
    /// Logical or on `Bool`, bitwise on integers.
    Or,
    /// Exclusive or: logical on `Bool`, bitwise on integers.
    Xor,
    /// `a << b` on integers; amounts at or past the width give 0 (as PTX).
    Shl,
    /// `a >> b` on integers: arithmetic for signed types, logical for `U32`;
    /// amounts at or past the width give 0 (or the sign for signed types).
    Shr,
}

impl BinOp {
    /// Whether the operator compares (`Lt` .. `Ne`) and so yields a `Bool`.
    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne)
    }
}

/// A side-effect-free expression tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    /// A constant.
    Const(Value),
    /// The current value of a variable.
    Var(VarId),
    /// Element read. Global reads out of bounds give zero.
    Load {
        /// The buffer read.
        buf: BufferId,
        /// One `I32` index per dimension of `buf`.
        index: Vec<Expr>,
    },
    /// `op(arg)`.
    Unary {
        /// The operator.
        op: UnOp,
        /// The operand.
        arg: Box<Expr>,
    },
    /// `lhs op rhs`.
    Binary {
        /// The operator.
        op: BinOp,
        /// The left operand.
        lhs: Box<Expr>,
        /// The right operand (same type as `lhs`).
        rhs: Box<Expr>,
    },
    /// `a * b + c`, rounded once for floats.
    Fma {
        /// A factor.
        a: Box<Expr>,
        /// The other factor (same type as `a`).
        b: Box<Expr>,
        /// The addend (same type as `a`).
        c: Box<Expr>,
    },
    /// Numeric conversion (`as`): float→int truncates and saturates, as Rust.
    Cast {
        /// The type converted to.
        to: DType,
        /// The value converted.
        arg: Box<Expr>,
    },
    /// `if cond { then } else { otherwise }` as a value; both arms have one
    /// type.
    Select {
        /// A `Bool`.
        cond: Box<Expr>,
        /// The value when `cond` holds.
        then: Box<Expr>,
        /// The value when it does not (same type as `then`).
        otherwise: Box<Expr>,
    },
}

impl Expr {
    /// An `i32` constant.
    pub fn i32(v: i32) -> Expr {
        Expr::Const(Value::I32(v))
    }
    /// An `f32` constant.
    pub fn f32(v: f32) -> Expr {
        Expr::Const(Value::F32(v))
    }
    /// A read of variable `v`.
    pub fn var(v: VarId) -> Expr {
        Expr::Var(v)
    }
    /// `lhs op rhs`.
    pub fn binary(op: BinOp, lhs: Expr, rhs: Expr) -> Expr {
        Expr::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs) }
    }
    /// `op(arg)`.
    pub fn unary(op: UnOp, arg: Expr) -> Expr {
        Expr::Unary { op, arg: Box::new(arg) }
    }
    /// `arg as to`.
    pub fn cast(to: DType, arg: Expr) -> Expr {
        Expr::Cast { to, arg: Box::new(arg) }
    }
    /// `buf[index]`.
    pub fn load(buf: BufferId, index: Vec<Expr>) -> Expr {
        Expr::Load { buf, index }
    }
    /// Adds every buffer this expression loads from to `out` (a load
    /// before the loads in its index), repeats included.
    pub fn collect_loads(&self, out: &mut impl Extend<BufferId>) {
        match self {
            Expr::Const(_) | Expr::Var(_) => {}
            Expr::Load { buf, index } => {
                out.extend([*buf]);
                index.iter().for_each(|x| x.collect_loads(out));
            }
            Expr::Unary { arg, .. } | Expr::Cast { arg, .. } => arg.collect_loads(out),
            Expr::Binary { lhs, rhs, .. } => [lhs, rhs].iter().for_each(|x| x.collect_loads(out)),
            Expr::Fma { a, b, c } => [a, b, c].iter().for_each(|x| x.collect_loads(out)),
            Expr::Select { cond, then, otherwise } => [cond, then, otherwise].iter().for_each(|x| x.collect_loads(out)),
        }
    }
    /// Whether this is a constant whose bits are all zero (possibly cast):
    /// what a zero-filling copy (cp.async `src_bytes`, TMA out of bounds) gives.
    pub fn is_zero_constant(&self) -> bool {
        match self {
            Expr::Const(v) => match *v {
                Value::F16(x) => x.to_bits() == 0,
                Value::BF16(x) => x.to_bits() == 0,
                Value::F32(x) => x.to_bits() == 0,
                Value::I32(x) => x == 0,
                Value::U32(x) => x == 0,
                Value::I64(x) => x == 0,
                Value::Bool(x) => !x,
            },
            Expr::Cast { arg, .. } => arg.is_zero_constant(),
            _ => false,
        }
    }

    /// `ceil(a / b)` for non-negative integers.
    pub fn cdiv(a: Expr, b: Expr) -> Expr {
        let sum = Expr::binary(BinOp::Add, a, Expr::binary(BinOp::Sub, b.clone(), Expr::i32(1)));
        Expr::binary(BinOp::Div, sum, b)
    }
}

/// A rectangular window of a buffer. For shared, fragment and local buffers
/// `origin` is empty: the whole buffer. For a global tensor it holds one
/// coordinate per tensor dimension (`t.tile([r, c])`). The tensor dims not in
/// `squeezed` are the window's *spanned* dims: they take, in order, the
/// extents of the other side of the copy (whose rank equals their number),
/// starting at their origin coordinate. A squeezed dim is a scalar index
/// (extent 1, not a dim of the other side): `q.tile([b, s0.., h, ..])` of a
/// `[b, s, h, d]` tensor into a `[BM, D]` buffer has `squeezed = [0, 2]`.
/// `squeezed` is sorted, without repeats, each `< origin.len()`; empty means
/// every dim is spanned (the buffer's rank equals the tensor's). Elements of
/// the window that fall outside the tensor are masked (a squeezed index out
/// of range masks the whole window): reads give the fill value (default
/// zero), writes are skipped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TileRef {
    /// The buffer the window is of.
    pub buf: BufferId,
    /// For a global tensor, the window's first element: one `I32` coordinate per
    /// tensor dimension. Empty for other scopes (the whole buffer).
    pub origin: Vec<Expr>,
    /// The tensor dims indexed by a scalar (extent 1, not spanned); sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub squeezed: Vec<usize>,
}

impl TileRef {
    /// A window spanning every dim of `buf` from `origin` (no squeezed dims).
    pub fn new(buf: BufferId, origin: Vec<Expr>) -> TileRef {
        TileRef { buf, origin, squeezed: Vec::new() }
    }

    /// The tensor dims the window spans, in order (those not squeezed).
    pub fn spanned(&self) -> Vec<usize> {
        (0..self.origin.len()).filter(|d| !self.squeezed.contains(d)).collect()
    }

    /// Whether the squeezed dims are exactly the leading ones (`0..n`), so
    /// that the window is the trailing dims of the tensor.
    pub fn squeezes_leading_only(&self) -> bool {
        self.squeezed.iter().enumerate().all(|(i, &d)| i == d)
    }
}

/// The combining operator of a [`StmtKind::Reduce`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The largest element.
    Max,
    /// The smallest element.
    Min,
}

/// How the warps of a block split the `M × N` output of a [`StmtKind::Gemm`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WarpPolicy {
    /// As square as the warp count allows (the default).
    Square,
    /// Each warp owns whole rows of the output (warps split M only).
    FullRow,
    /// Each warp owns whole columns of the output (warps split N only).
    FullCol,
    /// Warpgroup `w` alone (threads `128·w .. 128·w + 128`) computes the
    /// whole `[64, N]` output and holds it: the other warpgroups hold no
    /// part of it, nor of the fragments derived from it, and skip the
    /// statements on them, so that they run other work at the same time
    /// (MLA decode: warpgroup 0's scores and softmax while both hold half
    /// of O). Values reach the other warpgroups through shared memory.
    Warpgroup(u32),
}

impl WarpPolicy {
    /// The warpgroup that alone computes and holds the output
    /// ([`WarpPolicy::Warpgroup`]), if any.
    pub fn owner(self) -> Option<u32> {
        match self {
            WarpPolicy::Warpgroup(w) => Some(w),
            _ => None,
        }
    }
}

/// The L2 policy of a [`StmtKind::Copy`]'s global reads (`copy(..)
/// .evict_first()`): a hint, which changes no result. TMA copies carry it
/// (`.L2::cache_hint` with a `createpolicy` policy); the others ignore it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CacheHint {
    /// The L2's default policy.
    #[default]
    Normal,
    /// Data read once (a streamed KV cache): evicted from the L2 first.
    EvictFirst,
}

impl CacheHint {
    /// Whether this is [`CacheHint::Normal`] (not written in the IR's serialized form).
    pub fn is_default(&self) -> bool {
        *self == CacheHint::Normal
    }
}

/// How a [`StmtKind::For`] loop runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoopKind {
    /// Iterations run in order, uniformly across the block.
    Serial,
    /// Iterations are independent; mapped to threads. Constant bounds.
    Parallel,
    /// `pipelined(n, stages)`: means what `Serial` means; the schedules
    /// software-pipeline the body's copies over `stages` buffers
    /// (`passes/pipeline.rs`: cp.async, TMA, warp specialization), and the
    /// general schedule runs it as `Serial`.
    Pipelined {
        /// The number of buffers each pipelined copy cycles through (at
        /// least 1, which `verify` checks).
        stages: u32,
    },
}

/// A statement and where it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stmt {
    /// What it does.
    pub kind: StmtKind,
    /// Where the user wrote it ([`SpanId::NONE`] for IR built by hand): the
    /// position of errors a pass finds in it.
    pub span: SpanId,
}

/// What a statement does. Block-level: see the module docs for what runs
/// once per block and what per thread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StmtKind {
    /// Bind a `Let` or `Mut` variable.
    Let {
        /// The variable bound (of kind `Let` or `Mut`).
        var: VarId,
        /// Its value (of its type).
        value: Expr,
    },
    /// Reassign a `Mut` variable.
    Assign {
        /// The variable (of kind `Mut`).
        var: VarId,
        /// Its new value (of its type).
        value: Expr,
    },
    /// Element write. Global writes out of bounds are skipped.
    Store {
        /// The buffer written (not a read-only tensor).
        buf: BufferId,
        /// One `I32` index per dimension.
        index: Vec<Expr>,
        /// The value (of the buffer's element type).
        value: Expr,
    },
    /// `for var in start..end` (step 1).
    For {
        /// The induction variable (kind `Loop`, `I32`).
        var: VarId,
        /// The first value (`I32`; constant in a `Parallel` loop).
        start: Expr,
        /// One past the last value (`I32`; constant in a `Parallel` loop). No
        /// iteration when `end <= start`.
        end: Expr,
        /// Serial, parallel or pipelined.
        kind: LoopKind,
        /// The statements of one iteration.
        body: Vec<Stmt>,
    },
    /// `if cond { then } else { otherwise }`; a uniform condition outside
    /// parallel loops, a per-iteration one inside.
    If {
        /// A `Bool`.
        cond: Expr,
        /// Runs when `cond` holds.
        then: Vec<Stmt>,
        /// Runs when it does not (often empty).
        otherwise: Vec<Stmt>,
    },
    /// Collective copy, converting the element type if the two differ.
    /// `fill` (of the destination's dtype) replaces masked reads; `cache`:
    /// how the L2 keeps what a copy from a global tensor reads.
    Copy {
        /// What is read: a window of a tensor, or a whole shared/fragment buffer.
        src: TileRef,
        /// What is written (the same extents as `src`'s spanned ones).
        dst: TileRef,
        /// The value of masked reads (default zero).
        fill: Option<Expr>,
        /// The L2 policy of the global reads (a hint: no result changes).
        #[serde(default, skip_serializing_if = "CacheHint::is_default")]
        cache: CacheHint,
    },
    /// Set every element of a shared, fragment or local buffer.
    Fill {
        /// The buffer set.
        buf: BufferId,
        /// The value (of its element type).
        value: Expr,
    },
    /// `dst = reduce(src, dim)`; `dst`'s shape is `src`'s without `dim`.
    /// With `keep`, `dst = op(dst, reduce(src, dim))`.
    Reduce {
        /// The combining operator.
        op: ReduceOp,
        /// The fragment reduced.
        src: BufferId,
        /// The fragment the result goes to: `src`'s shape without `dim`.
        dst: BufferId,
        /// The dimension of `src` reduced away.
        dim: usize,
        /// Combine with `dst`'s previous contents instead of overwriting them.
        keep: bool,
    },
    /// Matrix multiply on tensor cores: `c = op(a) · op(b)` (with `clear`) or
    /// `c += op(a) · op(b)`, where `op` transposes when `trans_*` is set.
    /// `a` is `[M, K]` (`[K, M]` with `trans_a`), a shared buffer or a
    /// fragment; `b` is `[K, N]` (`[N, K]` with `trans_b`), a shared buffer;
    /// both f16 or both bf16. `c` is an f32 fragment `[M, N]`. Products are
    /// accumulated in f32.
    Gemm {
        /// The left operand (see above for its shapes and scopes).
        a: BufferId,
        /// The right operand, a shared buffer.
        b: BufferId,
        /// The f32 accumulator fragment `[M, N]`.
        c: BufferId,
        /// `a` is stored `[K, M]`.
        trans_a: bool,
        /// `b` is stored `[N, K]`.
        trans_b: bool,
        /// Overwrite `c` (`c = a · b`) instead of accumulating into it.
        clear: bool,
        /// How the warps split `c`.
        policy: WarpPolicy,
    },
    /// Atomic `+=` on one element of a global tensor (skipped out of bounds).
    AtomicAdd {
        /// The tensor (a writable global buffer).
        buf: BufferId,
        /// One `I32` index per dimension.
        index: Vec<Expr>,
        /// The value added (of the tensor's element type).
        value: Expr,
    },
    /// Explicit block-wide barrier (escape hatch; the compiler inserts the
    /// ones that shared-memory dependences need).
    Barrier,
    /// A debug print of scalar values ([`crate::print_format`]): `format`
    /// holds one `{}` (or `{:e}`) per argument, `{{` and `}}` for braces; a
    /// line is printed each time the statement runs: once per block outside
    /// parallel loops (on the GPU by thread 0), once per iteration inside
    /// one (by the thread that owns the iteration, replicas excluded).
    Print {
        /// The format string, one placeholder per argument.
        format: String,
        /// The values printed, in order (scalars).
        args: Vec<Expr>,
    },
}

/// A kernel parameter, in the order the user wrote them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Param {
    /// The parameter's name in the signature.
    pub name: String,
    /// A tensor or a scalar.
    pub kind: ParamKind,
}

/// What a kernel parameter is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ParamKind {
    /// `&Tensor<T, [..]>` or `&mut Tensor<T, [..]>`: a global buffer.
    Tensor(BufferId),
    /// A scalar (`f32`, `i32`, `u32`, `f16`, `bf16`).
    Scalar(VarId),
}

/// One kernel.
///
/// The launch ABI (the PTX parameter list, the same for every target) is:
/// one `.u64` pointer per tensor parameter in `params` order, then one `.s32`
/// per dynamic dimension in `dims` order, then each scalar parameter in
/// `params` order (`.f32`, `.s32`, `.u32`, `.b16` for f16/bf16).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    /// The kernel's name, the PTX entry's (an instance's for a generic
    /// kernel: `matmul__f16_128`).
    pub name: String,
    /// Threads per block (1-D).
    pub threads: u32,
    /// The parameters, in signature order (the launch ABI above orders
    /// them: tensors, then dims, then scalars).
    pub params: Vec<Param>,
    /// The dynamic dimensions (variables of kind `Dim`), in first-seen order.
    pub dims: Vec<VarId>,
    /// Grid extents (x, y, z); expressions over `Dim` variables and constants,
    /// evaluated on the host at launch.
    pub grid: [Expr; 3],
    /// The variables, indexed by [`VarId`].
    pub vars: Vec<Var>,
    /// The buffers, indexed by [`BufferId`]: tensor parameters and every
    /// buffer the body declares.
    pub buffers: Vec<Buffer>,
    /// What one block does.
    pub body: Vec<Stmt>,
    /// Threadblock rasterization for L2 reuse (`use_swizzle(panel)`): when
    /// set, the block with hardware linear id `L = ctaid.y * gx + ctaid.x`
    /// runs as block `(bx, by) = abi::rasterize(panel, gx, gy, L)`, which
    /// visits the 2-D grid in panels of `panel` columns (x), walking down each
    /// panel before moving to the next. Every block still runs exactly once,
    /// so the kernel's meaning does not change. At least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rasterize: Option<u32>,
    /// Thread block cluster shape `[x, y, z]` (`cluster = (x, y, z)` in the
    /// attribute; sm_90 and later). Blocks of a cluster are co-scheduled on
    /// one GPC; the grid must be a multiple of it. `[1, 1, 1]` (the default)
    /// launches without clusters. Devices without clusters (sm_80) ignore it:
    /// the kernel's meaning does not depend on it.
    #[serde(default = "no_cluster", skip_serializing_if = "is_no_cluster")]
    pub cluster: [u32; 3],
    /// Whether the sm_90a compiler may warp-specialize pipelined loops (a
    /// producer warpgroup issuing TMA, the block's threads consuming with
    /// wgmma; `passes/warp_specialize.rs`). `warp_specialize = false` in the
    /// attribute turns it off. Default on.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub warp_specialize: bool,
    /// Blocks the kernel asks to run side by side on one SM
    /// (`blocks_per_sm = N` in the attribute; default 1, which asks nothing).
    /// Above 1 it is the launch bound `.minnctapersm N` (ptxas keeps each
    /// thread's registers within an `N`-th of the SM's file), the
    /// warp-specialized GEMM sizes its `setmaxnreg` split for `N` blocks
    /// (the block's own pool at that bound), and compiling fails where `N`
    /// blocks' shared memory does not fit one SM. A memory-bound kernel
    /// (a GEMM at decode-size M) keeps `N` times the bytes in flight. It
    /// never changes what the kernel computes. The warp-specialized loop
    /// picks its own bound and ignores it.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub blocks_per_sm: u32,
    /// Launched as a programmatic dependent of the kernel before it on the
    /// stream (`dependent_launch = true` in the attribute; sm_90 and later):
    /// the launch may begin while that kernel finishes, and every thread
    /// first waits (`griddepcontrol.wait`) until it has completed and its
    /// writes are visible, so the kernel reads exactly what it would after
    /// an ordinary launch. What it gains is the launch's latency, hidden
    /// under the previous kernel's tail. Devices without it (sm_80) launch
    /// it as usual. Default off.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dependent_launch: bool,
    /// Where the statements are in the user's source, for the messages of
    /// the interpreter (its check mode): set by `#[tile_kernel]` in the IR it
    /// embeds; `None` in kernels built by hand or parsed from text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceMap>,
}

/// The source locations of a kernel's spans ([`Kernel::source`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceMap {
    /// The file of the kernel, as the compiler names it (relative to the
    /// crate being built).
    pub file: String,
    /// The line (1-based) of each [`SpanId`], by index; 0 where the
    /// compiler gave none (proc macros know lines from Rust 1.88).
    pub lines: Vec<u32>,
}

fn no_cluster() -> [u32; 3] {
    [1, 1, 1]
}
fn is_no_cluster(c: &[u32; 3]) -> bool {
    *c == [1, 1, 1]
}
fn yes() -> bool {
    true
}
fn is_yes(b: &bool) -> bool {
    *b
}
fn is_false(b: &bool) -> bool {
    !*b
}

fn one() -> u32 {
    1
}
fn is_one(n: &u32) -> bool {
    *n == 1
}

impl Kernel {
    /// An empty kernel of `threads` threads per block: no parameters, a 1×1×1
    /// grid, no rasterization or cluster, warp specialization allowed, one block
    /// per SM asked.
    pub fn new(name: impl Into<String>, threads: u32) -> Kernel {
        Kernel {
            name: name.into(),
            threads,
            params: Vec::new(),
            dims: Vec::new(),
            grid: [Expr::i32(1), Expr::i32(1), Expr::i32(1)],
            vars: Vec::new(),
            buffers: Vec::new(),
            body: Vec::new(),
            rasterize: None,
            cluster: [1, 1, 1],
            warp_specialize: true,
            blocks_per_sm: 1,
            dependent_launch: false,
            source: None,
        }
    }

    /// `file:line` of a span, when [`Kernel::source`] knows it.
    pub fn source_line(&self, span: SpanId) -> Option<String> {
        let map = self.source.as_ref()?;
        match map.lines.get(span.0 as usize) {
            Some(&line) if line > 0 => Some(format!("{}:{line}", map.file)),
            _ => None,
        }
    }

    /// The variable `id` (panics when out of range; verified kernels never are).
    pub fn var(&self, id: VarId) -> &Var {
        &self.vars[id.0 as usize]
    }
    /// The buffer `id` (panics when out of range; verified kernels never are).
    pub fn buffer(&self, id: BufferId) -> &Buffer {
        &self.buffers[id.0 as usize]
    }

    /// The buffer that owns `id`'s memory (its [`View::of`] for a view,
    /// else `id` itself) and `id`'s origin in it (empty when not a view).
    pub fn view_root(&self, id: BufferId) -> (BufferId, &[i64]) {
        match self.buffers.get(id.0 as usize).and_then(|b| b.view.as_ref()) {
            Some(v) => (v.of, &v.origin),
            None => (id, &[]),
        }
    }

    /// Whether `a` and `b` may share bytes: one buffer, or views of one buffer.
    pub fn same_memory(&self, a: BufferId, b: BufferId) -> bool {
        self.view_root(a).0 == self.view_root(b).0
    }

    /// The views of `id` (the buffers whose [`View::of`] is `id`).
    pub fn views_of(&self, id: BufferId) -> Vec<BufferId> {
        (0..self.buffers.len() as u32)
            .map(BufferId)
            .filter(|&b| self.buffer(b).view.as_ref().is_some_and(|v| v.of == id))
            .collect()
    }

    /// Adds a variable and returns its handle (the next index).
    pub fn add_var(&mut self, name: impl Into<String>, dtype: DType, kind: VarKind) -> VarId {
        self.vars.push(Var { name: name.into(), dtype, kind });
        VarId(self.vars.len() as u32 - 1)
    }

    /// Adds a buffer and returns its handle (the next index). Does not make it
    /// a parameter: see [`Kernel::add_tensor_param`].
    pub fn add_buffer(&mut self, buffer: Buffer) -> BufferId {
        self.buffers.push(buffer);
        BufferId(self.buffers.len() as u32 - 1)
    }

    /// Adds a dynamic dimension (an `i32` variable of kind `Dim`) and records
    /// it in `dims`.
    pub fn add_dim(&mut self, name: impl Into<String>) -> VarId {
        let v = self.add_var(name, DType::I32, VarKind::Dim);
        self.dims.push(v);
        v
    }

    /// Adds a tensor parameter (a global buffer) and records it in `params`.
    pub fn add_tensor_param(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: Vec<Extent>,
        mutable: bool,
    ) -> BufferId {
        let name = name.into();
        let id = self.add_buffer(Buffer {
            name: name.clone(),
            scope: Scope::Global,
            dtype,
            shape,
            mutable,
            span: SpanId::NONE,
            layout: None,
            view: None,
        });
        self.params.push(Param { name, kind: ParamKind::Tensor(id) });
        id
    }

    /// Adds a scalar parameter and records it in `params`.
    pub fn add_scalar_param(&mut self, name: impl Into<String>, dtype: DType) -> VarId {
        let name = name.into();
        let v = self.add_var(name.clone(), dtype, VarKind::Param);
        self.params.push(Param { name, kind: ParamKind::Scalar(v) });
        v
    }

    /// The type of an expression. Assumes the kernel verifies (operands agree).
    pub fn expr_type(&self, e: &Expr) -> DType {
        match e {
            Expr::Const(v) => v.dtype(),
            Expr::Var(v) => self.var(*v).dtype,
            Expr::Load { buf, .. } => self.buffer(*buf).dtype,
            Expr::Unary { arg, .. } => self.expr_type(arg),
            Expr::Binary { op, lhs, .. } => {
                if op.is_comparison() {
                    DType::Bool
                } else {
                    self.expr_type(lhs)
                }
            }
            Expr::Fma { a, .. } => self.expr_type(a),
            Expr::Cast { to, .. } => *to,
            Expr::Select { then, .. } => self.expr_type(then),
        }
    }
}

impl Stmt {
    /// A statement without a source location ([`SpanId::NONE`]).
    pub fn new(kind: StmtKind) -> Stmt {
        Stmt { kind, span: SpanId::NONE }
    }
    /// A statement at `span`.
    pub fn spanned(kind: StmtKind, span: SpanId) -> Stmt {
        Stmt { kind, span }
    }
}
