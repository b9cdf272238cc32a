//! The kernel language, item by item: what a `#[tile_kernel]` body can call.
//!
//! A kernel body is not ordinary Rust: [`tile_kernel`](crate::tile_kernel)
//! reads it and compiles it to PTX, and the names it recognizes (`grid`,
//! `copy`, `gemm`, `parallel`, ...) are the language's, not Rust functions.
//! This module gives each of them a signature and a page with an example
//! (each runs as a doctest, in the CPU interpreter), so that docs.rs has the
//! reference and rust-analyzer can show it: the macro emits, under
//! `cfg(rust_analyzer)` only, a `use` of the item behind each name the body
//! calls, so hovering `copy` in a kernel shows [`copy`]'s page and "go to
//! definition" lands here. The signatures say what each takes in the
//! language's terms; the complete rules (shapes, types, placement) are in
//! the docs of [`tile_kernel`](crate::tile_kernel).
//!
//! The functions here exist for documentation and editors: called from
//! ordinary Rust code (outside a kernel) they panic with a message that says
//! so.
//!
//! Attribute options (`threads`, `consts`, `cluster`, `warp_specialize`,
//! `blocks_per_sm`, `dependent_launch`, `archs`, `instances`, `tune`) are
//! documented in [`attributes`].
//!
//! ```
//! use tile::prelude::*;
//!
//! /// `y = 2 x`, 256 elements per block.
//! #[tile_kernel(threads = 128, consts(B = 256))]
//! fn double(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
//!     let bx = grid(cdiv(N, B));
//!     let mut t = fragment::<f32, B>();
//!     copy(x.tile([bx * B]), &mut t);
//!     for i in parallel(B) {
//!         t[i] = t[i] * 2.0;
//!     }
//!     copy(&t, y.tile([bx * B]));
//! }
//!
//! # fn main() -> tile::Result<()> {
//! let y = tile::dsl::doc_run(double::launch, &[1.0, 2.0, 3.0])?;
//! assert_eq!(y, [2.0, 4.0, 6.0]);
//! # Ok(()) }
//! ```
#![allow(unused_variables, clippy::too_many_arguments)]

use std::marker::PhantomData;

use crate::{Device, DeviceTensor, Stream};

#[cold]
fn outside_kernel(name: &str) -> ! {
    panic!("`{name}` is part of the tile kernel language: it is valid only inside a `#[tile_kernel]` function's body")
}

/// Runs a kernel `f(stream, x, y)` over 1-D f32 tensors in the interpreter
/// (`y` zeroed, of `x`'s length) and returns `y`: the examples' harness.
#[doc(hidden)]
pub fn doc_run(
    f: impl Fn(&Stream, &DeviceTensor<f32>, &mut DeviceTensor<f32>) -> crate::Result<()>,
    x: &[f32],
) -> crate::Result<Vec<f32>> {
    doc_run_2d(f, x, &[x.len()])
}

/// [`doc_run`] over tensors of any shape (row-major `x`).
#[doc(hidden)]
pub fn doc_run_2d(
    f: impl Fn(&Stream, &DeviceTensor<f32>, &mut DeviceTensor<f32>) -> crate::Result<()>,
    x: &[f32],
    shape: &[usize],
) -> crate::Result<Vec<f32>> {
    let stream = Device::interpreter().stream()?;
    let xt = DeviceTensor::from_slice(&stream, x, shape)?;
    let mut yt = DeviceTensor::<f32>::zeros(&stream, shape)?;
    f(&stream, &xt, &mut yt)?;
    yt.to_vec(&stream)
}

// ---- types ----

/// A tensor parameter: `&Tensor<T, D0, D1, ..>` (read) or `&mut Tensor<..>`
/// (written), one to five dimensions, each a name (a dynamic size, bound
/// from the argument's shape at launch and usable as an `i32` in the body)
/// or a literal. Row-major and contiguous. Launched with a
/// [`DeviceTensor`].
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 32))]
/// fn row_len(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(M);
///     let mut t = fragment::<f32, 1, B>();
///     for (i, j) in parallel((1, B)) {
///         t[(i, j)] = N as f32;
///     }
///     copy(&t, y.tile([bx, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run_2d(row_len::launch, &[0.0; 6], &[2, 3])?;
/// assert_eq!(y, [3.0; 6]);
/// # Ok(()) }
/// ```
pub struct Tensor<T, D0 = (), D1 = (), D2 = (), D3 = (), D4 = ()>(PhantomData<(T, D0, D1, D2, D3, D4)>);

/// A window of a tensor, the side of a [`copy`]: [`Tensor::tile`]. A
/// whole tensor, `&x`, is the window at its origin (`x.tile([0, 0, ..])`).
///
/// ```
/// use tile::prelude::*;
///
/// /// The first 8 elements, through a whole-tensor window.
/// #[tile_kernel(threads = 32, consts(B = 8))]
/// fn first8(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     grid(1);
///     let mut s = shared::<f32, B>();
///     copy(&x, &mut s);
///     copy(&s, y.tile([0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let x: Vec<f32> = (1..=10).map(|i| i as f32).collect();
/// let y = tile::dsl::doc_run(first8::launch, &x)?;
/// assert_eq!(y, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 0.0, 0.0]);
/// # Ok(()) }
/// ```
pub struct Tile<T>(PhantomData<T>);

impl<T, D0, D1, D2, D3, D4> Tensor<T, D0, D1, D2, D3, D4> {
    /// `t.tile([r, c])`: the window of the buffer on the other side of the
    /// [`copy`], its corner at `[r, c]`. One entry per tensor dimension:
    /// `e` (a plain index), `e..` (the window spans this dimension from
    /// `e`) or `..` (from 0). Without ranges every entry spans; with ranges,
    /// the plain entries are squeezed (extent 1, not a dimension of the
    /// buffer). Masked at the tensor's edges: reads give 0 (or
    /// [`CopyStmt::fill`]), writes are skipped.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// /// Copies column 1 of each 4-row block: a strided window.
    /// #[tile_kernel(threads = 32, consts(B = 4))]
    /// fn column(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    ///     let bx = grid(cdiv(M, B));
    ///     let mut c = fragment::<f32, B>();
    ///     copy(x.tile([bx * B.., 1]), &mut c);
    ///     copy(&c, y.tile([bx * B.., 1]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// let x: Vec<f32> = (0..6).map(|i| i as f32).collect();
    /// let y = tile::dsl::doc_run_2d(column::launch, &x, &[3, 2])?;
    /// assert_eq!(y, [0.0, 1.0, 0.0, 3.0, 0.0, 5.0]);
    /// # Ok(()) }
    /// ```
    pub fn tile<I>(&self, corner: I) -> Tile<T> {
        outside_kernel("tile")
    }
}

/// A buffer in shared memory, made by [`shared`]: visible to the whole
/// block, indexed anywhere, one index per dimension (`s[(i, j)]` or
/// `s[[i, j]]`; `s[i]` in 1-D).
///
/// ```
/// use tile::prelude::*;
///
/// /// Transposes a 4×4 tile: each thread reads the element it needs.
/// #[tile_kernel(threads = 32, consts(B = 4))]
/// fn transpose(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     grid(1);
///     let mut s = shared::<f32, B, B>();
///     let mut t = fragment::<f32, B, B>();
///     copy(x.tile([0, 0]), &mut s);
///     for (i, j) in parallel((B, B)) {
///         t[(i, j)] = s[[j, i]];
///     }
///     copy(&t, y.tile([0, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
/// let y = tile::dsl::doc_run_2d(transpose::launch, &x, &[4, 4])?;
/// assert_eq!(y[..4], [0.0, 4.0, 8.0, 12.0]);
/// assert_eq!(y[7], 13.0);
/// # Ok(()) }
/// ```
pub struct Shared<T>(PhantomData<T>);
/// The ranges of a [`Shared::view`]: an array of one half-open range per
/// dimension of the buffer (`a..b`, `a..`, `..b` or `..`: `[.., 512..]`,
/// `[0..32, ..]`), constant bounds inside the buffer.
///
/// ```
/// use tile::prelude::*;
///
/// /// The top-left 2×2 corner of a 4×4 tile, written at `[2, 2]`.
/// #[tile_kernel(threads = 32)]
/// fn corner(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     grid(1);
///     let mut s = shared::<f32, 4, 4>();
///     copy(x.tile([0, 0]), &mut s);
///     let c = s.view([0..2, ..2]);
///     copy(&c, y.tile([2, 2]));
/// }
/// # fn main() -> tile::Result<()> {
/// let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
/// let y = tile::dsl::doc_run_2d(corner::launch, &x, &[4, 4])?;
/// assert_eq!((y[10], y[11], y[14], y[15]), (0.0, 1.0, 4.0, 5.0));
/// assert_eq!(y.iter().filter(|&&v| v != 0.0).count(), 3);
/// # Ok(()) }
/// ```
pub struct ViewRanges;

impl<T> Shared<T> {
    /// `let v = s.view([.., 512..]);`: a window of `s` with no memory of its
    /// own (one range per dimension; `..` the whole dimension), usable
    /// wherever a shared buffer is: a [`gemm`] operand (with
    /// [`Transpose::t`]), either side of [`copy`], element access. Writing
    /// it writes `s`. It must be expressible in `s`'s layout (a compile error
    /// says when not: e.g. a column offset that is not a multiple of 64 in a
    /// buffer stored as 64-column panels).
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// /// Swaps the halves of each row through two views of one buffer.
    /// #[tile_kernel(threads = 32)]
    /// fn swap_halves(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    ///     grid(1);
    ///     let mut s = shared::<f32, 2, 8>();
    ///     let left = s.view([.., ..4]);
    ///     let right = s.view([.., 4..]);
    ///     copy(x.tile([0, 0]), &mut s);
    ///     copy(&right, y.tile([0, 0]));
    ///     copy(&left, y.tile([0, 4]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
    /// let y = tile::dsl::doc_run_2d(swap_halves::launch, &x, &[2, 8])?;
    /// assert_eq!(y[..8], [4.0, 5.0, 6.0, 7.0, 0.0, 1.0, 2.0, 3.0]);
    /// # Ok(()) }
    /// ```
    pub fn view(&self, ranges: ViewRanges) -> Shared<T> {
        outside_kernel("view")
    }
}

/// A tile spread over the threads' registers, made by [`fragment`]:
/// indexed only inside [`parallel`] loops, by their loop variables (which
/// say which thread holds which element). A fragment indexed by some of a
/// nest's variables (`s[i]` in a `(i, j)` nest) is the same value for every
/// `j`.
///
/// ```
/// use tile::prelude::*;
///
/// /// Each row divided by its sum.
/// #[tile_kernel(threads = 32, consts(B = 4))]
/// fn normalize(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(cdiv(M, B));
///     let mut t = fragment::<f32, B, B>();
///     let mut s = fragment::<f32, B>();
///     copy(x.tile([bx * B, 0]), &mut t);
///     reduce_sum(&t, &mut s, 1);
///     for (i, j) in parallel((B, B)) {
///         t[(i, j)] = t[(i, j)] / s[i];
///     }
///     copy(&t, y.tile([bx * B, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let x = [1.0, 1.0, 2.0, 0.0, 1.0, 2.0, 3.0, 4.0];
/// let y = tile::dsl::doc_run_2d(normalize::launch, &x, &[2, 4])?;
/// assert_eq!(y, [0.25, 0.25, 0.5, 0.0, 0.1, 0.2, 0.3, 0.4]);
/// # Ok(()) }
/// ```
pub struct Fragment<T>(PhantomData<T>);
/// A small array each thread holds, made by [`local`]: written outside
/// `parallel` loops (read anywhere), indexed by uniform values such as a
/// serial loop's variable (`for i in a..b`, `for i in a..=b`).
///
/// ```
/// use tile::prelude::*;
///
/// /// Running sums within each group of 4, in serial loops.
/// #[tile_kernel(threads = 32)]
/// fn prefix(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(cdiv(N, 4));
///     let mut acc = local::<f32, 4>();
///     acc[0] = x[bx * 4];
///     for i in 1..=3 {
///         acc[i] = acc[i - 1] + x[bx * 4 + i];
///     }
///     for i in 0..4 {
///         y[bx * 4 + i] = acc[i];
///     }
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run(prefix::launch, &[1.0, 2.0, 3.0, 4.0, 5.0])?;
/// assert_eq!(y, [1.0, 3.0, 6.0, 10.0, 5.0]);
/// # Ok(()) }
/// ```
pub struct Local<T>(PhantomData<T>);

// ---- the grid ----

/// `let (bx, by) = grid(x, y);`: the launch grid (1 to 3 extents, x first)
/// and this block's indices (`i32`). The kernel's first statement; extents
/// use tensor dimensions and constants only (the host computes the grid).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32)]
/// fn block_ids(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(N);
///     y[bx] = bx as f32;
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run(block_ids::launch, &[0.0; 4])?;
/// assert_eq!(y, [0.0, 1.0, 2.0, 3.0]);
/// # Ok(()) }
/// ```
pub fn grid(x: i32) -> i32 {
    outside_kernel("grid")
}

/// `use_swizzle(panel);` right after a 2-D grid: threadblock rasterization
/// (blocks run in panels of `panel` columns, for L2 reuse). Every block
/// still runs once: results do not change.
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 2))]
/// fn copy2d(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let (bx, by) = grid(cdiv(N, B), cdiv(M, B));
///     use_swizzle(2);
///     let mut t = shared::<f32, B, B>();
///     copy(x.tile([by * B, bx * B]), &mut t);
///     copy(&t, y.tile([by * B, bx * B]));
/// }
/// # fn main() -> tile::Result<()> {
/// let x: Vec<f32> = (0..30).map(|i| i as f32).collect();
/// assert_eq!(tile::dsl::doc_run_2d(copy2d::launch, &x, &[5, 6])?, x);
/// # Ok(()) }
/// ```
pub fn use_swizzle(panel: i32) {
    outside_kernel("use_swizzle")
}

// ---- buffers ----

/// `let mut s = shared::<T, D0, D1, ..>();`: a shared-memory buffer of
/// constant dimensions (literals, `consts` names or `{ expr }`), elements
/// `f16`, `bf16`, `f32`, `i32` or `u32`.
///
/// ```
/// use tile::prelude::*;
///
/// /// Reverses each block of 4 through shared memory.
/// #[tile_kernel(threads = 32, consts(B = 4))]
/// fn reverse(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(cdiv(N, B));
///     let mut s = shared::<f32, B>();
///     let mut t = fragment::<f32, B>();
///     copy(x.tile([bx * B]), &mut s);
///     for i in parallel(B) {
///         t[i] = s[B - 1 - i];
///     }
///     copy(&t, y.tile([bx * B]));
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run(reverse::launch, &[1.0, 2.0, 3.0, 4.0])?;
/// assert_eq!(y, [4.0, 3.0, 2.0, 1.0]);
/// # Ok(()) }
/// ```
pub fn shared<T>() -> Shared<T> {
    outside_kernel("shared")
}

/// `let mut f = fragment::<T, D0, D1, ..>();`: a tile in the threads'
/// registers (at most 256 per thread); its elements are read and written
/// inside [`parallel`] loops.
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 64))]
/// fn square(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(cdiv(N, B));
///     let mut t = fragment::<f32, B>();
///     copy(x.tile([bx * B]), &mut t);
///     for i in parallel(B) {
///         t[i] = t[i] * t[i];
///     }
///     copy(&t, y.tile([bx * B]));
/// }
/// # fn main() -> tile::Result<()> {
/// assert_eq!(tile::dsl::doc_run(square::launch, &[3.0, -2.0])?, [9.0, 4.0]);
/// # Ok(()) }
/// ```
pub fn fragment<T>() -> Fragment<T> {
    outside_kernel("fragment")
}

/// `let mut l = local::<T, D0, ..>();`: a small array (at most 256
/// elements) that every thread holds; written outside `parallel` loops.
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32)]
/// fn twice(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(N);
///     let mut l = local::<f32, 2>();
///     l[0] = x[bx];
///     l[1] = l[0] + l[0];
///     y[bx] = l[1];
/// }
/// # fn main() -> tile::Result<()> {
/// assert_eq!(tile::dsl::doc_run(twice::launch, &[1.5, 2.0])?, [3.0, 4.0]);
/// # Ok(()) }
/// ```
pub fn local<T>() -> Local<T> {
    outside_kernel("local")
}

/// A shared buffer's layout for [`annotate_layout`].
pub struct Layout(());

/// `annotate_layout(&s, layout);` (at most once per shared buffer, before
/// its first use): the buffer's layout in shared memory instead of the
/// compiler's choice: [`row_major`], [`padded`] or [`swizzle`]. Results never
/// change (the interpreter ignores it).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 8))]
/// fn through_padded(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(cdiv(M, B));
///     let mut s = shared::<f32, B, B>();
///     annotate_layout(&s, padded(16));
///     copy(x.tile([bx * B, 0]), &mut s);
///     copy(&s, y.tile([bx * B, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let x: Vec<f32> = (0..24).map(|i| i as f32).collect();
/// assert_eq!(tile::dsl::doc_run_2d(through_padded::launch, &x, &[3, 8])?, x);
/// # Ok(()) }
/// ```
pub fn annotate_layout<B>(buffer: &B, layout: Layout) {
    outside_kernel("annotate_layout")
}

/// `row_major()`: rows one after another (the layout of [`annotate_layout`]).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 8))]
/// fn plain(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(cdiv(M, B));
///     let mut s = shared::<f32, B, B>();
///     annotate_layout(&s, row_major());
///     copy(x.tile([bx * B, 0]), &mut s);
///     copy(&s, y.tile([bx * B, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
/// assert_eq!(tile::dsl::doc_run_2d(plain::launch, &x, &[2, 8])?, x);
/// # Ok(()) }
/// ```
pub fn row_major() -> Layout {
    outside_kernel("row_major")
}

/// `padded(bytes)`: each row followed by `bytes` unused bytes (a positive
/// multiple of 16): see the example of [`annotate_layout`].
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 8))]
/// fn pad32(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(cdiv(M, B));
///     let mut s = shared::<f32, B, B>();
///     annotate_layout(&s, padded(32));
///     copy(x.tile([bx * B, 0]), &mut s);
///     copy(&s, y.tile([bx * B, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
/// assert_eq!(tile::dsl::doc_run_2d(pad32::launch, &x, &[2, 8])?, x);
/// # Ok(()) }
/// ```
pub fn padded(bytes: i32) -> Layout {
    outside_kernel("padded")
}

/// `swizzle(bits)` (`bits` in 1..=3): the 16-byte chunk index within a row
/// XORed with `row mod 2^bits`; rows a power of two of at least `16·2^bits`
/// bytes (with 128-byte rows, CuTe's `Swizzle<bits, 4, 3>`).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 8, W = 32))]
/// fn swizzled(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(cdiv(M, B));
///     let mut s = shared::<f32, B, W>();
///     annotate_layout(&s, swizzle(3));
///     copy(x.tile([bx * B, 0]), &mut s);
///     copy(&s, y.tile([bx * B, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let x: Vec<f32> = (0..64).map(|i| i as f32).collect();
/// assert_eq!(tile::dsl::doc_run_2d(swizzled::launch, &x, &[2, 32])?, x);
/// # Ok(()) }
/// ```
pub fn swizzle(bits: i32) -> Layout {
    outside_kernel("swizzle")
}

// ---- loops ----

/// `for i in parallel(N)` / `for (i, j) in parallel((M, N))` (up to 3-D,
/// constant extents): independent iterations spread over the threads. The
/// only place where fragments are indexed; no tile operations inside.
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(BM = 2, BN = 4))]
/// fn add_index(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(cdiv(M, BM));
///     let mut t = fragment::<f32, BM, BN>();
///     copy(x.tile([bx * BM, 0]), &mut t);
///     for (i, j) in parallel((BM, BN)) {
///         t[(i, j)] = t[(i, j)] + (j as f32);
///     }
///     copy(&t, y.tile([bx * BM, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run_2d(add_index::launch, &[0.0; 8], &[2, 4])?;
/// assert_eq!(y, [0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0]);
/// # Ok(()) }
/// ```
pub fn parallel<E>(extents: E) -> std::ops::Range<i32> {
    outside_kernel("parallel")
}

/// `for k in pipelined(n, stages)`: a serial loop from 0 to `n` whose
/// shared-memory tile copies are multi-buffered over `stages` buffers
/// (cp.async, or TMA on sm_90a); the interpreter runs it as a plain loop.
///
/// ```
/// use tile::prelude::*;
///
/// /// Row sums over column tiles of 8.
/// #[tile_kernel(threads = 32, consts(BM = 4, BK = 8))]
/// fn row_sums(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(cdiv(M, BM));
///     let mut s = shared::<f32, BM, BK>();
///     let mut t = fragment::<f32, BM, BK>();
///     let mut part = fragment::<f32, BM>();
///     let mut sum = fragment::<f32, BM>();
///     clear(&mut sum);
///     for k in pipelined(cdiv(N, BK), 2) {
///         copy(x.tile([bx * BM, k * BK]), &mut s);
///         copy(&s, &mut t);
///         reduce_sum(&t, &mut sum, 1).keep();
///     }
///     copy(&sum, y.tile([bx * BM.., 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run_2d(row_sums::launch, &[1.0; 40], &[2, 20])?;
/// assert_eq!((y[0], y[20]), (20.0, 20.0));
/// # Ok(()) }
/// ```
pub fn pipelined(n: i32, stages: i32) -> std::ops::Range<i32> {
    outside_kernel("pipelined")
}

// ---- tile operations ----

/// The statement [`copy`] returns, for [`CopyStmt::fill`] and
/// [`CopyStmt::evict_first`].
pub struct CopyStmt(());

impl CopyStmt {
    /// `copy(t.tile([..]), &mut buf).fill(v)`: the value of elements read
    /// out of the tensor's bounds (default 0), of the destination's type.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 32, consts(B = 4))]
    /// fn max4(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    ///     let bx = grid(cdiv(N, B));
    ///     let mut t = fragment::<f32, 1, B>();
    ///     let mut m = fragment::<f32, 1>();
    ///     copy(x.tile([0, bx * B]), &mut t).fill(f32::NEG_INFINITY);
    ///     reduce_max(&t, &mut m, 1);
    ///     copy(&m, y.tile([0.., bx * B]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// // The last block reads 2 elements past the end: -inf, not 0.
    /// let x = [1.0, 2.0, 3.0, 4.0, -5.0, -6.0];
    /// let y = tile::dsl::doc_run_2d(max4::launch, &x, &[1, 6])?;
    /// assert_eq!((y[0], y[4]), (4.0, -5.0));
    /// # Ok(()) }
    /// ```
    pub fn fill<V>(self, value: V) -> CopyStmt {
        outside_kernel("fill")
    }

    /// `copy(t.tile([..]), &mut buf).evict_first()` (also after `.fill(v)`):
    /// the tensor's data is read once (a streamed KV cache), so the L2
    /// evicts its lines first and keeps what other reads reuse. A hint: no
    /// result changes. Copies issued as TMA boxes (the warp-specialized and
    /// TMA-copy schedules on sm_90a) carry it; the others ignore it.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 32, consts(B = 32))]
    /// fn stream(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    ///     let bx = grid(cdiv(N, B));
    ///     let mut t = shared::<f32, B>();
    ///     copy(x.tile([bx * B]), &mut t).fill(1.0).evict_first();
    ///     copy(&t, y.tile([bx * B]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// assert_eq!(tile::dsl::doc_run(stream::launch, &[2.0, 3.0])?, [2.0, 3.0]);
    /// # Ok(()) }
    /// ```
    pub fn evict_first(self) -> CopyStmt {
        outside_kernel("evict_first")
    }
}

/// `copy(src, dst);`: a block-wide copy between a tensor window
/// ([`Tensor::tile`], or `&t` for the whole tensor) and a buffer, or
/// between two buffers of one shape; element types convert (`f16` → `f32`).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 32))]
/// fn round_f16(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(cdiv(N, B));
///     let mut h = shared::<f16, B>();
///     copy(x.tile([bx * B]), &mut h);
///     copy(&h, y.tile([bx * B]));
/// }
/// # fn main() -> tile::Result<()> {
/// assert_eq!(tile::dsl::doc_run(round_f16::launch, &[1.0, 1.0001])?, [1.0, 1.0]);
/// # Ok(()) }
/// ```
pub fn copy<S, D>(src: S, dst: D) -> CopyStmt {
    outside_kernel("copy")
}

/// `fill(&mut buf, v);`: every element of a shared, fragment or local
/// buffer set to `v` (of its type).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 32))]
/// fn sevens(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(cdiv(N, B));
///     let mut t = fragment::<f32, B>();
///     fill(&mut t, 7.0);
///     copy(&t, y.tile([bx * B]));
/// }
/// # fn main() -> tile::Result<()> {
/// assert_eq!(tile::dsl::doc_run(sevens::launch, &[0.0; 3])?, [7.0; 3]);
/// # Ok(()) }
/// ```
pub fn fill<B, V>(buffer: &mut B, value: V) {
    outside_kernel("fill")
}

/// `clear(&mut buf);`: [`fill`] with zero.
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 32))]
/// fn zeros(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(cdiv(N, B));
///     let mut t = fragment::<f32, B>();
///     copy(x.tile([bx * B]), &mut t);
///     clear(&mut t);
///     copy(&t, y.tile([bx * B]));
/// }
/// # fn main() -> tile::Result<()> {
/// assert_eq!(tile::dsl::doc_run(zeros::launch, &[5.0; 3])?, [0.0; 3]);
/// # Ok(()) }
/// ```
pub fn clear<B>(buffer: &mut B) {
    outside_kernel("clear")
}

/// The statement a reduction returns, for [`ReduceStmt::keep`].
pub struct ReduceStmt(());

impl ReduceStmt {
    /// `reduce_sum(&t, &mut s, 1).keep()`: combines the result with `dst`'s
    /// current values (a running sum or max over a loop).
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 32, consts(B = 4))]
    /// fn total(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    ///     grid(1);
    ///     let mut t = fragment::<f32, 1, B>();
    ///     let mut s = fragment::<f32, 1>();
    ///     clear(&mut s);
    ///     for c in 0..cdiv(N, B) {
    ///         copy(x.tile([0, c * B]), &mut t);
    ///         reduce_sum(&t, &mut s, 1).keep();
    ///     }
    ///     copy(&s, y.tile([0.., 0]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// assert_eq!(tile::dsl::doc_run_2d(total::launch, &[1.0; 10], &[1, 10])?[0], 10.0);
    /// # Ok(()) }
    /// ```
    pub fn keep(self) {
        outside_kernel("keep")
    }
}

/// `reduce_sum(&src, &mut dst, dim);`: sums of the fragment `src` along
/// `dim` (a constant) into `dst`, shaped as `src` without `dim` (`[1]` for a
/// 1-D `src`); floats accumulate in f32.
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 4))]
/// fn sums(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(cdiv(M, B));
///     let mut t = fragment::<f32, B, B>();
///     let mut s = fragment::<f32, B>();
///     copy(x.tile([bx * B, 0]), &mut t);
///     reduce_sum(&t, &mut s, 1);
///     copy(&s, y.tile([bx * B.., 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run_2d(sums::launch, &[1.0, 2.0, 3.0, 4.0], &[2, 2])?;
/// assert_eq!(y, [3.0, 0.0, 7.0, 0.0]);
/// # Ok(()) }
/// ```
pub fn reduce_sum<S, D>(src: &S, dst: &mut D, dim: i32) -> ReduceStmt {
    outside_kernel("reduce_sum")
}

/// `reduce_max(&src, &mut dst, dim);`: maxima along `dim`, as
/// [`reduce_sum`].
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 4))]
/// fn maxes(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(cdiv(M, B));
///     let mut t = fragment::<f32, B, B>();
///     let mut s = fragment::<f32, B>();
///     copy(x.tile([bx * B, 0]), &mut t).fill(f32::NEG_INFINITY);
///     reduce_max(&t, &mut s, 1);
///     copy(&s, y.tile([bx * B.., 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run_2d(maxes::launch, &[1.0, -2.0, -3.0, -4.0], &[2, 2])?;
/// assert_eq!(y, [1.0, 0.0, -3.0, 0.0]);
/// # Ok(()) }
/// ```
pub fn reduce_max<S, D>(src: &S, dst: &mut D, dim: i32) -> ReduceStmt {
    outside_kernel("reduce_max")
}

/// `reduce_min(&src, &mut dst, dim);`: minima along `dim`, as
/// [`reduce_sum`].
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 4))]
/// fn mins(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let bx = grid(cdiv(M, B));
///     let mut t = fragment::<f32, B, B>();
///     let mut s = fragment::<f32, B>();
///     copy(x.tile([bx * B, 0]), &mut t).fill(f32::INFINITY);
///     reduce_min(&t, &mut s, 1);
///     copy(&s, y.tile([bx * B.., 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run_2d(mins::launch, &[1.0, -2.0, -3.0, 4.0], &[2, 2])?;
/// assert_eq!(y, [-2.0, 0.0, -3.0, 0.0]);
/// # Ok(()) }
/// ```
pub fn reduce_min<S, D>(src: &S, dst: &mut D, dim: i32) -> ReduceStmt {
    outside_kernel("reduce_min")
}

/// `atomic_add(&mut t[i], v);`: an atomic `+=` on one element of a
/// `&mut Tensor` (skipped out of bounds).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32)]
/// fn count(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(N);
///     atomic_add(&mut y[0], x[bx]);
/// }
/// # fn main() -> tile::Result<()> {
/// assert_eq!(tile::dsl::doc_run(count::launch, &[1.0, 2.0, 3.0])?[0], 6.0);
/// # Ok(()) }
/// ```
pub fn atomic_add<E, V>(element: &mut E, value: V) {
    outside_kernel("atomic_add")
}

/// `barrier();`: all threads of the block meet (the compiler already puts
/// barriers where shared-memory dependences need them; this is an escape
/// hatch).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 32))]
/// fn fenced(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(cdiv(N, B));
///     let mut s = shared::<f32, B>();
///     copy(x.tile([bx * B]), &mut s);
///     barrier();
///     copy(&s, y.tile([bx * B]));
/// }
/// # fn main() -> tile::Result<()> {
/// assert_eq!(tile::dsl::doc_run(fenced::launch, &[1.0, 2.0])?, [1.0, 2.0]);
/// # Ok(()) }
/// ```
pub fn barrier() {
    outside_kernel("barrier")
}

/// The statement [`print()`] returns, for [`PrintStmt::block`]: one index
/// per grid axis (`.block((1, 0))` on a 2-D grid).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32)]
/// fn where_am_i(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     let (bx, by) = grid(N, M);
///     print("{{block}} ({}, {}): {} {}", bx, by, x[(by, bx)], x[(by, bx)] > 2.0).block((1, 0));
/// }
/// # fn main() -> tile::Result<()> {
/// let x = [1.0, 3.0, 5.0, 7.0];
/// let (r, out) = tile::capture_prints(|| tile::dsl::doc_run_2d(where_am_i::launch, &x, &[2, 2]));
/// r?;
/// assert_eq!(out, "{block} (1, 0): 3.000000 1\n");
/// # Ok(()) }
/// ```
pub struct PrintStmt(());

impl PrintStmt {
    /// `print(..).block((x, y))`: prints only in that block (one index per
    /// grid axis, each named in `let (bx, by) = grid(..)`).
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 32)]
    /// fn second(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    ///     let bx = grid(N);
    ///     print("x[{}] = {}", bx, x[bx]).block(1);
    /// }
    /// # fn main() -> tile::Result<()> {
    /// let (r, out) = tile::capture_prints(|| tile::dsl::doc_run(second::launch, &[1.0, 2.5, 4.0]));
    /// r?;
    /// assert_eq!(out, "x[1] = 2.500000\n");
    /// # Ok(()) }
    /// ```
    pub fn block<I>(self, index: I) {
        outside_kernel("block")
    }
}

/// `print("m = {} at {}", m[i], i);`: a debug line each time it runs (once
/// per block outside `parallel` loops, once per iteration inside one); `{}`
/// per value (`{:e}`: scientific), floats as C's `%f`. To stderr in the
/// interpreter ([`capture_prints`](crate::capture_prints) collects it), to
/// stdout on the GPU (`vprintf`).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 32))]
/// fn show(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(cdiv(N, B));
///     let mut t = fragment::<f32, B>();
///     copy(x.tile([bx * B]), &mut t);
///     for i in parallel(B) {
///         if i == 1 {
///             print("block {}: t[1] = {:e}", bx, t[i]);
///         }
///         t[i] = t[i] * 2.0;
///     }
///     copy(&t, y.tile([bx * B]));
/// }
/// # fn main() -> tile::Result<()> {
/// let mut x = [0.0; 40];
/// (x[1], x[33]) = (1500.0, -2.0);
/// let (r, out) = tile::capture_prints(|| tile::dsl::doc_run(show::launch, &x));
/// r?;
/// assert_eq!(out, "block 0: t[1] = 1.500000e+03\nblock 1: t[1] = -2.000000e+00\n");
/// # Ok(()) }
/// ```
pub fn print<V>(format: &str, values: V) -> PrintStmt {
    outside_kernel("print")
}

// ---- gemm ----

/// How the warps of a block split a [`gemm`]'s `M × N` output:
/// `.policy(FullRow)` or `.policy(WarpPolicy::FullRow)`. Never changes the
/// result.
///
/// ```
/// use tile::prelude::*;
///
/// /// Two warps, each owning 16 of the 32 columns.
/// #[tile_kernel(threads = 64, consts(B = 32))]
/// fn by_cols(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     grid(1);
///     let mut a = shared::<f16, B, B>();
///     let mut acc = fragment::<f32, B, B>();
///     copy(x.tile([0, 0]), &mut a);
///     gemm(&a, &a, &mut acc).clear().policy(WarpPolicy::FullCol);
///     copy(&acc, y.tile([0, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let x: Vec<f32> = (0..1024).map(|i| (i % 3) as f32).collect();
/// let y = tile::dsl::doc_run_2d(by_cols::launch, &x, &[32, 32])?;
/// // y[0, 1] = Σ_k x[0, k] · x[k, 1].
/// let want: f32 = (0..32).map(|k| x[k] * x[k * 32 + 1]).sum();
/// assert_eq!(y[1], want);
/// # Ok(()) }
/// ```
pub enum WarpPolicy {
    /// Each warp owns whole rows (warps split M only).
    FullRow,
    /// Each warp owns whole columns (warps split N only).
    FullCol,
    /// As square as possible (the default).
    Square,
    /// Warpgroup `w` alone computes and holds the `[64, N]` output (and the
    /// fragments derived from it); the other warpgroups skip the
    /// statements on them (see `#[tile_kernel]`'s reference).
    Warpgroup(u32),
}
pub use WarpPolicy::{FullCol, FullRow, Square, Warpgroup};

/// The statement [`gemm`] returns, for its modifiers ([`GemmStmt::clear`],
/// [`GemmStmt::policy`]), chained in any order.
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 16))]
/// fn square_it(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     grid(1);
///     let mut a = shared::<f16, B, B>();
///     let mut acc = fragment::<f32, B, B>();
///     copy(x.tile([0, 0]), &mut a);
///     fill(&mut acc, 100.0);
///     gemm(&a, &a, &mut acc).policy(FullCol).clear();
///     copy(&acc, y.tile([0, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run_2d(square_it::launch, &[1.0; 256], &[16, 16])?;
/// assert_eq!(y, [16.0; 256]); // cleared: the 100s are gone
/// # Ok(()) }
/// ```
pub struct GemmStmt(());

impl GemmStmt {
    /// `.clear()`: `acc = a · b` instead of `acc += a · b`. See [`gemm`].
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 32, consts(B = 16))]
    /// fn square_it(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    ///     grid(1);
    ///     let mut a = shared::<f16, B, B>();
    ///     let mut acc = fragment::<f32, B, B>();
    ///     copy(x.tile([0, 0]), &mut a);
    ///     gemm(&a, &a, &mut acc).clear();
    ///     copy(&acc, y.tile([0, 0]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// let mut x = vec![0.0f32; 256];
    /// for i in 0..16 { x[i * 16 + i] = 2.0; }
    /// let y = tile::dsl::doc_run_2d(square_it::launch, &x, &[16, 16])?;
    /// assert_eq!((y[0], y[1], y[17]), (4.0, 0.0, 4.0));
    /// # Ok(()) }
    /// ```
    pub fn clear(self) -> GemmStmt {
        outside_kernel("clear")
    }

    /// `.policy(FullRow | FullCol | Square)`: how warps split the output
    /// (never changes the result).
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 32, consts(B = 16))]
    /// fn by_rows(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    ///     grid(1);
    ///     let mut a = shared::<f16, B, B>();
    ///     let mut acc = fragment::<f32, B, B>();
    ///     copy(x.tile([0, 0]), &mut a);
    ///     gemm(&a, &a, &mut acc).clear().policy(FullRow);
    ///     copy(&acc, y.tile([0, 0]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// let y = tile::dsl::doc_run_2d(by_rows::launch, &[1.0; 256], &[16, 16])?;
    /// assert_eq!(y, [16.0; 256]);
    /// # Ok(()) }
    /// ```
    pub fn policy(self, policy: WarpPolicy) -> GemmStmt {
        outside_kernel("policy")
    }
}

/// A [`gemm`] operand read transposed: `&b.t()` (B stored `[N, K]`) or
/// `&a.t()` (A stored `[K, M]`, a shared buffer).
///
/// ```
/// use tile::prelude::*;
///
/// /// `y = xᵀ · x`.
/// #[tile_kernel(threads = 32, consts(B = 16))]
/// fn gram_t(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     grid(1);
///     let mut a = shared::<f16, B, B>();
///     let mut acc = fragment::<f32, B, B>();
///     copy(x.tile([0, 0]), &mut a);
///     gemm(&a.t(), &a, &mut acc).clear();
///     copy(&acc, y.tile([0, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let mut x = vec![0.0f32; 256];
/// x[1] = 1.0; // x[0, 1]: (xᵀ·x)[1, 1] = 1, (x·xᵀ)[0, 0] would be
/// let y = tile::dsl::doc_run_2d(gram_t::launch, &x, &[16, 16])?;
/// assert_eq!((y[0], y[17]), (0.0, 1.0));
/// # Ok(()) }
/// ```
pub trait Transpose {
    /// `gemm(&a, &b.t(), &mut acc)`: reads `b` (stored `[N, K]`) as
    /// `[K, N]`; valid only on a `gemm` operand.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// /// `y = x · xᵀ`.
    /// #[tile_kernel(threads = 32, consts(B = 16))]
    /// fn gram(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    ///     grid(1);
    ///     let mut a = shared::<f16, B, B>();
    ///     let mut acc = fragment::<f32, B, B>();
    ///     copy(x.tile([0, 0]), &mut a);
    ///     gemm(&a, &a.t(), &mut acc).clear();
    ///     copy(&acc, y.tile([0, 0]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// let mut x = vec![0.0f32; 256];
    /// x[1] = 1.0; // x[0, 1]
    /// let y = tile::dsl::doc_run_2d(gram::launch, &x, &[16, 16])?;
    /// assert_eq!((y[0], y[1], y[16]), (1.0, 0.0, 0.0));
    /// # Ok(()) }
    /// ```
    fn t(&self) -> &Self {
        outside_kernel("t")
    }
}

/// `gemm(&a, &b, &mut acc);`: `acc += a · b` on tensor cores; `a` `[M, K]`
/// (shared or fragment), `b` `[K, N]` (shared), both `f16` or both `bf16`,
/// `acc` an `f32` fragment `[M, N]`. Modifiers: [`GemmStmt::clear`],
/// [`GemmStmt::policy`]; operands transposed with [`Transpose::t`].
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32, consts(B = 16))]
/// fn twice_square(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
///     grid(1);
///     let mut a = shared::<f16, B, B>();
///     let mut acc = fragment::<f32, B, B>();
///     copy(x.tile([0, 0]), &mut a);
///     clear(&mut acc);
///     gemm(&a, &a, &mut acc);
///     gemm(&a, &a, &mut acc);
///     copy(&acc, y.tile([0, 0]));
/// }
/// # fn main() -> tile::Result<()> {
/// let y = tile::dsl::doc_run_2d(twice_square::launch, &[0.5; 256], &[16, 16])?;
/// assert_eq!(y, [8.0; 256]);
/// # Ok(()) }
/// ```
pub fn gemm<A, B, C>(a: &A, b: &B, acc: &mut C) -> GemmStmt {
    outside_kernel("gemm")
}

// ---- math ----

/// `cdiv(a, b)`: `a / b` rounded up (integers), e.g. a grid extent.
///
/// ```
/// assert_eq!(tile::dsl::cdiv(10, 4), 3);
/// ```
///
/// In a kernel: `let bx = grid(cdiv(N, B));` (see [`grid`]).
pub fn cdiv(a: i32, b: i32) -> i32 {
    (a + b - 1) / b
}

macro_rules! unary_math {
    ($($name:ident: $what:literal, $input:literal => $want:literal;)*) => {$(
        #[doc = concat!("`", stringify!($name), "(x)` (or `x.", stringify!($name), "()`): ", $what, ", of `f16`, `bf16` or `f32`.")]
        ///
        /// ```
        /// use tile::prelude::*;
        ///
        /// #[tile_kernel(threads = 32)]
        #[doc = concat!("fn k(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {")]
        ///     let bx = grid(N);
        #[doc = concat!("    y[bx] = ", stringify!($name), "(x[bx]);")]
        /// }
        /// # fn main() -> tile::Result<()> {
        #[doc = concat!("let y = tile::dsl::doc_run(k::launch, &[", $input, "])?;")]
        #[doc = concat!("assert!((y[0] - ", $want, "f32).abs() < 1e-5, \"{}\", y[0]);")]
        /// # Ok(()) }
        /// ```
        pub fn $name<T>(x: T) -> T {
            outside_kernel(stringify!($name))
        }
    )*};
}

unary_math! {
    exp2: "2 to the power `x`", "3.0" => "8.0";
    exp: "e to the power `x`", "1.0" => "2.7182817";
    log2: "the base-2 logarithm", "8.0" => "3.0";
    log: "the natural logarithm", "1.0" => "0.0";
    abs: "the absolute value (also of `i32`)", "-2.5" => "2.5";
    sqrt: "the square root", "9.0" => "3.0";
    rsqrt: "`1 / sqrt(x)`", "4.0" => "0.5";
}

/// `max(a, b)` (or `a.max(b)`): the larger of two values of one type (the
/// non-NaN one for floats).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32)]
/// fn relu(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(N);
///     y[bx] = max(x[bx], 0.0);
/// }
/// # fn main() -> tile::Result<()> {
/// assert_eq!(tile::dsl::doc_run(relu::launch, &[-1.0, 2.0])?, [0.0, 2.0]);
/// # Ok(()) }
/// ```
pub fn max<T>(a: T, b: T) -> T {
    outside_kernel("max")
}

/// `min(a, b)` (or `a.min(b)`): the smaller of two values of one type.
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32)]
/// fn cap(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(N);
///     y[bx] = x[bx].min(1.0);
/// }
/// # fn main() -> tile::Result<()> {
/// assert_eq!(tile::dsl::doc_run(cap::launch, &[-1.0, 2.0])?, [-1.0, 1.0]);
/// # Ok(()) }
/// ```
pub fn min<T>(a: T, b: T) -> T {
    outside_kernel("min")
}

/// `fma(a, b, c)`: `a · b + c` rounded once (f32).
///
/// ```
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 32)]
/// fn affine(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
///     let bx = grid(N);
///     y[bx] = fma(x[bx], 2.0, 1.0);
/// }
/// # fn main() -> tile::Result<()> {
/// assert_eq!(tile::dsl::doc_run(affine::launch, &[1.0, 3.0])?, [3.0, 7.0]);
/// # Ok(()) }
/// ```
pub fn fma<T>(a: T, b: T, c: T) -> T {
    outside_kernel("fma")
}

pub mod attributes {
    //! The options of `#[tile_kernel(..)]`, one item each (for docs and
    //! editors: the macro reads them; these items do nothing).
    #![allow(non_camel_case_types)]

    /// `threads = 128` (or the name of a generic kernel's const
    /// parameter): threads per block, a multiple of 32 up to 1024. Required.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 64)]
    /// fn k(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    ///     let bx = grid(N);
    ///     y[bx] = x[bx];
    /// }
    /// #[tile_kernel(threads = T, instances(32, 96))]
    /// fn g<const T: usize>(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    ///     let bx = grid(N);
    ///     y[bx] = x[bx] + (T as f32);
    /// }
    /// # fn main() -> tile::Result<()> {
    /// assert!(k::META.targets.iter().all(|t| t.threads == 64));
    /// assert!(g::meta::<96>().targets.iter().all(|t| t.threads == 96));
    /// assert_eq!(tile::dsl::doc_run(k::launch, &[1.0])?, [1.0]);
    /// assert_eq!(tile::dsl::doc_run(g::launch::<32>, &[1.0])?, [33.0]);
    /// # Ok(()) }
    /// ```
    pub struct threads;

    /// `consts(BM = 64, BN = 128)`: compile-time constants, usable as
    /// buffer dimensions and values in the body.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 32, consts(B = 8, SCALE = 3))]
    /// fn k(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    ///     let bx = grid(cdiv(N, B));
    ///     let mut t = fragment::<f32, B>();
    ///     copy(x.tile([bx * B]), &mut t);
    ///     for i in parallel(B) {
    ///         t[i] = t[i] * (SCALE as f32);
    ///     }
    ///     copy(&t, y.tile([bx * B]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// assert_eq!(tile::dsl::doc_run(k::launch, &[1.0, 2.0])?, [3.0, 6.0]);
    /// # Ok(()) }
    /// ```
    pub struct consts;

    /// `cluster = (2, 1, 1)`: thread block clusters on sm_90 (the grid a
    /// multiple of it); ignored on sm_80 and in the interpreter. With
    /// `cluster = (C, 1, 1)` the warp-specialized schedules load a pipelined
    /// tile that every block of the cluster reads alike (its origin and the
    /// loop's bounds free of the x block index; loads of tensors the kernel
    /// never writes allowed, as a page table) once per cluster: each block
    /// a `1/C` share of every box, multicast to all of them (MLA's two row
    /// blocks of a chunk sharing its key blocks). The computed values are
    /// the same with or without the cluster.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 32, cluster = (2, 1, 1))]
    /// fn k(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    ///     let bx = grid(N);
    ///     y[bx] = x[bx] + 1.0;
    /// }
    /// # fn main() -> tile::Result<()> {
    /// assert_eq!(tile::dsl::doc_run(k::launch, &[1.0, 2.0])?, [2.0, 3.0]);
    /// # Ok(()) }
    /// ```
    pub struct cluster;

    /// `warp_specialize = false`: keeps the sm_90a warp-specialized
    /// schedules (`warp_specialized_gemm`, `warp_specialized_loop`) off this
    /// kernel, for comparing or bisecting schedules; results never change.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// /// Row sums over 64-row, 32-column tiles: a loop the warp-specialized
    /// /// loop schedule takes on sm_90a, unless told not to.
    /// #[tile_kernel(threads = 128, consts(BM = 64, BK = 32))]
    /// fn sums(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    ///     let bx = grid(cdiv(M, BM));
    ///     let mut s = shared::<f32, BM, BK>();
    ///     let mut t = fragment::<f32, BM, BK>();
    ///     let mut acc = fragment::<f32, BM>();
    ///     clear(&mut acc);
    ///     for k in pipelined(cdiv(N, BK), 2) {
    ///         copy(x.tile([bx * BM, k * BK]), &mut s);
    ///         copy(&s, &mut t);
    ///         reduce_sum(&t, &mut acc, 1).keep();
    ///     }
    ///     copy(&acc, y.tile([bx * BM.., 0]));
    /// }
    /// #[tile_kernel(threads = 128, consts(BM = 64, BK = 32), warp_specialize = false)]
    /// fn sums_plain(x: &Tensor<f32, M, N>, y: &mut Tensor<f32, M, N>) {
    ///     let bx = grid(cdiv(M, BM));
    ///     let mut s = shared::<f32, BM, BK>();
    ///     let mut t = fragment::<f32, BM, BK>();
    ///     let mut acc = fragment::<f32, BM>();
    ///     clear(&mut acc);
    ///     for k in pipelined(cdiv(N, BK), 2) {
    ///         copy(x.tile([bx * BM, k * BK]), &mut s);
    ///         copy(&s, &mut t);
    ///         reduce_sum(&t, &mut acc, 1).keep();
    ///     }
    ///     copy(&acc, y.tile([bx * BM.., 0]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// let ws = |m: &tile::KernelMeta| m.targets.iter().any(|t| t.schedule.starts_with("warp_specialized"));
    /// let hopper = sums::META.targets.iter().any(|t| t.arch == "sm_90a");
    /// assert_eq!(ws(&sums::META), hopper); // with sm_90a embedded (the default)
    /// assert!(!ws(&sums_plain::META));
    /// let x = vec![1.0; 70 * 40];
    /// let y = tile::dsl::doc_run_2d(sums_plain::launch, &x, &[70, 40])?;
    /// assert_eq!((y[0], y[69 * 40]), (40.0, 40.0));
    /// # Ok(()) }
    /// ```
    pub struct warp_specialize;

    /// `blocks_per_sm = N` (an integer literal, or a const parameter's
    /// name in a generic kernel): asks for `N` blocks side by side on each
    /// SM, for kernels that wait on memory (a GEMM at decode-size M keeps
    /// `N` times the bytes in flight). The launch bound `.minnctapersm N`
    /// (registers per thread within an `N`-th of the SM's file); on sm_90a
    /// the warp-specialized GEMM splits an `N`-th of the file between its
    /// producer and consumers. Compiling fails where `N` blocks' shared
    /// memory does not fit an SM, or `N` blocks' threads exceed 2,048.
    /// Results never change. Default 1 (no bound asked).
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 128, consts(B = 256), blocks_per_sm = 4)]
    /// fn double(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    ///     let bx = grid(cdiv(N, B));
    ///     let mut t = fragment::<f32, B>();
    ///     copy(x.tile([bx * B]), &mut t);
    ///     for i in parallel(B) {
    ///         t[i] = t[i] * 2.0;
    ///     }
    ///     copy(&t, y.tile([bx * B]));
    /// }
    /// assert!(double::META.targets.iter().all(|t| t.ptx.contains(".minnctapersm 4")));
    /// ```
    pub struct blocks_per_sm;

    /// `dependent_launch = true`: launched as a programmatic dependent of
    /// the kernel before it on the stream (sm_90 and later), its launch
    /// overlapping that kernel's tail; every thread first waits
    /// (`griddepcontrol.wait`) until that kernel has completed and its
    /// writes are visible, so it reads exactly what an ordinary launch
    /// would. On sm_80 an ordinary launch. Default `false`.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 128, consts(B = 256), dependent_launch = true)]
    /// fn double(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    ///     let bx = grid(cdiv(N, B));
    ///     let mut t = fragment::<f32, B>();
    ///     copy(x.tile([bx * B]), &mut t);
    ///     for i in parallel(B) {
    ///         t[i] = t[i] * 2.0;
    ///     }
    ///     copy(&t, y.tile([bx * B]));
    /// }
    /// for t in double::META.targets.iter() {
    ///     assert_eq!(t.ptx.contains("griddepcontrol.wait"), t.arch == "sm_90a");
    /// }
    /// let y = tile::dsl::doc_run(double::launch, &[1.0, 2.0, 3.0])?;
    /// assert_eq!(y, [2.0, 4.0, 6.0]);
    /// # Ok::<(), tile::Error>(())
    /// ```
    pub struct dependent_launch;

    /// `archs = "sm_90a"` (comma-separated): the targets to compile this
    /// kernel for, instead of `TILE_ARCHS`'s.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 32, archs = "sm_80")]
    /// fn k(x: &Tensor<f32, N>, y: &mut Tensor<f32, N>) {
    ///     let bx = grid(N);
    ///     y[bx] = x[bx];
    /// }
    /// # fn main() -> tile::Result<()> {
    /// assert!(k::META.targets.iter().all(|t| t.arch == "sm_80"));
    /// assert_eq!(tile::dsl::doc_run(k::launch, &[4.0])?, [4.0]);
    /// # Ok(()) }
    /// ```
    pub struct archs;

    /// `instances((f16, 128), (bf16, 64))`: the configurations of a generic
    /// kernel (`fn k<T: Float, const B: usize>`), one tuple each; launched
    /// as `k::launch::<f16, 128>(..)`.
    ///
    /// ```
    /// use tile::prelude::*;
    ///
    /// #[tile_kernel(threads = 32, instances((f32, 8), (f32, 16)))]
    /// fn k<T: Float, const B: usize>(x: &Tensor<T, N>, y: &mut Tensor<T, N>) {
    ///     let bx = grid(cdiv(N, B));
    ///     let mut t = fragment::<T, B>();
    ///     copy(x.tile([bx * B]), &mut t);
    ///     copy(&t, y.tile([bx * B]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// assert_eq!(tile::dsl::doc_run(k::launch::<f32, 8>, &[1.0, 2.0])?, [1.0, 2.0]);
    /// assert_eq!(tile::dsl::doc_run(k::launch::<f32, 16>, &[3.0])?, [3.0]);
    /// # Ok(()) }
    /// ```
    pub struct instances;

    /// `tune(B, ..)`: the const parameters of a generic kernel that the
    /// autotuner picks among its instances (the rest are the caller's);
    /// launched as `k::launch_tuned::<f32>(..)` (the process's tuner) or
    /// `k::launch_tuned_with::<f32>(&tuner, ..)`. See `tile::tune` and the
    /// language reference's "Autotuning".
    ///
    /// ```
    /// use tile::prelude::*;
    /// use tile::tune::{Mode, Settings, Tuner};
    ///
    /// #[tile_kernel(threads = 32, instances((f32, 8), (f32, 16)), tune(B))]
    /// fn k<T: Float, const B: usize>(x: &Tensor<T, N>, y: &mut Tensor<T, N>) {
    ///     let bx = grid(cdiv(N, B));
    ///     let mut t = fragment::<T, B>();
    ///     copy(x.tile([bx * B]), &mut t);
    ///     copy(&t, y.tile([bx * B]));
    /// }
    /// # fn main() -> tile::Result<()> {
    /// assert_eq!(k::tuned::<f32>().candidates.len(), 2);
    /// // A tuner that keeps its choices in memory only.
    /// let tuner = Tuner::new(Settings { mode: Mode::Quiet, warmup: None, reps: None, cache_dir: None, shipped: None });
    /// let run = |s: &Stream, x: &DeviceTensor<f32>, y: &mut DeviceTensor<f32>| k::launch_tuned_with::<f32>(&tuner, s, x, y);
    /// assert_eq!(tile::dsl::doc_run(run, &[1.0, 2.0, 3.0])?, [1.0, 2.0, 3.0]);
    /// assert_eq!(tuner.records()[0].candidates.len(), 2);
    /// # Ok(()) }
    /// ```
    pub struct tune;
}
