//! Layer drawing: from raw samples to figures and claims: statistics and plots.
//! See the layer table in `src/lib.rs`.

pub mod analysis;
pub mod figures;
