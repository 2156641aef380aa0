//! Ctrl-C as a flag: the handler sets it and every wait loop (VM boots,
//! kernel and image builds, Slurm waits) checks it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the Ctrl-C handler.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
