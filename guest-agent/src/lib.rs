//! testbed guest agent library.
//!
//! Holds the host<->guest protocol types (shared with the orchestrator), the
//! workload parameter types a spec deserialises into, and the workloads
//! themselves, each as a plain library API that runs on the host too.
//!
//! Layers, lowest first (a module uses its own layer and lower ones;
//! orchestrator/tests/layers.rs checks every `crate::` path against this):
//! - base: text, bpf
//! - workloads: workload
//! - channel: protocol
//! - runtime: agent

pub mod agent;
pub mod bpf;
pub mod protocol;
pub mod text;
pub mod workload;
