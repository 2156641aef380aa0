//! QEMU: the command line (pure), the process, the agent channel, and the
//! accelerator decision.

pub mod accel;
pub mod argv;
pub mod channel;
pub mod pin;
pub mod process;
pub mod qmp;

use std::path::PathBuf;

/// The QEMU binary: $TESTBED_QEMU or qemu-system-x86_64 on PATH.
pub fn qemu_binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("TESTBED_QEMU") {
        return Some(PathBuf::from(p));
    }
    crate::host::hosttools::find_program("qemu-system-x86_64")
}
