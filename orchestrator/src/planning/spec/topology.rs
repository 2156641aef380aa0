//! `[topology]`: two VMs on one virtual link; its check.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// A server VM and a client VM joined by a QEMU socket link; the points
    /// run on the client, `{peer}` in the workload is the server's address.
    Pair,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub kind: TopologyKind,
    /// Link-local addresses: the link never touches a host network.
    #[serde(default = "default_server_address")]
    pub server_address: String,
    #[serde(default = "default_client_address")]
    pub client_address: String,
    /// The workload the server VM runs once per boot before any point
    /// (a service that keeps running, e.g. kind = "flight-serve").
    pub server: toml::Table,
}

fn default_server_address() -> String {
    "169.254.10.1/16".into()
}
fn default_client_address() -> String {
    "169.254.10.2/16".into()
}

/// `[topology]`: a pair of VMs needs the qemu executor.
pub(super) fn check_topology(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let spec = &loaded.spec;
    if spec.topology.is_some() && spec.experiment.executor != ExecutorKind::Qemu {
        return Err(loaded.error_at(
            "topology",
            Some("kind"),
            "a pair topology needs executor = \"qemu\"",
        ));
    }
    Ok(())
}
