//! `muster-bench`: measured comparisons (to be written).

fn main() {}
