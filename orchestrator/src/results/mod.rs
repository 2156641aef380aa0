//! A run directory: per-point sample files written atomically as points
//! finish, merged into samples.parquet; the manifest; resume state.

pub mod manifest;
pub mod rundir;
pub mod samples;
