//! Why a schedule does not take a kernel: a sentence a user can read
//! (`TILE_DUMP` prints one per schedule, [`super::describe_decisions`]).

/// A schedule's refusal of a kernel, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotApplicable {
    /// What the kernel lacks, e.g. "the pipelined loop's body has a
    /// `parallel` loop; the warp-specialized GEMM takes only copies and
    /// gemms".
    pub reason: String,
}

impl NotApplicable {
    /// A refusal for `reason`.
    pub fn new(reason: impl Into<String>) -> NotApplicable {
        NotApplicable { reason: reason.into() }
    }
}

impl std::fmt::Display for NotApplicable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for NotApplicable {}
