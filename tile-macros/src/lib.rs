//! `#[tile_kernel]`: a thin frontend over `tile-ir`.
//!
//! The pipeline, one module per step (as in serde_derive / thiserror):
//! `attr` parses the attribute, `sig` the function (its own parser:
//! `&Tensor<f16, M, K>` is DSL, not a Rust type), `lower/` turns the body
//! into a `tile_ir::Kernel` (one file per kind of statement; once per
//! instance for a generic kernel, `generics` checking the instances), `backend`
//! verifies and compiles it for each target, and `expand` quotes the
//! `mod name { META; fn launch }` that the runtime uses. The frontend checks
//! syntax, names, literal types and placement; the typing and shape rules of
//! tile ops are `tile_ir::verify`'s, whose errors `diag::SpanTable` maps back
//! to the statements. Every rejection is a `syn::Error` at a span; all
//! errors of a kernel are reported together; the macro never panics.
//!
//! The language reference is the documentation of [`macro@tile_kernel`].

#![warn(missing_docs)]

use proc_macro::TokenStream;

mod attr;
mod backend;
mod diag;
mod editor;
mod expand;
mod generics;
mod lower;
mod ptxas;
mod sig;

/// Compiles a kernel function to PTX at build time and replaces it with a
/// module holding its metadata (`META`) and a typed `launch` function.
///
/// This is the language reference of `tile`: what a kernel may contain and
/// the rules each construct follows.
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
/// # Generic kernels
/// One source for a kernel in several element types and configurations: the
/// function takes generic parameters, the attribute lists its instances, and
/// each instance is compiled at build time (every target, every variant) as
/// if its types and constants were written out.
///
/// ```ignore
/// #[tile_kernel(threads = THREADS, instances((f16, 128, 256), (bf16, 128, 256), (f16, 64, 128)))]
/// pub fn matmul<T: Float16, const BM: usize, const THREADS: usize>(
///     a: &Tensor<T, M, K>, b: &Tensor<T, K, N>, c: &mut Tensor<T, M, N>,
/// ) { /* `T` wherever an element type goes, `BM` wherever a constant goes */ }
///
/// // matmul::launch::<f16, 128, 256>(&stream, &a, &b, &mut c)?;
/// // matmul::launch::<_, 128, 256>(..) infers `T` from the tensors.
/// ```
///
/// - **Parameters.** Type parameters `T`, `T: Float16` (f16 | bf16, the
///   tensor-core inputs), `T: Float` (f16 | bf16 | f32), `T: Integer` (i32 |
///   u32) or `T: Element` (any of the five, as no bound); several bounds
///   allow what all of them allow. Const parameters `const BM: usize` (or
///   `u32`, `i32`, `i64`). No lifetimes, defaults or `where` clauses.
/// - **Uses.** A type parameter goes wherever an element type goes: tensor
///   and scalar parameters (`&Tensor<T, M, K>`, `alpha: T`), buffers
///   (`shared::<T, BM, BK>()`), `let x: T`, casts (`x as T`); it is not a
///   value. A const parameter is a compile-time constant like a
///   `consts(..)` name (dims, buffer shapes, `{ BM * 2 }`, loop extents,
///   `pipelined(.., STAGES)`, `use_swizzle(P)`), and `threads = NAME`,
///   `blocks_per_sm = NAME` and the extents of `cluster = (NAME, ..)` may
///   name one; it is not a type. Dimensions
///   that are neither stay dynamic, bound at launch as in any kernel.
///   `consts(..)` holds the constants every instance shares; its names and
///   the parameters' must differ.
/// - **Instances.** `instances((f16, 128, 256), ..)`: one tuple per
///   instance, one argument per parameter in order (an element type for a
///   type parameter, an integer literal for a const parameter; a bare `f16`
///   for a one-parameter kernel). Each is checked against its parameter's
///   kind, bound and integer type, and listed once; a generic kernel needs
///   at least one, a plain kernel none. `name = (..)` names an instance's
///   kernel (below): `instances(attention = (64, 64, 128), attention_d128 =
///   (128, 128, 256))`, so that kernels written apart before keep their
///   names (and PTX) as instances of one source; two instances may not
///   share a name.
/// - **Errors.** Each instance is lowered, verified and compiled apart. A
///   mistake that every instance makes is reported once; one that only some
///   make (a tile that exceeds shared memory at `BM = 256` only) is reported
///   at its tokens, the message ending "(in instance
///   `matmul::<f16, 256, 256>`)" (or "(in instances ..)", the list).
/// - **What it generates.** `mod matmul` holds a trait
///   `Instance<T, const BM: usize, ..>` with `const META: &KernelMeta`, an
///   uninhabited `Instances` implementing it once per instance, `INSTANCES`
///   (every instance's `&KernelMeta`, in the attribute's order),
///   `meta::<T, BM, ..>()` and `launch::<T, BM, ..>(stream, params..)`, both
///   bounded by `Instances: Instance<T, BM, ..>`: a use that is not an
///   instance is a compile error ("`matmul` has no instance
///   `matmul::<f32, 128, 256>`") whose note lists the instances. Host code
///   generic over instances carries the same bound. An instance's kernel
///   (its `KernelMeta::name`, PTX entry and `TILE_DUMP` files) is named
///   `matmul__f16_128_256` (a negative value `m5`), or as the attribute
///   names it; Rust code reaches it by its arguments either way
///   (`matmul::launch::<f16, 128, 256>`).
///
/// # Autotuning
/// `tune(BM, BN, ..)` next to `instances(..)` names the const parameters
/// the autotuner picks (tile sizes, stages, threads, blocks per SM, cluster
/// extents, split-K, a warp policy written as a const parameter: any const
/// parameter); the others (every
/// type parameter, and the consts it does not name) are the caller's. The
/// instances that agree on the caller's parameters are one choice's
/// candidates, in the attribute's order (the first is the default).
///
/// ```ignore
/// #[tile_kernel(threads = THREADS,
///     instances((f16, 128, 256, 256), (f16, 64, 128, 128), (bf16, 128, 256, 256)),
///     tune(BM, BN, THREADS))]
/// pub fn matmul<T: Float16, const BM: usize, const BN: usize, const THREADS: usize>(..) { .. }
///
/// // matmul::launch_tuned::<f16>(&stream, &a, &b, &mut c)?;   // picks BM, BN, THREADS
/// // matmul::launch::<f16, 64, 128, 128>(..)                   // still launches one instance
/// ```
///
/// - **Declaration.** Each name is a const parameter of the kernel, once
///   (a type parameter, an unknown name or a repeat is a compile error at
///   the name); a plain kernel has no `tune(..)`.
/// - **What it generates.** Besides the generic module's items: a trait
///   `Tuned<P..>` over the untuned parameters with `const TUNED:
///   &tile::tune::TunedKernel` (the candidates, each with its
///   configuration as text, `"BM = 128, BN = 256, THREADS = 256"`),
///   implemented by `Instances` once per choice; `tuned::<P..>()`;
///   `launch_tuned::<P..>(stream, params..)` (the process's tuner,
///   `tile::tune::Tuner::global`) and `launch_tuned_with::<P..>(tuner,
///   stream, params..)` (a tuner of the caller's). A use that no instance
///   has is a compile error ("`matmul` has no tuned configurations for
///   `matmul::<f32>`") whose note lists the choices.
/// - **Targets.** A candidate that fails to compile for a target (a tile
///   whose shared memory exceeds sm_80's) is dropped from that target when
///   another candidate of its choice compiles there: its `META` has no
///   variant for that target (the tuner skips it on such a GPU, and its
///   `launch::<..>` there is a `tile::Error`), and `TILE_DUMP` gets
///   `<instance>.<arch>.dropped.txt` saying why. When no candidate of a
///   choice compiles for a target, the errors are reported as for any
///   kernel.
/// - **At run time** (`tile::tune`): the first launch of a (device, kernel,
///   shape bucket) times every candidate on the real arguments and keeps
///   the fastest (skipping, with the reason, a candidate whose launch
///   fails); `&mut` tensors the kernel reads (an accumulator, an
///   `atomic_add` target) are saved first and restored before the real
///   launch. The choice is cached in memory and on disk
///   (`$TILE_CACHE_DIR`, else `$XDG_CACHE_HOME/tile`, else
///   `~/.cache/tile`: `tune.json`), keyed by the GPU (name, compute
///   capability, SM count, driver version), a hash of the candidates' IR
///   and PTX, and the bucket: each tensor's dims, exact up to 16 and
///   rounded up to a power of two above, with a mark for rows that are not
///   a multiple of 16 bytes. `TILE_TUNE=off` (the first candidate that
///   launches), `quiet` (no progress bar), `cache-only` (never tunes);
///   `TILE_TUNE_CACHE=<file>` reads a shipped file first (written by
///   `Tuner::save` after tuning ahead of time).
///
/// # The attribute
/// `threads = N` (required: a multiple of 32, at most 1024; or the name of a
/// const parameter of a generic kernel) and
/// `consts(NAME = integer, ..)`: the compile-time constants of the kernel. A
/// `const` item outside the kernel is invisible to a macro; put it here.
/// `instances(..)`: the instances of a generic kernel (above);
/// `tune(..)`: which of its const parameters the autotuner picks (above).
/// Optional:
/// - `cluster = (x, y, z)`: thread block clusters (sm_90 and later): 1 to 3
///   extents (missing ones are 1; a bare `cluster = x` is `(x)`), each a
///   positive integer literal or the name of a const parameter of a generic
///   kernel (`cluster = (CL, 1, 1)` with `fn k<.., const CL: usize>`: each
///   instance's value, so that instances, and tuned candidates, may differ
///   in cluster), at most 8 blocks in all (the portable limit). An extent
///   that is neither, or an instance whose value is 0 or makes more than 8
///   blocks, is a compile error at the extent. A cluster never changes
///   results: on a GPU with clusters the blocks of a cluster are
///   co-scheduled on one GPC, and the grid must be a multiple of the cluster
///   on every axis (a compile error for a constant grid extent, a launch
///   error for a dynamic one); GPUs without clusters (sm_8x) and the
///   interpreter ignore it (`tile_ir::Kernel::cluster`).
/// - `warp_specialize = true | false` (default `true`): whether the sm_90a
///   compiler may add warp-specialized variants of a kernel whose one
///   top-level `pipelined` loop has copies TMA can do (`threads` a multiple
///   of 128): a producer warpgroup issues those copies (and TMA-able copies
///   before the loop, such as attention's Q tile) as TMA loads into
///   mbarrier-guarded stages, `setmaxnreg` moves registers to the consumers,
///   and the block's own threads run everything else, before, in and after
///   the loop (gemms on wgmma, reductions, `parallel` loops, masks); two
///   consumer warpgroups take turns at the tensor cores (ping-pong); three
///   (384 threads, FA3's head-dim-64 schedule) issue each iteration's P·V
///   after the next Q·Kᵀ where the registers allow it. `pipelined(n, 1)`
///   is taken too when its copies form two or more independent rings (no
///   statement, and no gemm chain from a `clear`, reads two of them: two
///   key blocks per iteration, each read by its own statements), each
///   refilled as soon as its last reader is done (MLA's seesaw). A GEMM
///   main loop (only copies and gemms) gets its own variant, whose
///   accumulator may be stored with TMA and the kernel run persistently over
///   the grid's tiles. The runtime launches them only when the mapped tensors are
///   TMA-addressable (16-byte aligned, rows a multiple of 16 bytes), else the
///   general code. `false` turns it off, for bisecting
///   (`tile_ir::Kernel::warp_specialize`).
/// - `blocks_per_sm = N` (an integer literal, or the name of a const
///   parameter of a generic kernel; default 1): asks for `N` blocks side by
///   side on each SM, for kernels that wait on memory (a GEMM at decode-size
///   M keeps `N` times the bytes in flight). Above 1 every variant gets the
///   launch bound `.minnctapersm N` (ptxas keeps each thread's registers
///   within an `N`-th of the SM's file), and the sm_90a warp-specialized
///   GEMM splits the block's `N`-th of the file between its producer and
///   consumers (`setmaxnreg`); the warp-specialized loop keeps its own bound.
///   `N` must be 1 to 32 with at most 2,048 threads in all (a compile error at
///   `N`); a variant whose `N` blocks' shared memory (plus the 1 KiB the SM
///   reserves for each) exceeds an SM's is a compile error (a tuned
///   candidate is dropped from that target instead). Results never change
///   (`tile_ir::Kernel::blocks_per_sm`).
/// - `dependent_launch = true` (default `false`): the kernel is launched as
///   a programmatic dependent of the kernel before it on the stream (sm_90
///   and later: the launch attribute programmatic stream serialization), so
///   its launch overlaps that kernel's last blocks; every thread first
///   executes `griddepcontrol.wait`, which returns once that kernel has
///   completed and its writes are visible. It reads exactly what it would
///   after an ordinary launch: for a kernel that consumes the previous
///   one's output (a split-KV combine after its split kernel). On sm_80 it
///   is an ordinary launch (`tile_ir::Kernel::dependent_launch`).
/// - `archs = "sm_90a"` (comma-separated): embed only these of the targets
///   `TILE_ARCHS` asks for, e.g. a Hopper-only configuration whose shared
///   memory exceeds sm_80's; a compile-time choice, not in the IR. On a GPU
///   without an embedded target the launch is a `tile::Error` naming the
///   targets there are.
///
/// ```ignore
/// #[tile_kernel(threads = 256, consts(BM = 128, BN = 256, BK = 64), cluster = (2, 1, 1))]
/// ```
///
/// # Parameters
/// `&Tensor<T, D0, D1, ..>` (read-only), `&mut Tensor<T, D0, D1, ..>`, and
/// scalars `f32`, `i32`, `u32`, `f16`, `bf16`. `T` is one of those types (or
/// a type parameter). A
/// dimension is an integer literal, a name from `consts(..)` (or a const
/// parameter), or any other
/// name: a dynamic dimension, an `i32` bound at launch from the tensors'
/// shapes (tensors naming the same dimension must agree). Shapes are generic
/// arguments because rustc parses the item before the macro runs and
/// `[M, K]` is not Rust type syntax; `Tensor<T, (M, K)>` and 1-D
/// `Tensor<T, [N]>` are accepted too.
///
/// # The body
/// What one thread block does.
/// - `let bx = grid(x);` / `let (bx, by) = grid(x, y);` (up to 3 axes) as
///   the first statement; the extents use dimensions and constants only (the
///   host computes the grid before the launch). Any extent up to 2^31 − 1 on
///   any axis: a grid whose y or z extent is past CUDA's 65,535 is launched
///   folded onto x and unfolded in the kernel (`tile_ir::abi::folds_grid`),
///   with at most 2^31 − 1 blocks in all; only a kernel with a `cluster`
///   keeps the 65,535 limit on y and z (a launch error that says so). A 1-D
///   grid, or one whose y and z extents are constants, reads `ctaid` as is.
/// - `use_swizzle(panel);` (optional, right after a 2-D or 3-D `grid(..)`,
///   once, `panel` a constant ≥ 1): threadblock rasterization for L2 reuse.
///   The block with linear id `L = by·gx + bx` (in launch order) runs as
///   `(bx, by) = tile_ir::abi::rasterize(panel, gx, gy, L)`: panels of
///   `panel` columns of the grid (x = column, y = row; the last panel
///   narrower when `gx % panel ≠ 0`), each walked row by row before the next.
///   A bijection: every block still runs once, so results do not change.
/// - Buffers: `let mut s = shared::<T, D0, D1>();`, `fragment::<..>()` (a
///   tile spread over the threads' registers), `local::<..>()` (a small
///   array every thread holds); at least one dimension, each a positive
///   compile-time constant: a literal, a `consts(..)` name, or `{ expr }` of
///   them (`shared::<f16, BM, { BK * 2 }>()`). Elements are `f16`, `bf16`,
///   `f32`, `i32` or `u32`. Limits: a `shared` buffer fits the shared memory
///   of the largest target (the smaller targets' limits are checked when
///   compiling for them); a `fragment` needs at most 256 registers per
///   thread (elements / threads, more when its layout replicates); a
///   `local` at most 256 elements. A fragment indexed in a `parallel` loop
///   has the extents of the loop variables that index it.
/// - `annotate_layout(&s, layout);` (optional, for a `shared` buffer, at
///   most once, before any statement uses `s`: put it with the
///   declarations): the buffer's layout in shared memory instead of the
///   compiler's choice (an ldmatrix swizzle or padding for gemm operands,
///   row-major otherwise); results never change and the interpreter ignores
///   it. Seeing `s` as `[rows, cols]` (outer dims folded into rows),
///   `layout` is `row_major()`, `padded(bytes)` (each row followed by `bytes`
///   unused bytes, a positive multiple of 16 so 16-byte cp.async/ldmatrix
///   chunks stay aligned), or `swizzle(bits)` (`bits` in 1..=3: the 16-byte
///   chunk index within a row XORed with `row mod 2^bits`; rows a power of
///   two of at least `16·2^bits` bytes; with 128-byte rows this is CuTe's
///   `Swizzle<bits, 4, 3>`). Arguments are constants. Pipelined buffers get
///   `stages` copies of the annotated layout (`tile_ir::Buffer::layout`).
/// - Views: `let k_pe = kv_s.view([.., 512..]);` names a window of shared
///   buffer `kv_s` without memory of its own: one half-open range per
///   dimension (`a..b`, `a..`, `..b`, `..`; constant bounds inside the
///   buffer), so `kv_s.view([.., ..512])` of a `[64, 576]` buffer is its
///   first 512 columns, `[64, 512]`. A view is usable wherever a shared
///   buffer is (a `gemm` operand, `.t()` included; the source or
///   destination of `copy`; element access `k_pe[(i, j)]`; `fill`,
///   `reduce_*`) and reads and writes the buffer's elements: writing one
///   writes the other. A view of a view is a window of the same buffer.
///   The buffer's layout is chosen for the gemms of its views too (a buffer
///   with views whose rows are a multiple of 64 16-bit columns is stored as
///   64-column 128-byte-swizzled panels on every target), and a view must be
///   expressible in it: a compile error at the `let` says when it is not
///   (e.g. a column offset that is not a multiple of the panel width, 64).
///   A pipelined copy into the buffer itself gets stages (its views follow
///   them); a copy into a view is not pipelined. A view takes no
///   `annotate_layout` of its own (annotate the buffer).
/// - Loops: `for i in a..b` (or `a..=b`; serial, `i32` bounds),
///   `for i in parallel(N)`, `for (i, j) in parallel((M, N))` (up to 3-D,
///   positive constant extents; iterations are independent and spread over
///   the threads), `for k in pipelined(n, stages)` (a serial loop from 0 to
///   `n` whose shared-memory tile copies are multi-buffered, `stages` a
///   constant in 1..=16: `cp.async`, or TMA on sm_90a). A copy whose tile
///   origin depends on the loop variable is prefetched `stages − 1`
///   iterations ahead, also when the origin is read from a tensor the
///   kernel never writes, directly or through `let`s earlier in the body
///   (paged attention: `let page = block_table[(b, kb)];` then
///   `copy(cache.tile([page, .., ..]), &mut k_s)`; the table is read only
///   for iterations below `n`); one whose origin reads a tensor the kernel
///   writes is loaded when it is reached (`TILE_DUMP`'s `.schedules.txt`
///   says why). Each copy is waited for just before the first statement
///   that reads its buffer, never for another copy's prefetch. Loop
///   variables are not `mut`; loops have no labels.
/// - `if`/`else` (also as a value: `if c { a } else { b }`, one expression
///   per branch), `let x = ..`, `let mut x: f32 = ..`, `=`, `+=` (and the
///   other compound operators) on `let mut` variables and on elements, and
///   `{ .. }` blocks. An `if` statement whose condition folds to a constant
///   (`if D > 128 { .. } else { .. }` on const parameters, also joined by
///   `&&`, `||` and `!`: `if D <= 64 && THREADS == 128`) keeps only the
///   branch taken: each instance gets its own code, both branches checked.
///   Not in a kernel: `while`, `loop`, `match`, `return`,
///   `break`, `continue`, closures, items and macros (`print!`: use
///   `print(..)`).
/// - Operators `+ - * / % & | ^ << >> == != < <= > >= && || ! -`, casts
///   `as f16|bf16|f32|i32|u32`. Operands have one type: no implicit
///   conversions, except that untyped literals and constants adopt the
///   other operand's type (`x * 2` with `x: f16`), defaulting to `i32` (or
///   `f32` for a float literal); operators on two constants are folded.
///   Conditions and `&&`/`||` operands are `bool`.
/// - Math: `exp2 exp log2 log abs sqrt rsqrt` (one float argument; `abs`
///   also `i32`; also as methods, `x.exp2()`), `max min` (`x.max(y)`),
///   `fma(a, b, c)`, `cdiv(a, b)` (integers); `f32::INFINITY`,
///   `f32::NEG_INFINITY`, `f32::MAX`, `f32::MIN`.
/// - Elements: `x[i]`, `x[(i, j)]`, `x[[i, j]]`, one index per dimension.
///   A fragment only inside a `parallel` loop, indexed by its loop variables
///   (which say which thread holds which element). Tensors: reads out of
///   bounds give 0, writes out of bounds are skipped. A variable or `local`
///   buffer declared outside a `parallel` loop is not written inside it (the
///   iterations run on different threads).
/// - Tile operations (block-wide: not inside `parallel`):
///   - `copy(src, dst)` with `&buf`, `&mut buf`, `&t` (a whole tensor) or
///     `t.tile([..])` on each side: at most one side is a tensor; two
///     buffers have the same shape. `.tile(..)` takes one entry per tensor
///     dimension, each `e..` (the window spans this dim from `e`), `..` (the
///     same from 0) or a plain index `e`. Without any range every entry
///     spans its dim and the buffer facing the tile has the tensor's rank
///     (`x.tile([r, c])` into a `[BM, BN]` buffer). With ranges, the plain
///     entries are *squeezed* dims (a scalar index, extent 1, not a dim of
///     the buffer), and the buffer has one dim per range, in order: Q of
///     `[b, s, h, d]` as `[BM, D]` is `q.tile([b, s0.., h, ..])`, an LSE
///     row `[BM]` of `[b, h, s]` is `lse.tile([b, h, s0..])`, a column `[BM]`
///     of `[M, N]` is `x.tile([r0.., c])` (strided: one element per row).
///     A range has no end (`a..b`, `a..=b` are errors): the extent is the
///     buffer's. Ranks that differ without ranges are an error. The window
///     is masked at the tensor's edges (a squeezed index outside its dim
///     masks the whole window): reads give 0 (or `.fill(v)`), writes are
///     skipped. `&t` is `t.tile([0, 0, ..])`.
///     Element types convert (`f16` → `f32` ..). `.fill(v)` sets the value
///     of masked reads from a tensor (of the destination's type). A written
///     tensor is a `&mut Tensor`. `.evict_first()` (after `copy(..)` or its
///     `.fill(v)`, on a copy from a tensor; no result changes) marks data
///     read once, such as a decode kernel's streamed KV cache: the L2 evicts
///     its lines first, so that what is read again (Q, a GEMM's operand
///     tiles) stays. Copies issued as TMA boxes carry it (the
///     warp-specialized and TMA-copy schedules); the others ignore it.
///   - `fill(&mut buf, v)` (a value of `buf`'s type), `clear(&mut buf)`: on
///     shared, fragment and local buffers.
///   - `reduce_max(&src, &mut dst, dim)` (`reduce_sum`, `reduce_min`): `src`
///     and `dst` fragments of one element type, `dim` a constant below
///     `src`'s rank, `dst` shaped as `src` without `dim` (`[1]` for a 1-D
///     `src`); `.keep()` combines with `dst`'s current values.
///   - `atomic_add(&mut t[(i, j)], v)` on an element of a `&mut Tensor`,
///     `v` of its type.
///   - `barrier()`: all threads of the block meet.
/// - Debugging: `print("m = {} at row {}", m[i], i);` prints one line (a
///   newline is added) each time it runs: once per block outside `parallel`
///   loops (on the GPU by thread 0), once per iteration inside one (by the
///   thread that holds the iteration). The format is a string literal with
///   one `{}` per value (`{:e}`: floats in scientific notation; `{{`, `}}`:
///   braces); values are scalars or elements of any type, floats printed as
///   C's `%f` (`1.500000`), `bool` as `1`/`0`. `.block((x, y))` (one index
///   per grid axis, each named in `let (bx, by) = grid(..)`) prints only in
///   that block; an `if` around the print filters iterations
///   (`if i == 0 { print(..) }`). The interpreter writes the lines to stderr
///   (`tile::capture_prints` collects them instead), the GPU to the
///   process's stdout through `vprintf` (flushed when the launch is
///   synchronized; lines of different threads in any order). Every target
///   and schedule lowers it; a `print` inside a `pipelined` loop keeps the
///   warp-specialized schedule from taking the loop (the others take it).
///   In the interpreter, `TILE_INTERPRET_CHECK=1` also reports reads of
///   shared, fragment and local elements the block has not written (they
///   hold garbage on the GPU), and every interpreter error (out-of-bounds
///   buffer indices too) names the statement's line (on Rust ≥ 1.88; its
///   text form on older compilers).
/// - Matrix multiply on tensor cores (block-wide, not inside `parallel`):
///   `gemm(&a, &b, &mut acc);` accumulates `acc += a · b` where `a` is
///   `[M, K]` (a shared buffer or a fragment), `b` is `[K, N]` (a shared
///   buffer), both `f16` or both `bf16`, and `acc` an `f32` fragment
///   `[M, N]`. `.t()` on an operand reads it transposed: `&a.t()` with `a`
///   stored `[K, M]`, `&b.t()` with `b` stored `[N, K]` (Q·Kᵀ:
///   `gemm(&q_s, &k_s.t(), &mut s)`); `.t()` is valid only on a `gemm`
///   operand. Modifiers, chained in any order: `.clear()` overwrites `acc`
///   (`acc = a · b`); `.policy(FullRow | FullCol | Square)` (or
///   `WarpPolicy::FullRow`, ..) says how warps split `M × N` (whole rows,
///   whole columns, or as square as possible: the default). Semantics (the
///   interpreter's): products of the stored f16/bf16 values in f32, summed in
///   f32 (k ascending); the GPU sums in another order. Lowered to
///   `mma.sync` with `ldmatrix` from swizzled shared tiles, or on sm_90a
///   (`threads` = 128·W) to `wgmma` when each warpgroup owns 64 rows
///   (M = 64·W, any policy, any W: three warpgroups over 192 rows at 384
///   threads included) or, W a power of two, when warpgroups share rows and
///   split the columns: `FullCol` with M = 64 (MLA decode's `[64, 512]`
///   output over 256 threads: two 64×256 halves), `Square` with M = 64·r,
///   r < W (M = 128 over 512 threads: 2×2); a warpgroup's N columns over
///   256 take several instructions. With the columns split, A must be a
///   shared buffer (every warpgroup multiplies all of A's rows: stage P with
///   `copy(&p, &mut p_s)`); A from a fragment there is a compile error.
///   ```ignore
///   gemm(&q_s, &k_s.t(), &mut s).clear().policy(FullRow);
///   ```
///   `.policy(Warpgroup(w))` (M = 64, `w` an integer literal below
///   `threads / 128`): warpgroup `w` alone computes `acc` and holds it,
///   with wgmma on sm_90a (mma.sync on its four warps elsewhere). The
///   fragments that take their layout from `acc` (its reductions, the
///   fragments of `parallel` loops over it, copies of it) are warpgroup
///   `w`'s too, and every statement on them runs on warpgroup `w` only,
///   inside one branch; the other warpgroups skip it and go on to their own
///   work (MLA decode: warpgroup 0's scores and softmax, while both
///   warpgroups hold half of O). A statement cannot mix fragments of
///   different warpgroups, or of one warpgroup and of all (a layout
///   conflict): pass values through shared memory
///   (`alpha_s[i] = alpha[i]`, then `acc[(i, j)] *= alpha_s[i]`), the
///   barriers are the compiler's. A reduction of such a fragment along
///   dims its warps split is a compile error (its warps would need a
///   barrier of their own).
///   ```ignore
///   gemm(&q_s, &k_s.t(), &mut s).clear().policy(Warpgroup(0));
///   ```
///
/// # Helpers
/// Work done the same way on different buffers is written once, as a
/// closure bound by `let`, and called as a statement; each call is
/// inlined, so it compiles to exactly what its body written out at the call
/// compiles to.
/// ```ignore
/// let softmax = |s, m, l: &mut _, scale: f32| {
///     reduce_max(&s, &mut m, 1);
///     for (i, j) in parallel((64, 64)) {
///         s[(i, j)] = exp2((s[(i, j)] - m[i]) * scale);
///     }
///     reduce_sum(&s, &mut l, 1);
/// };
/// softmax(&mut s0, &mut m0, &mut l0, scale);
/// softmax(&mut s1, &mut m1, &mut l1, scale);
/// ```
/// - **Parameters.** A name (`x`, `mut x`), optionally typed: `x: f32` (a
///   scalar of that type), `s: &mut _` or `q: &_` (a buffer the caller
///   passes by `&mut` or by either reference); `_` or no type takes what
///   the call passes.
/// - **Arguments.** `&buf` or `&mut buf` (a shared, fragment or local
///   buffer, a view or a tensor parameter) makes the parameter another name
///   of that buffer: the body uses it as it would the buffer (`&s`,
///   `&mut s`, `s[i]`, `gemm(&p, &kv, ..)`). Writing through a parameter
///   passed as `&buf` is an error. Anything else is a scalar value,
///   evaluated once at the call (a variable that cannot change is passed as
///   itself); a `mut x` parameter is a copy the body may change.
/// - **Captures.** The body sees what is visible where the helper is
///   defined (as a Rust closure: a name shadowed later does not change
///   it), the kernel's constants and type parameters; it reads and writes
///   what it captures when it is called. Buffers it declares are new at
///   each call (each call's own registers or shared memory).
/// - **Rules.** A call is a statement (a helper returns nothing: results go
///   into buffer parameters); a helper may call helpers defined before it,
///   not itself; one inside a `parallel` loop may contain only what such a
///   loop may. No `move`, `async`, `const` or return type. A helper never
///   called is an error: its body would be neither compiled nor checked.
///
/// Who checks what: this macro checks syntax, names (with "did you mean"),
/// literal types, statement placement and the argument kinds of tile
/// operations, at the tokens at fault; the typing and shape rules of the IR
/// are `tile_ir::verify`'s (its `rules` module holds the ones the macro also
/// asks), and its errors point at the statement concerned.
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
/// - `TILE_DUMP=<dir>`: writes (`<kernel>` the instance's name for a generic
///   kernel: `matmul__f16_128_256`) `<kernel>.tile`, `<kernel>.<arch>.thread`,
///   `<kernel>.<arch>.ptx` (and `<kernel>.<arch>.ptxas.txt`); a target's
///   extra variants (before the general one) add their schedule's name:
///   `<kernel>.sm_90a.warp_specialized_gemm.ptx`, `<kernel>.sm_90a.warp_specialized_loop.ptx`,
///   `<kernel>.sm_90a.tma_copy.ptx`;
///   `<kernel>.<arch>.schedules.txt` says which schedules took the kernel
///   and, for the others, why not; `<kernel>.<arch>.dropped.txt`, a tuned
///   candidate left out of a target it does not compile for.
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
