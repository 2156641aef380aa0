//! Helpers shared by test binaries (each includes this with `mod common;`).

// Not every binary uses every helper.
#[allow(dead_code)]
pub mod host_load;
#[allow(dead_code)]
pub mod slurm;
#[allow(dead_code)]
pub mod synthetic;
