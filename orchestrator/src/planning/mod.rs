//! Layer planning: what to run: the spec read from TOML and the plan of points
//! made from it.
//! See the layer table in `src/lib.rs`.

pub mod plan;
pub mod spec;
