//! What every workload declares, and the macro that registers one.
//!
//! Adding a workload is one module that implements [`WorkloadParams`] and
//! one line in the `workloads!` list of `workload/mod.rs`: the host learns
//! from these declarations which helper binaries, BPF programs and host
//! tools a spec needs, and which metrics its figures may use.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{JobContext, ParamError, Summary, WorkloadError};
use testbed_vocab::protocol::DeviceRef;

/// One workload kind's parameter type: validation, the code that runs it,
/// and what it needs from the host.
pub trait WorkloadParams {
    /// Checks the parameters against the spec's devices, before boot.
    fn validate(&self, devices: &BTreeMap<String, DeviceRef>) -> Result<(), ParamError>;
    /// Runs one point in the guest (or on the host in tests).
    fn run(&self, ctx: &JobContext) -> Result<Summary, WorkloadError>;
    /// Helper binaries, image contents and host tools it needs.
    fn needs(&self) -> Needs {
        Needs::default()
    }
    /// The metrics it emits: raw samples and summary numbers.
    fn metrics(&self) -> Vec<MetricInfo>;
    /// Lines `testbed show` prints under the point, from its summary
    /// (beyond the headline numbers every point shows).
    fn show_lines(&self, _summary: &Summary) -> Vec<String> {
        Vec::new()
    }
    /// Summary keys written `<scope>.<metric>` (e.g. `read.lookups_per_s`):
    /// the tag the scope is (e.g. "engine") and its values at this point.
    /// The host splits such keys into a metric and a `tag_<name>` column.
    fn summary_scopes(&self) -> Option<(&'static str, Vec<String>)> {
        None
    }
}

/// What a point needs beyond the agent and a kernel.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Needs {
    /// Binaries the agent runs as child processes; they go into the image.
    pub helpers: Vec<Helper>,
    /// Steps of orchestrator/host-tools.txt (NEEDS column) that must be
    /// installed on the host, e.g. "postgres".
    pub host_steps: Vec<&'static str>,
    /// The storage-hook BPF programs (ebpf-programs/), built for the kernel.
    pub bpf_programs: bool,
    /// Kernel options that must be built in (=y), with what each is for;
    /// the host checks the kernel's .config before boot.
    pub kernel_options: Vec<(&'static str, &'static str)>,
}

/// A binary of this workspace that runs in the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Helper {
    /// Cargo package that builds it.
    pub package: &'static str,
    /// Binary name, in the image under /bin.
    pub binary: &'static str,
    /// Overrides where it is found (host: the file to put in the image;
    /// guest and tests: the file to run).
    pub env: &'static str,
    /// Linked dynamically (built for the host, not static): it runs in a
    /// guest only on a Debian root image that has its libraries.
    pub dynamic: bool,
}

impl Helper {
    /// `$env`, then the binary on PATH, then /bin.
    pub fn find(&self) -> Option<PathBuf> {
        super::child::find_binary(self.env, self.binary)
    }

    /// The error when [`Helper::find`] found nothing.
    pub fn not_found(&self) -> WorkloadError {
        WorkloadError::Other(format!(
            "{} not found (${}, PATH, /bin); put it in the image",
            self.binary, self.env
        ))
    }
}

pub const AGENT: Helper = Helper {
    package: "testbed-agent",
    binary: "testbed-agent",
    env: "TESTBED_AGENT_BIN",
    dynamic: false,
};
pub const FLIGHT: Helper = Helper {
    package: "testbed-flight",
    binary: "testbed-flight",
    env: "TESTBED_FLIGHT_BIN",
    dynamic: false,
};
pub const ASAM: Helper = Helper {
    package: "testbed-asam",
    binary: "testbed-asam",
    env: "TESTBED_ASAM_BIN",
    dynamic: false,
};

/// The query comparison's ODBC clients: libodbc is linked and psqlODBC
/// dlopened, which a static binary cannot do.
pub const ODBC: Helper = Helper {
    package: "testbed-odbc",
    binary: "testbed-odbc",
    env: "TESTBED_ODBC_BIN",
    dynamic: true,
};

/// A metric a workload emits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricInfo {
    pub name: &'static str,
    pub unit: &'static str,
    /// A per-point summary number (summary.parquet) rather than raw
    /// samples (samples.parquet).
    pub summary: bool,
    /// Tags its rows carry (`tag_<name>` columns).
    pub tags: &'static [&'static str],
}

impl MetricInfo {
    pub const fn raw(
        name: &'static str,
        unit: &'static str,
        tags: &'static [&'static str],
    ) -> Self {
        MetricInfo {
            name,
            unit,
            summary: false,
            tags,
        }
    }
    pub const fn summary(
        name: &'static str,
        unit: &'static str,
        tags: &'static [&'static str],
    ) -> Self {
        MetricInfo {
            name,
            unit,
            summary: true,
            tags,
        }
    }
}

/// Declares the workload modules and builds the `Workload` enum (tagged by
/// `kind` in a spec) over their parameter types.
macro_rules! workloads {
    ($( mod $m:ident { $( $(#[$doc:meta])* $variant:ident ( $ty:ident ) = $kind:literal ),+ $(,)? } )+) => {
        $(pub mod $m;)+

        /// The `[workload]` table of a spec, tagged by `kind`.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind")]
        pub enum Workload {
            $($( $(#[$doc])* #[serde(rename = $kind)] $variant($m::$ty), )+)+
        }

        impl Workload {
            /// Every registered kind, as a spec names it.
            pub const KINDS: &'static [&'static str] = &[$($($kind),+),+];

            pub fn kind(&self) -> &'static str {
                match self {
                    $($(Workload::$variant(_) => $kind,)+)+
                }
            }

            /// The parameters behind the registry's trait.
            pub fn params(&self) -> &dyn WorkloadParams {
                match self {
                    $($(Workload::$variant(p) => p,)+)+
                }
            }
        }
    };
}
pub(crate) use workloads;
