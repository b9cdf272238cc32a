//! The tiled tensor-core matmul in Tile IR text form, as the `tile` macro
//! lowers `examples/kernels/gemm.rs` (`tests/gemm_interp.rs` checks the
//! example's three kernels against it): `c = op(a) · op(b)` with one
//! `bm × bn` tile of `c` per block, a `bk`-deep K loop pipelined over
//! `stages` shared-memory stages, and an f32 accumulator.
//!
//! [`Matmul`] is one configuration; [`Matmul::text`] prints its kernel. The
//! named configurations below are the ones several test files share; a test
//! varies one with struct-update syntax (`Matmul { trans_b: true, ..MATMUL }`).

/// One configuration of the matmul kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Matmul {
    /// The kernel's name.
    pub name: &'static str,
    /// Element type of `a` and `b` (`"f16"` or `"bf16"`), and of `c` unless
    /// [`out`](Self::out) says otherwise.
    pub dtype: &'static str,
    /// Element type of `c` when it differs from the inputs' (an epilogue
    /// converting the f32 accumulator to `"f32"`, say).
    pub out: Option<&'static str>,
    /// `a` is stored `[K, M]` (the gemm reads `a_s.t`).
    pub trans_a: bool,
    /// `b` is stored `[N, K]` (the gemm reads `b_s.t`).
    pub trans_b: bool,
    /// Pipeline stages of the K loop (`pipelined(stages)`).
    pub stages: u32,
    /// Rows of `c` per block.
    pub bm: i64,
    /// Columns of `c` per block.
    pub bn: i64,
    /// Depth of one K step.
    pub bk: i64,
    /// Threads per block.
    pub threads: u32,
    /// Grid rasterization (`swizzle=`), if any.
    pub swizzle: Option<u32>,
    /// The dims are numbered `K, M, N` (as the macro numbers them when `a`
    /// is `[K, M]`, the first parameter naming K first) instead of `M, K, N`.
    pub k_first: bool,
    /// Blocks asked to share an SM (`blocks_per_sm=`; 1: not printed).
    pub blocks_per_sm: u32,
    /// Blocks of a thread block cluster along x (`cluster=(C, 1, 1)`; 1:
    /// not printed).
    pub cluster: u32,
    /// Launched as a programmatic dependent (`dependent_launch=true`).
    pub dependent_launch: bool,
}

/// The example GEMM at 128×128×32, 3 stages, 256 threads, f16 (its shape
/// before it moved to 128×256×64).
pub const MATMUL: Matmul = Matmul {
    name: "matmul",
    dtype: "f16",
    out: None,
    trans_a: false,
    trans_b: false,
    stages: 3,
    bm: 128,
    bn: 128,
    bk: 32,
    threads: 256,
    swizzle: Some(8),
    k_first: false,
    blocks_per_sm: 1,
    cluster: 1,
    dependent_launch: false,
};

/// The example GEMM configuration: 128×256×64, 3 stages, 256 threads, f16;
/// on sm_90a it gets the warp-specialized variant.
pub const MATMUL_128X256: Matmul = Matmul { bn: 256, bk: 64, ..MATMUL };

/// `c = aᵀ · b` in bf16 with `a` stored `[K, M]`: 64×64×32 tiles, 2 stages,
/// 128 threads, no rasterization.
pub const GEMM_TN_BF16: Matmul = Matmul {
    name: "gemm_tn_bf16",
    dtype: "bf16",
    trans_a: true,
    stages: 2,
    bm: 64,
    bn: 64,
    bk: 32,
    threads: 128,
    swizzle: None,
    k_first: true,
    ..MATMUL
};

impl Matmul {
    /// The header's options after the grid: `swizzle=`, `cluster=`,
    /// `blocks_per_sm=`, `dependent_launch=true`, in the printer's order.
    fn options(&self) -> String {
        let mut out = self.swizzle.map(|s| format!(" swizzle={s}")).unwrap_or_default();
        if self.cluster != 1 {
            out.push_str(&format!(" cluster=({}, 1, 1)", self.cluster));
        }
        if self.blocks_per_sm != 1 {
            out.push_str(&format!(" blocks_per_sm={}", self.blocks_per_sm));
        }
        if self.dependent_launch {
            out.push_str(" dependent_launch=true");
        }
        out
    }

    /// The kernel in Tile IR text form.
    pub fn text(&self) -> String {
        self.text_with_layouts("", "")
    }

    /// The kernel with layout annotations on the shared buffers: `a_layout`
    /// on `a_s`, `b_layout` on `b_s` (`"swizzle(3)"`, `"padded(16)"`; empty:
    /// none, layout inference chooses).
    pub fn text_with_layouts(&self, a_layout: &str, b_layout: &str) -> String {
        let t = self.dtype;
        let out = self.out.unwrap_or(t);
        let (bm, bn, bk) = (self.bm, self.bn, self.bk);
        let (a_ty, a_s, a_org) = if self.trans_a {
            ("[K, M]", format!("[{bk}, {bm}]"), format!("[k * {bk}, by * {bm}]"))
        } else {
            ("[M, K]", format!("[{bm}, {bk}]"), format!("[by * {bm}, k * {bk}]"))
        };
        let (b_ty, b_s, b_org) = if self.trans_b {
            ("[N, K]", format!("[{bn}, {bk}]"), format!("[bx * {bn}, k * {bk}]"))
        } else {
            ("[K, N]", format!("[{bk}, {bn}]"), format!("[k * {bk}, bx * {bn}]"))
        };
        let ta = if self.trans_a { ".t" } else { "" };
        let tb = if self.trans_b { ".t" } else { "" };
        let dims = if self.k_first { "%0 K, %1 M, %2 N" } else { "%0 M, %1 K, %2 N" };
        let options = self.options();
        let annotation = |l: &str| if l.is_empty() { String::new() } else { format!("({l})") };
        let (la, lb) = (annotation(a_layout), annotation(b_layout));
        format!(
            "kernel {name}<{dims}>(@0 a: &{t}{a_ty}, @1 b: &{t}{b_ty}, @2 c: &mut {out}[M, N]) threads={th} grid=((N + {bn1}) / {bn}, (M + {bm1}) / {bm}, 1){options} {{
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared{la} {t}{a_s}
  @4 b_s: shared{lb} {t}{b_s}
  @5 acc: fragment f32[{bm}, {bn}]
  fill acc, 0.0
  for %5 k in pipelined({st}) 0..(K + {bk1}) / {bk} {{
    copy a{a_org} -> a_s
    copy b{b_org} -> b_s
    gemm a_s{ta}, b_s{tb} -> acc
  }}
  copy acc -> c[by * {bm}, bx * {bn}]
}}",
            name = self.name,
            th = self.threads,
            bn1 = bn - 1,
            bm1 = bm - 1,
            bk1 = bk - 1,
            st = self.stages,
        )
    }

    /// The split-K form of the kernel (`examples/kernels/gemm.rs`'s
    /// `matmul_splitk` / `matmul_bt_splitk`, as the macro lowers them): a
    /// third grid axis over `SPLIT` K ranges of `steps` k-steps each, the
    /// partial product of range `bz` written to `c[bz, .., ..]` (`out`'s
    /// type, default f32); `b` is `[KB, NB]` (`[NB, K]` with `trans_b`),
    /// `KB` and `NB` its own dims. Uses `name`, `dtype`, `out`, `trans_b`,
    /// the tile, `stages`, `threads`, `swizzle`, `blocks_per_sm` and
    /// `dependent_launch` (not `trans_a` or `k_first`). The dims, in order:
    /// `M, K, KB, NB, SPLIT, N` (`M, K, NB, SPLIT, N` with `trans_b`).
    pub fn splitk_text(&self) -> String {
        let t = self.dtype;
        let out = self.out.unwrap_or("f32");
        let (bm, bn, bk) = (self.bm, self.bn, self.bk);
        let (b_ty, b_s, b_org, tb) = if self.trans_b {
            ("[NB, K]", format!("[{bn}, {bk}]"), format!("[bx * {bn}, (k0 + k) * {bk}]"), ".t")
        } else {
            ("[KB, NB]", format!("[{bk}, {bn}]"), format!("[(k0 + k) * {bk}, bx * {bn}]"), "")
        };
        let names: &[&str] =
            if self.trans_b { &["M", "K", "NB", "SPLIT", "N"] } else { &["M", "K", "KB", "NB", "SPLIT", "N"] };
        let dims: Vec<String> = names.iter().enumerate().map(|(i, d)| format!("%{i} {d}")).collect();
        let id = |i: usize| names.len() + i;
        let options = self.options();
        format!(
            "kernel {name}<{dims}>(@0 a: &{t}[M, K], @1 b: &{t}{b_ty}, @2 c: &mut {out}[SPLIT, M, N]) threads={th} grid=((N + {bn1}) / {bn}, (M + {bm1}) / {bm}, SPLIT){options} {{
  %{bx} bx = block_idx.x
  %{by} by = block_idx.y
  %{bz} bz = block_idx.z
  @3 a_s: shared {t}[{bm}, {bk}]
  @4 b_s: shared {t}{b_s}
  @5 acc: fragment f32[{bm}, {bn}]
  let %{steps} steps: i32 = ((K + {bk1}) / {bk} + (SPLIT - 1)) / SPLIT
  let %{k0} k0: i32 = bz * steps
  fill acc, 0.0
  for %{k} k in pipelined({st}) 0..steps {{
    copy a[by * {bm}, (k0 + k) * {bk}] -> a_s
    copy b{b_org} -> b_s
    gemm a_s, b_s{tb} -> acc
  }}
  copy acc -> c[bz, by * {bm}.., bx * {bn}..]
}}",
            name = self.name,
            dims = dims.join(", "),
            th = self.threads,
            bn1 = bn - 1,
            bm1 = bm - 1,
            bk1 = bk - 1,
            st = self.stages,
            bx = id(0),
            by = id(1),
            bz = id(2),
            steps = id(3),
            k0 = id(4),
            k = id(5),
        )
    }
}
