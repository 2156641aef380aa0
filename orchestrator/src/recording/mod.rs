//! Layer recording: what a run keeps: run directories, manifests, samples and
//! tables.
//! See the layer table in `src/lib.rs`.

pub mod results;
