//! Genomics over Flight (the flight-genomics figure): region-partitioned
//! ArrowSAM batches (testbed-asam) moved from a sending node to a
//! receiving node, then sorted and duplicate-marked per region on the
//! receiver; against moving the same records as BAM over the same link.
//!
//! - [`partition`]: the genome cut into equal spans, a pair kept together.
//! - [`receiver`]: `genomics-serve`, a DoPut-only Flight server and a BAM
//!   TCP listener; both reply "received" then "processed".
//! - [`sender`]: `genomics-send`, every pipeline × repetition, checked.
//! - [`bam`]: the BAM encoding and its decoding into ArrowSAM.
//! - [`process`]: the receiver's sort + duplicate marking, and the
//!   checksum of its output.

pub mod bam;
pub mod cli;
pub mod partition;
pub mod process;
pub mod receiver;
pub mod sender;
