//! The block's register pool, as `setmaxnreg` sees it (PTX ISA,
//! `setmaxnreg`; see the module doc of `mod.rs`).
//!
//! At launch every warp holds the block's entry count per thread: what
//! ptxas allocates to the kernel, the register file's share of a block at
//! its launch bounds (`TargetInfo::entry_regs` of the function's
//! `.maxntid` and `.minnctapersm`), at most the largest `setmaxnreg` count
//! in the kernel (measured with ptxas 12.9 at `.maxntid 256,
//! .minnctapersm 1`: `Used 240 registers` with a `setmaxnreg.inc 240`, 232
//! with 232, 200 with 200, 248 with 248; at 384 threads 168, at two blocks
//! of 256 128, whatever the counts). The pool starts empty (the block's
//! registers are all its warps'). `setmaxnreg.dec N` of a warpgroup at `C`
//! per thread returns `128·(C − N)` to the pool; `setmaxnreg.inc N` waits
//! (the warpgroup blocks at the instruction, other warps keep running)
//! until the pool holds `128·(N − C)`, then takes it: registers come only
//! from the block's own pool, never from the SM's free registers or
//! another block's. An `exit` returns nothing (conservative: the H200 hung
//! with a split 1,024 registers short although three producer warps had
//! exited). `inc` below or `dec` above the current count is undefined in
//! PTX and fails the test, as does a count outside 24..=256 or not a
//! multiple of 8.
//!
//! In a cluster each block has its own pool (registers never move between
//! blocks).
//!
//! Expects `Sim::start_warps` to have set the warps up. Guarantees: the
//! pool never goes negative; a warpgroup's count changes only at its
//! `setmaxnreg`.

use super::*;

/// The register pool of a block being run.
#[derive(Clone, Debug, Default)]
pub(super) struct RegPool {
    /// Registers per thread at launch.
    pub(super) entry: u32,
    /// Per warpgroup of the block: its registers per thread now.
    pub(super) per_thread: Vec<u32>,
    /// Registers released to the pool and not yet taken.
    pub(super) free: u64,
    /// Registers released by `setmaxnreg.dec` and taken by `setmaxnreg.inc`
    /// since the launch (for the deadlock report).
    pub(super) released: u64,
    pub(super) taken: u64,
}

/// The largest `setmaxnreg` count in `body`, if any.
fn max_setmaxnreg(body: &[Stmt]) -> Option<u32> {
    let mut m: Option<u32> = None;
    for s in body {
        let here = match s {
            Stmt::Inst { inst: Inst::SetMaxNreg { count, .. }, .. } => Some(*count),
            Stmt::If { then, otherwise, .. } => max_setmaxnreg(then).max(max_setmaxnreg(otherwise)),
            Stmt::For { body, .. } => max_setmaxnreg(body),
            _ => None,
        };
        m = m.max(here);
    }
    m
}

/// Registers per thread ptxas gives `f` at entry (see the module doc).
pub fn entry_regs(f: &Function) -> u32 {
    let info = tile_ir::Target::Sm90a.info();
    let share = info.entry_regs(f.threads, f.min_blocks_per_sm.unwrap_or(1));
    max_setmaxnreg(&f.body).map_or(share, |m| share.min(m))
}

impl<'f> Sim<'f> {
    /// The pools of the blocks that have just launched.
    pub(super) fn regs_block_start(&mut self) {
        let entry = entry_regs(self.f);
        let pool = RegPool { entry, per_thread: vec![entry; self.block_threads.div_ceil(128)], ..RegPool::default() };
        self.pools = vec![pool; self.nblocks];
    }

    /// Warpgroup `wg`'s block and its number in the block.
    fn wg_in_block(&self, wg: usize) -> (usize, usize) {
        let r = self.block_of(128 * wg);
        (r, wg - r * self.stride / 128)
    }

    /// Registers `setmaxnreg.inc` of warpgroup `wg` still lacks in the pool
    /// (0: it can run now; always 0 for any other instruction).
    pub(super) fn setmaxnreg_short(&self, wg: usize, inst: &Inst) -> u64 {
        let Inst::SetMaxNreg { inc: true, count } = inst else { return 0 };
        let (r, lw) = self.wg_in_block(wg);
        let pool = &self.pools[r];
        let want = 128 * (*count as u64).saturating_sub(pool.per_thread[lw] as u64);
        want.saturating_sub(pool.free)
    }

    /// Runs `setmaxnreg` for warpgroup `wg` (the pool holds enough for an
    /// `inc`: [`Sim::setmaxnreg_short`] is 0).
    pub(super) fn setmaxnreg(&mut self, wg: usize, inc: bool, count: u32) {
        assert!((24..=256).contains(&count) && count % 8 == 0, "setmaxnreg {count}: must be 24..=256, a multiple of 8");
        let (r, lw) = self.wg_in_block(wg);
        let now = self.pools[r].per_thread[lw];
        let p = &mut self.pools[r];
        if inc {
            assert!(
                count >= now,
                "setmaxnreg.inc {count} in warpgroup {wg}, which holds {now} registers per thread: an inc below the current count is undefined (PTX ISA)"
            );
            let n = 128 * (count - now) as u64;
            assert!(n <= p.free, "setmaxnreg.inc {count} ran with {} registers in the pool for {n}", p.free);
            p.free -= n;
            p.taken += n;
        } else {
            assert!(
                count <= now,
                "setmaxnreg.dec {count} in warpgroup {wg}, which holds {now} registers per thread: a dec above the current count is undefined (PTX ISA)"
            );
            let n = 128 * (now - count) as u64;
            p.free += n;
            p.released += n;
        }
        p.per_thread[lw] = count;
    }

    /// What warpgroup `wg` waiting at `setmaxnreg.inc count` lacks, in words.
    pub(super) fn setmaxnreg_report(&self, wg: usize, count: u32) -> String {
        let (r, lw) = self.wg_in_block(wg);
        let p = &self.pools[r];
        let now = p.per_thread[lw];
        let want = 128 * (count.saturating_sub(now)) as u64;
        format!(
            "waits at setmaxnreg.inc {count} for warpgroup {wg} (at {now} registers per thread): it needs 128 × ({count} − {now}) = {want} registers, the block's pool holds {} ({} short; entry {} per thread × {} threads at launch, {} released by setmaxnreg.dec, {} taken by setmaxnreg.inc)",
            p.free,
            want.saturating_sub(p.free),
            p.entry,
            self.block_threads,
            p.released,
            p.taken
        )
    }
}
