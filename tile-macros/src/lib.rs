//! `#[tile_kernel]`: a thin frontend over `tile-ir`.
//!
//! The pipeline, one module per step (as in serde_derive / thiserror):
//! `attr` parses the attribute, `sig` the function (its own parser:
//! `&Tensor<f16, M, K>` is DSL, not a Rust type), `lower` turns the body
//! into a `tile_ir::Kernel`, `backend` verifies and compiles it for each
//! target, and `expand` quotes the `mod name { META; fn launch }` that the
//! runtime uses. Every rejection is a `syn::Error` at a span; all errors of a
//! kernel are reported together; the macro never panics.
use proc_macro::TokenStream;

mod attr;
mod backend;
mod diag;
mod expand;
mod lower;
mod sig;

/// Compiles a kernel function to PTX at build time and replaces it with a
/// module holding its metadata (`META`) and a typed `launch` function.
///
/// ```ignore
/// use tile::prelude::*;
///
/// #[tile_kernel(threads = 256, consts(BLOCK = 1024))]
/// pub fn vector_add(a: &Tensor<f32, N>, b: &Tensor<f32, N>, c: &mut Tensor<f32, N>) {
///     let bx = grid(cdiv(N, BLOCK));
///     let mut x = fragment::<f32, BLOCK>();
///     let mut y = fragment::<f32, BLOCK>();
///     copy(a.tile([bx * BLOCK]), &mut x);
///     copy(b.tile([bx * BLOCK]), &mut y);
///     for i in parallel(BLOCK) {
///         x[i] = x[i] + y[i];
///     }
///     copy(&x, c.tile([bx * BLOCK]));
/// }
///
/// // vector_add::launch(&stream, &a, &b, &mut c)?;  // DeviceTensor<f32>s
/// ```
///
/// # The attribute
/// `threads = N` (required: a multiple of 32, at most 1024) and
/// `consts(NAME = integer, ..)`: the compile-time constants of the kernel. A
/// `const` item outside the kernel is invisible to a macro; put it here.
/// Optional:
/// - `cluster = (x, y, z)`: thread block clusters (sm_90 and later): 1 to 3
///   positive integers (missing ones are 1), at most 8 blocks in all (the
///   portable limit). A cluster never changes results; on a GPU with
///   clusters the grid must be a multiple of it on every axis (a launch
///   error otherwise), and GPUs without them (sm_8x) and the interpreter
///   ignore it.
/// - `warp_specialize = true | false` (default `true`): whether the sm_90a
///   compiler may add a warp-specialized TMA + wgmma variant of pipelined
///   loops (a producer warpgroup loads, the block's threads compute). The
///   runtime launches it only when the mapped tensors are TMA-addressable
///   (16-byte aligned, rows a multiple of 16 bytes), else the general code.
///   `false` turns it off, for bisecting.
/// - `archs = "sm_90a"` (optional, comma-separated): embed only these of the
///   targets `TILE_ARCHS` asks for, e.g. a Hopper-only configuration whose
///   shared memory exceeds sm_80's. On a GPU without an embedded target the
///   launch is a `tile::Error` naming the targets there are.
///
/// ```ignore
/// #[tile_kernel(threads = 256, consts(BM = 128, BN = 256, BK = 64), cluster = (2, 1, 1))]
/// ```
///
/// # Parameters
/// `&Tensor<T, D0, D1, ..>` (read-only), `&mut Tensor<T, D0, D1, ..>`, and
/// scalars `f32`, `i32`, `u32`, `f16`, `bf16`. `T` is one of those types. A
/// dimension is an integer literal, a name from `consts(..)`, or any other
/// name: a dynamic dimension, bound at launch from the tensors' shapes
/// (tensors naming the same dimension must agree). `Tensor<T, (M, K)>` and
/// 1-D `Tensor<T, [N]>` are accepted too; `[M, K]` is not Rust syntax.
///
/// # The body
/// What one thread block does.
/// - `let bx = grid(x);` / `let (bx, by) = grid(x, y);` (up to 3 axes) as
///   the first statement; the extents use dimensions and constants only.
/// - `use_swizzle(panel);` (optional, right after a 2-D or 3-D `grid(..)`,
///   `panel` a constant ≥ 1): threadblock rasterization for L2 reuse. Blocks
///   are visited in panels of `panel` columns of the grid (x = column,
///   y = row), walking down each panel before moving to the next; every block
///   still runs once, so results do not change (`tile_ir::abi::rasterize`).
/// - Buffers: `let mut s = shared::<T, D0, D1>();`, `fragment::<..>()` (a
///   tile spread over the threads' registers), `local::<..>()` (a small
///   array every thread holds); constant shapes (`{ BK * 2 }` for an
///   expression).
/// - `annotate_layout(&s, layout);` (optional, for a `shared` buffer, once,
///   before any statement uses `s`): the buffer's layout in shared memory
///   instead of the compiler's choice; results never change. Seeing `s` as
///   `[rows, cols]` (outer dims folded into rows), `layout` is
///   `row_major()`, `padded(bytes)` (each row followed by `bytes` unused
///   bytes, a positive multiple of 16 so 16-byte chunks stay aligned), or
///   `swizzle(bits)` (`bits` in 1..=3: the 16-byte chunk index within a row
///   XORed with `row mod 2^bits`; rows a power of two of at least
///   `16·2^bits` bytes; with 128-byte rows this is CuTe's
///   `Swizzle<bits, 4, 3>`). Arguments are constants.
/// - Loops: `for i in a..b` (or `a..=b`), `for i in parallel(N)`,
///   `for (i, j) in parallel((M, N))` (up to 3-D, constant extents,
///   iterations spread over the threads), `for k in pipelined(n, stages)`.
/// - `if`/`else` (also as a value: `if c { a } else { b }`), `let`,
///   `let mut`, `=`, `+=` (and the other compound operators) on variables
///   and elements.
/// - Operators `+ - * / % & | ^ << >> == != < <= > >= && || ! -`, casts
///   `as f16|bf16|f32|i32|u32`. Operands have one type: no implicit
///   conversions, except that untyped literals and constants adopt the
///   other operand's type (`x * 2` with `x: f16`).
/// - Math: `exp2 exp log2 log abs sqrt rsqrt` (also as methods, `x.exp2()`),
///   `max min` (`x.max(y)`), `fma(a, b, c)`, `cdiv(a, b)`; `f32::INFINITY`,
///   `f32::NEG_INFINITY`, `f32::MAX`, `f32::MIN`.
/// - Elements: `x[i]`, `x[(i, j)]`, `x[[i, j]]`. A fragment only inside a
///   `parallel` loop, indexed by its loop variables. Tensors: reads out of
///   bounds give 0, writes out of bounds are skipped.
/// - Tile operations (block-wide, not inside `parallel`):
///   `copy(src, dst)` with `&buf`, `&mut buf` or `t.tile([origin..])` on
///   each side (one side a buffer), `.fill(v)` for masked reads;
///   `fill(&mut buf, v)`; `clear(&mut buf)`;
///   `reduce_max(&src, &mut dst, dim)` (`reduce_sum`, `reduce_min`),
///   `.keep()` to combine with `dst`; `barrier()`. And
///   `atomic_add(&mut t[(i, j)], v)` on a `&mut Tensor`.
/// - Matrix multiply on tensor cores (block-wide, not inside `parallel`):
///   `gemm(&a, &b, &mut acc);` accumulates `acc += a · b` where `a` is
///   `[M, K]` (a shared buffer or a fragment), `b` is `[K, N]` (a shared
///   buffer), both `f16` or both `bf16`, and `acc` an `f32` fragment
///   `[M, N]`; products and sums are in f32. `.t()` on an operand reads it
///   transposed: `&a.t()` with `a` stored `[K, M]`, `&b.t()` with `b` stored
///   `[N, K]` (Q·Kᵀ: `gemm(&q_s, &k_s.t(), &mut s)`). Modifiers, chained in
///   any order: `.clear()` overwrites `acc` (`acc = a · b`);
///   `.policy(FullRow | FullCol | Square)` (or `WarpPolicy::FullRow`, ..)
///   says how warps split `M × N` (whole rows, whole columns, or as square
///   as possible: the default). `.t()` is valid only on a `gemm` operand.
///   ```ignore
///   gemm(&q_s, &k_s.t(), &mut s).clear().policy(FullRow);
///   ```
///
/// # What it generates
/// ```ignore
/// pub mod vector_add {
///     pub static META: ::tile::KernelMeta = /* name, Tile IR (JSON), PTX per target and variant */;
///     pub fn launch(stream: &::tile::Stream, a: &::tile::DeviceTensor<f32>,
///                   b: &::tile::DeviceTensor<f32>, c: &mut ::tile::DeviceTensor<f32>)
///         -> Result<(), ::tile::Error>;
/// }
/// ```
///
/// # Environment (read at build time)
/// - `TILE_ARCHS`: comma-separated targets (`sm_80`, `sm_90a`; default
///   both; empty: none, the interpreter only).
/// - `TILE_DUMP=<dir>`: writes `<kernel>.tile`, `<kernel>.<arch>.thread`,
///   `<kernel>.<arch>.ptx` (and `<kernel>.<arch>.ptxas.txt`); a target's
///   extra variants (before the general one) add a suffix:
///   `<kernel>.sm_90a.ws.ptx` for the warp-specialized one.
/// - `TILE_PTXAS=<path>`: assembles the PTX of every variant of each target;
///   a failure is a compile error at the kernel.
///
/// Every mistake is a compile error at the offending tokens, all of a
/// kernel's mistakes at once.
#[proc_macro_attribute]
pub fn tile_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::tile_kernel(attr.into(), item.into()).into()
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_gemm;
