//! A run directory: per-point sample files written atomically as points
//! finish, merged into samples.parquet; summary.parquet from the point
//! records; the manifest; resume state. The schema is in results/README.md.

pub mod columns;
pub mod integrity;
pub mod levels;
pub mod manifest;
pub mod merge;
pub mod outputs;
pub mod pack;
pub mod rundir;
pub mod samples;
pub mod spill;
pub mod summary_table;
pub mod upgrade;
