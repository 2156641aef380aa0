//! Helpers shared by test binaries (each includes this with `mod common;`).

pub mod host_load;
