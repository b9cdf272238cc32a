//! The text form of the Tile IR (placeholder).
use crate::ir::Kernel;

pub fn print_kernel(kernel: &Kernel) -> String {
    format!("{kernel:#?}")
}
