//! What the runner asks of every lookup engine (`read`, the io_uring
//! family, the two hooks and their io_uring forms): run lookups, each
//! verified against its key and recorded, and say what work it does
//! outside its lookup thread. An engine is one type implementing
//! [`LookupEngine`] and one arm of [`open`] (experiments/EXTENDING.md,
//! "Adding a lookup engine"); the runner, the cross-check and the reports
//! know engines through these alone.

use super::engine_hook::{HookEngine, HookMode};
use super::engine_hook_uring::HookUringEngine;
use super::engine_read::ReadEngine;
use super::engine_uring::{UringEngine, UringOptions};
use super::lookup::{Lookups, Plan};
use super::params::Engine;
use crate::workload::WorkloadError;

pub trait LookupEngine {
    /// Runs `n` lookups (back to back, or up to its batch in flight), each
    /// verified against its key and recorded in `rec`.
    fn run(&mut self, job: Lookups<'_>) -> Result<(), WorkloadError>;

    /// A kernel thread that works for this engine outside its lookup
    /// threads (the SQPOLL poller), whose CPU time is the engine's too.
    fn helper_thread(&self) -> Option<i32> {
        None
    }

    /// Reads done in the kernel since the last call (the hook engines).
    fn take_kernel_hops(&mut self) -> u64 {
        0
    }
}

/// Opens `engine` on the device at `path` for `plan`; `uring` holds the
/// io_uring options the spec gave (batch, registered buffers and file).
pub fn open(
    engine: Engine,
    path: &str,
    plan: &Plan,
    uring: UringOptions,
) -> Result<Box<dyn LookupEngine>, WorkloadError> {
    let batch = uring.batch;
    Ok(match engine {
        Engine::Read => Box::new(ReadEngine::open(path, plan)?),
        Engine::IoUring => Box::new(UringEngine::open(path, plan, uring)?),
        Engine::IoUringPoll | Engine::NvmePassthru | Engine::NvmePassthruPoll => {
            // Only the registered buffers carry over from the io-uring
            // options, and not to passthrough (its commands carry the
            // buffer's address).
            let passthru = engine.passes_through();
            let opts = UringOptions {
                sqpoll: false,
                iopoll: engine.polls(),
                passthru,
                registered_buffers: uring.registered_buffers && !passthru,
                ..uring
            };
            Box::new(UringEngine::open(path, plan, opts)?)
        }
        Engine::IoUringSqpoll => {
            let opts = UringOptions {
                sqpoll: true,
                registered_buffers: true,
                registered_file: true,
                ..uring
            };
            Box::new(UringEngine::open(path, plan, opts)?)
        }
        Engine::SyscallHook => Box::new(HookEngine::open(path, plan, HookMode::Syscall)?),
        Engine::NvmeHook => Box::new(HookEngine::open(path, plan, HookMode::Nvme)?),
        Engine::SyscallHookUring => Box::new(HookUringEngine::open(
            path,
            plan,
            HookMode::Syscall,
            batch,
        )?),
        Engine::NvmeHookUring => {
            Box::new(HookUringEngine::open(path, plan, HookMode::Nvme, batch)?)
        }
    })
}
