//! The agent proper: PID 1 duties in a VM, device discovery, and the
//! protocol loop that runs jobs (shared by the VM and `--stdio` modes).

pub mod devices;
pub mod init;
pub mod rootfs;
pub mod serve;
