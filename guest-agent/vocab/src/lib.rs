//! The vocabulary the agent and its helper binaries share. [`request`]:
//! what the agent asks a helper to do, one typed request per command (the
//! same types derive the helper's command line). The other modules: the
//! JSON lines the helper binaries print on stdout and the agent reads,
//! one serde type per kind of line. The helpers serialise these types and
//! the agent deserialises the same ones, so the two sides cannot drift
//! apart, while the agent depends on nothing but serde (its static binary
//! stays free of arrow, tonic and tokio: it runs the helpers as child
//! processes).
//!
//! Where a field has a richer type in the helper (an enum with clap
//! derives, the transport settings), the line type takes it as a type
//! parameter: the helper fills in its own type, the agent reads the
//! default (a `String` or a `serde_json::Value` it records as is). Both
//! serialise to the same JSON.
//!
//! - [`flight`]: `testbed-flight serve`, `bench --json`, `query --json`.
//! - [`asam`]: `testbed-asam prepare`, `bench-preproc --json`.
//! - [`asam_workflow`]: `testbed-asam workflow --json`.
//!
//! Layers, lowest first (a module uses its own layer and lower ones;
//! orchestrator/tests/layers.rs checks every `crate::` path against this):
//! - requests: protocol, request
//! - lines: asam, asam_workflow, flight, taxi

pub mod asam;
pub mod asam_workflow;
pub mod flight;
pub mod protocol;
pub mod request;
pub mod taxi;
