//! Layer host: the host system: units, paths, files, locks, interrupts,
//! waiting, randomness, phase times, failure records, progress bars, host
//! tools, facts from /proc, containment by cgroup, limits the kernel enforces, the CLI's stdout.
//! See the layer table in `src/lib.rs`.

pub mod cgroup;
pub mod failures;
pub mod fsutil;
pub mod hosttools;
pub mod interrupt;
pub mod kernel_limits;
pub mod lock;
pub mod paths;
pub mod phases;
pub mod procfs;
pub mod progress;
pub mod random;
pub mod stdout;
pub mod units;
pub mod wait;
