//! Schedules: the named ways this compiler turns one kernel into warp roles,
//! pipelines and instruction choices. Each is one folder or file:
//!
//! | schedule | file | needs | applies when |
//! |---|---|---|---|
//! | `warp_specialized_gemm` | `warp_specialized_gemm/` | sm_90a, TMA-addressable tensors | one pipelined GEMM main loop of TMA-able copies and gemms ([`warp_specialized_gemm::plan`]) |
//! | `warp_specialized_loop_persistent` | `warp_specialized_loop/persistent.rs` | sm_90a, TMA-addressable tensors | what `warp_specialized_loop` takes, with block indices and no cluster ([`warp_specialized_loop::plan_persistent`]) |
//! | `warp_specialized_loop` | `warp_specialized_loop/` | sm_90a, TMA-addressable tensors | one top-level pipelined loop of any body whose pipelined copies TMA can do ([`warp_specialized_loop::plan`]) |
//! | `tma_copy` | `tma_copy.rs` | sm_90a, TMA-addressable tensors | a pipelined loop with copies TMA can do |
//! | `cp_async_pipeline` | `cp_async_pipeline/` | any tensors | a loop the pipeline analysis takes |
//! | `general` | `general.rs` | any tensors | always |
//!
//! Expects verified kernels. A schedule's [`Schedule::plan`] says whether it
//! takes a kernel, and why not ([`NotApplicable`]); [`Plan::compile`] turns
//! the plan into a [`Compiled`] through the lowering core
//! ([`crate::passes::lower`]), into which the schedule plugs its hooks
//! (`ScheduleLowering`), and the back end (`crate::compiled::finish`).
//! Guarantees that every schedule's variant computes what the general one
//! does; they differ in speed and in what they need of the arguments.
//!
//! [`Schedule::PREFERENCE`] is the one list, in preference order, that
//! [`crate::compile_variants`] walks: every schedule that needs
//! TMA-addressable tensors and applies adds a variant; the first one that
//! runs on any tensors ends the list. Data flows one way: the schedules
//! depend on the core and the passes, the driver ([`mod@crate::compile`]) on
//! the schedules.

pub mod cp_async_pipeline;
pub mod general;
mod not_applicable;
pub mod tma_copy;
pub mod warp_specialized_gemm;
pub mod warp_specialized_loop;

pub use not_applicable::NotApplicable;

use crate::compiled::{CompileOptions, Compiled};
use crate::ir::Kernel;
use crate::passes::pipeline::PipelinePlan;
use crate::{CompileError, Target};
use warp_specialized_gemm::WsPlan;
use warp_specialized_loop::WslPlan;

/// A schedule, by name.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Schedule {
    /// A producer warpgroup issuing TMA, consumers running wgmma
    /// ([`warp_specialized_gemm`]); with the TMA-store and persistent options.
    WarpSpecializedGemm,
    /// [`Schedule::WarpSpecializedLoop`] over a persistent grid: each block
    /// loops over the grid's blocks as tiles, loading the next tile while it
    /// finishes this one ([`warp_specialized_loop::plan_persistent`]).
    WarpSpecializedLoopPersistent,
    /// A producer warpgroup issuing a pipelined loop's TMA copies, consumers
    /// running the rest of the kernel ([`warp_specialized_loop`]).
    WarpSpecializedLoop,
    /// The cp.async pipeline with its TMA-able copies as TMA boxes ([`tma_copy`]).
    TmaCopy,
    /// The general lowering with its loops software-pipelined by cp.async
    /// ([`cp_async_pipeline`]).
    CpAsyncPipeline,
    /// The general lowering ([`general`]).
    General,
}

impl Schedule {
    /// Every schedule, preferred first: the order of a kernel's variants.
    pub const PREFERENCE: [Schedule; 6] = [
        Schedule::WarpSpecializedGemm,
        Schedule::WarpSpecializedLoopPersistent,
        Schedule::WarpSpecializedLoop,
        Schedule::TmaCopy,
        Schedule::CpAsyncPipeline,
        Schedule::General,
    ];

    /// The name [`Compiled::schedule`] carries.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::WarpSpecializedGemm => warp_specialized_gemm::NAME,
            Schedule::WarpSpecializedLoopPersistent => warp_specialized_loop::PERSISTENT_NAME,
            Schedule::WarpSpecializedLoop => warp_specialized_loop::NAME,
            Schedule::TmaCopy => tma_copy::NAME,
            Schedule::CpAsyncPipeline => cp_async_pipeline::NAME,
            Schedule::General => general::NAME,
        }
    }

    /// The schedule named `name` ([`Schedule::name`]).
    pub fn from_name(name: &str) -> Option<Schedule> {
        Schedule::PREFERENCE.into_iter().find(|s| s.name() == name)
    }

    /// Whether its variant takes tensor maps, so that the runtime may
    /// launch it only when the mapped tensors are TMA-addressable
    /// ([`crate::abi::tma_addressable`]); the others run on any tensors.
    pub fn needs_tma(self) -> bool {
        matches!(
            self,
            Schedule::WarpSpecializedGemm
                | Schedule::WarpSpecializedLoopPersistent
                | Schedule::WarpSpecializedLoop
                | Schedule::TmaCopy
        )
    }

    /// Whether (and how) this schedule takes `kernel` on `target`.
    /// `options` is for schedules whose applicability depends on them: the
    /// warp-specialized loop's ([`CompileOptions::wsloop_one_warpgroup`]);
    /// the warp-specialized GEMM's TMA-store and persistent options shape
    /// its variant only ([`Plan::compile`]).
    pub fn plan(self, kernel: &Kernel, target: Target, options: CompileOptions) -> Result<Plan, NotApplicable> {
        match self {
            Schedule::WarpSpecializedGemm => {
                warp_specialized_gemm::plan(kernel, target).map(|p| Plan::WarpSpecializedGemm(Box::new(p)))
            }
            Schedule::WarpSpecializedLoopPersistent => warp_specialized_loop::plan_persistent(kernel, target, options)
                .map(|p| Plan::WarpSpecializedLoop(Box::new(p))),
            Schedule::WarpSpecializedLoop => {
                warp_specialized_loop::plan(kernel, target, options).map(|p| Plan::WarpSpecializedLoop(Box::new(p)))
            }
            Schedule::TmaCopy => tma_copy::plan(kernel, target).map(Plan::TmaCopy),
            Schedule::CpAsyncPipeline => cp_async_pipeline::plan(kernel).map(Plan::CpAsyncPipeline),
            Schedule::General => Ok(Plan::General),
        }
    }
}

/// A schedule's decision to take a kernel, with what it found.
#[derive(Clone, Debug)]
pub enum Plan {
    /// [`Schedule::WarpSpecializedGemm`]: the producer's TMA operands, the gemms and options.
    WarpSpecializedGemm(Box<WsPlan>),
    /// [`Schedule::WarpSpecializedLoop`] or its persistent variant ([`WslPlan::persistent`]): the loop, its producer's copies and what it computes.
    WarpSpecializedLoop(Box<WslPlan>),
    /// The pipeline analysis (TMA or not is decided per copy while lowering).
    TmaCopy(PipelinePlan),
    /// [`Schedule::CpAsyncPipeline`]: the pipeline analysis.
    CpAsyncPipeline(PipelinePlan),
    /// [`Schedule::General`]: nothing to plan.
    General,
}

impl Plan {
    /// The schedule that made the plan.
    pub fn schedule(&self) -> Schedule {
        match self {
            Plan::WarpSpecializedGemm(_) => Schedule::WarpSpecializedGemm,
            Plan::WarpSpecializedLoop(p) if p.persistent => Schedule::WarpSpecializedLoopPersistent,
            Plan::WarpSpecializedLoop(_) => Schedule::WarpSpecializedLoop,
            Plan::TmaCopy(_) => Schedule::TmaCopy,
            Plan::CpAsyncPipeline(_) => Schedule::CpAsyncPipeline,
            Plan::General => Schedule::General,
        }
    }

    /// Compiles `kernel` (the one planned) with this schedule. The
    /// TMA-copy schedule errors when none of the pipelined copies became
    /// TMA boxes (that depends on the shared layouts, known only here).
    pub fn compile(
        &self,
        kernel: &Kernel,
        target: Target,
        options: CompileOptions,
    ) -> Result<Compiled, Vec<CompileError>> {
        match self {
            Plan::WarpSpecializedGemm(ws) => {
                warp_specialized_gemm::compile_planned(kernel, target, options, ws.as_ref().clone())
            }
            Plan::WarpSpecializedLoop(wsl) => {
                warp_specialized_loop::compile_planned(kernel, target, options, wsl.as_ref().clone())
            }
            Plan::TmaCopy(_) => tma_copy::compile(kernel, target, options),
            Plan::CpAsyncPipeline(_) | Plan::General => general::compile(kernel, target, options),
        }
    }
}

/// Every schedule's decision for `kernel` on `target`, in preference order:
/// `Ok` when it takes the kernel, else the reason it does not.
pub fn decisions(
    kernel: &Kernel,
    target: Target,
    options: CompileOptions,
) -> Vec<(Schedule, Result<(), NotApplicable>)> {
    Schedule::PREFERENCE.into_iter().map(|s| (s, s.plan(kernel, target, options).map(|_| ()))).collect()
}

/// [`decisions`] as text, one line per schedule (for `TILE_DUMP`):
/// `warp_specialized_gemm: applies` or `tma_copy: not applicable: <reason>`.
pub fn describe_decisions(kernel: &Kernel, target: Target, options: CompileOptions) -> String {
    let mut out = String::new();
    for (s, d) in decisions(kernel, target, options) {
        match d {
            Ok(()) => out.push_str(&format!("{}: applies\n", s.name())),
            Err(na) => out.push_str(&format!("{}: not applicable: {}\n", s.name(), na.reason)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! The kernels here are ones the integration tests compile too (so that
    //! the PTX snapshot of the suite stays the same set of modules).
    use super::*;
    use crate::print::parse_kernel;

    /// The example GEMM configuration of `tests/hopper_ws.rs`: 128×256×64,
    /// 3 stages, 256 threads (every schedule takes it on sm_90a).
    const MATMUL: &str = "kernel matmul<%0 M, %1 K, %2 N>(@0 a: &f16[M, K], @1 b: &f16[K, N], @2 c: &mut f16[M, N]) threads=256 grid=((N + 255) / 256, (M + 127) / 128, 1) swizzle=8 {
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared f16[128, 64]
  @4 b_s: shared f16[64, 256]
  @5 acc: fragment f32[128, 256]
  fill acc, 0.0
  for %5 k in pipelined(3) 0..(K + 63) / 64 {
    copy a[by * 128, k * 64] -> a_s
    copy b[k * 64, bx * 256] -> b_s
    gemm a_s, b_s -> acc
  }
  copy acc -> c[by * 128, bx * 256]
}";

    /// `tests/codegen_tma_copy.rs`'s GEMM (128 threads, 64×64×64 tiles, 3
    /// stages): its pipelined loop is inside another loop, and it says
    /// `warp_specialize=false`.
    const NESTED: &str = "kernel g<%0 M, %1 K, %2 N>(@0 a: &f16[M, K], @1 b: &f16[K, N], @2 c: &mut f32[M, N]) threads=128 grid=((N + 63) / 64, (M + 63) / 64, 1) warp_specialize=false {
  %3 bx = block_idx.x
  %4 by = block_idx.y
  @3 a_s: shared f16[64, 64]
  @4 b_s: shared f16[64, 64]
  @5 acc: fragment f32[64, 64]
  for %6 r in 0..1 {
    fill acc, 0.0
    for %5 k in pipelined(3) 0..(K + 63) / 64 {
      copy a[by * 64, k * 64] -> a_s
      copy b[k * 64, bx * 64] -> b_s
      gemm a_s, b_s -> acc
    }
  }
  copy acc -> c[by * 64, bx * 64]
}";

    /// `tests/codegen_epilogue.rs`'s tile copy: no loop at all.
    const ADD: &str = "kernel add<%0 M, %1 N>(@0 x: &f32[M, N], @1 y: &mut f32[M, N]) threads=128 grid=((N + 63) / 64, (M + 15) / 16, 1) {
  %2 bx = block_idx.x
  %3 by = block_idx.y
  @2 t: fragment f32[16, 64]
  copy x[by * 16, bx * 64] -> t
  copy t -> y[by * 16, bx * 64]
}";

    fn kernel(text: &str) -> Kernel {
        parse_kernel(text).unwrap_or_else(|e| panic!("{e:?}\n{text}"))
    }

    fn reason(s: Schedule, k: &Kernel, target: Target) -> String {
        match s.plan(k, target, CompileOptions::default()) {
            Ok(_) => panic!("{} takes the kernel", s.name()),
            Err(na) => na.reason,
        }
    }

    fn names(k: &Kernel, target: Target) -> Vec<&'static str> {
        let v = crate::compile_variants(k, target, CompileOptions::default()).unwrap();
        v.iter().map(|c| c.schedule).collect()
    }

    #[test]
    fn names_round_trip_in_preference_order() {
        let names: Vec<&str> = Schedule::PREFERENCE.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "warp_specialized_gemm",
                "warp_specialized_loop_persistent",
                "warp_specialized_loop",
                "tma_copy",
                "cp_async_pipeline",
                "general"
            ]
        );
        for s in Schedule::PREFERENCE {
            assert_eq!(Schedule::from_name(s.name()), Some(s));
        }
        assert_eq!(Schedule::from_name("ws"), None);
    }

    #[test]
    fn compile_variants_names_its_variants() {
        let matmul = kernel(MATMUL);
        assert_eq!(names(&matmul, Target::Sm90a), ["warp_specialized_gemm", "tma_copy", "cp_async_pipeline"]);
        assert_eq!(names(&matmul, Target::Sm80), ["cp_async_pipeline"]);
        let nested = kernel(NESTED);
        assert_eq!(names(&nested, Target::Sm90a), ["tma_copy", "cp_async_pipeline"]);
        assert_eq!(names(&nested, Target::Sm80), ["cp_async_pipeline"]);
        let add = kernel(ADD);
        assert_eq!(names(&add, Target::Sm80), ["general"]);
        // One compile names its own schedule too.
        assert_eq!(crate::compile(&add, Target::Sm80).unwrap().schedule, "general");
        assert_eq!(crate::compile(&nested, Target::Sm80).unwrap().schedule, "cp_async_pipeline");
    }

    /// Every schedule but the warp-specialized loop takes the example GEMM
    /// on sm_90a; that one leaves it to the warp-specialized GEMM.
    #[test]
    fn every_schedule_takes_the_example_gemm_on_sm90a() {
        let k = kernel(MATMUL);
        for (s, d) in decisions(&k, Target::Sm90a, CompileOptions::default()) {
            if !matches!(s, Schedule::WarpSpecializedLoop | Schedule::WarpSpecializedLoopPersistent) {
                assert_eq!(d, Ok(()), "{}", s.name());
            }
        }
        assert_eq!(
            describe_decisions(&k, Target::Sm90a, CompileOptions::default()),
            "warp_specialized_gemm: applies\nwarp_specialized_loop_persistent: not applicable: the warp-specialized GEMM takes this kernel (its loop is only TMA copies and gemms)\nwarp_specialized_loop: not applicable: the warp-specialized GEMM takes this kernel (its loop is only TMA copies and gemms)\ntma_copy: applies\ncp_async_pipeline: applies\ngeneral: applies\n"
        );
    }

    #[test]
    fn schedules_say_why_they_refuse() {
        let matmul = kernel(MATMUL);
        assert!(reason(Schedule::WarpSpecializedGemm, &matmul, Target::Sm80).contains("needs sm_90a, not sm_80"));
        assert!(reason(Schedule::TmaCopy, &matmul, Target::Sm80).contains("TMA needs sm_90a"));
        let nested = kernel(NESTED);
        assert!(reason(Schedule::WarpSpecializedGemm, &nested, Target::Sm90a).contains("`warp_specialize = false`"));
        let mut on = nested.clone();
        on.warp_specialize = true;
        assert!(
            reason(Schedule::WarpSpecializedGemm, &on, Target::Sm90a).contains("no `pipelined` loop at the top level")
        );
        let barrier = kernel(&MATMUL.replace("gemm a_s, b_s -> acc", "gemm a_s, b_s -> acc\n    barrier"));
        assert!(reason(Schedule::WarpSpecializedGemm, &barrier, Target::Sm90a)
            .contains("statement other than a copy or a gemm; the warp-specialized GEMM takes only copies and gemms"));
        let add = kernel(ADD);
        assert!(reason(Schedule::CpAsyncPipeline, &add, Target::Sm90a).contains("no `pipelined(n, stages)` loop"));
        assert!(reason(Schedule::TmaCopy, &add, Target::Sm90a).contains("no `pipelined(n, stages)` loop"));
        let text = describe_decisions(&add, Target::Sm80, CompileOptions::default());
        assert!(text.starts_with("warp_specialized_gemm: not applicable: warp specialization needs sm_90a"), "{text}");
        assert!(
            text.contains("\ncp_async_pipeline: not applicable: the kernel has no `pipelined(n, stages)` loop"),
            "{text}"
        );
        assert!(text.ends_with("\ngeneral: applies\n"), "{text}");
    }
}
