//! Pinning QEMU's threads to host CPUs: the spec's choice, the plan for a
//! host (pure), and applying it with sched_setaffinity, recorded either way.
//!
//! "auto": with at least vCPUs + 1 usable host CPUs, QEMU's other threads
//! (main loop, I/O) get the first and vCPU i the (i+2)-th, so no vCPU
//! shares a CPU with anything of QEMU's. With as many CPUs as vCPUs (this
//! 2-core host, 2 vCPUs) vCPU i gets the (i+1)-th alone — a vCPU no longer
//! migrates — and the other threads stay unpinned (no CPU is spare). With
//! fewer CPUs than vCPUs nothing is pinned: two vCPUs on one CPU would
//! serialise the guest.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::qmp::VcpuThread;

/// Why a `[vm] pin` cannot apply on this host, or why a thread stays
/// unpinned (the boot record keeps the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    #[error("unknown pin {0:?}: use \"auto\", \"off\" or a list of host CPUs")]
    UnknownWord(String),
    #[error("pin = \"off\"")]
    Off,
    #[error("no spare host CPU ({host} CPUs, {vcpus} vCPUs): each vCPU has one")]
    NoSpareCpu { host: usize, vcpus: u32 },
    #[error("{host} host CPUs for {vcpus} vCPUs: pinning would stack vCPUs on one CPU")]
    StackedVcpus { host: usize, vcpus: u32 },
    #[error("pin lists {listed} CPUs for {vcpus} vCPUs")]
    ShortList { listed: usize, vcpus: u32 },
    #[error("pin lists no CPU after the vCPUs'")]
    NoCpuForOthers,
    #[error("host CPU {cpu} is not one this host lets the testbed use ({allowed})")]
    NotAllowed { cpu: u32, allowed: String },
    #[error("{0:?} names a host CPU twice")]
    Twice(Vec<u32>),
    #[error(
        "{listed} host CPUs for {vcpus} vCPUs: one per vCPU, then any for QEMU's other threads"
    )]
    FewerThanVcpus { listed: usize, vcpus: u32 },
    #[error("CPU {cpu}: {source}")]
    CpuSet { cpu: u32, source: nix::Error },
    #[error("sched_setaffinity({tid}): {source}")]
    SetAffinity { tid: u32, source: nix::Error },
}

/// `[vm] pin`: "off" (the default), "auto", or host CPUs by vCPU.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "RawPin", into = "RawPin")]
pub enum PinSetting {
    #[default]
    Off,
    Auto,
    /// vCPU i on `cpus[i]`; entries left after the vCPUs take QEMU's other
    /// threads (unpinned if none are left).
    Cpus(Vec<u32>),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum RawPin {
    Word(String),
    Cpus(Vec<u32>),
}

impl TryFrom<RawPin> for PinSetting {
    type Error = PinError;
    fn try_from(r: RawPin) -> Result<Self, PinError> {
        match r {
            RawPin::Word(w) if w == "off" => Ok(PinSetting::Off),
            RawPin::Word(w) if w == "auto" => Ok(PinSetting::Auto),
            RawPin::Word(w) => Err(PinError::UnknownWord(w)),
            RawPin::Cpus(c) => Ok(PinSetting::Cpus(c)),
        }
    }
}

impl From<PinSetting> for RawPin {
    fn from(p: PinSetting) -> RawPin {
        match p {
            PinSetting::Off => RawPin::Word("off".into()),
            PinSetting::Auto => RawPin::Word("auto".into()),
            PinSetting::Cpus(c) => RawPin::Cpus(c),
        }
    }
}

impl fmt::Display for PinSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinSetting::Off => f.write_str("off"),
            PinSetting::Auto => f.write_str("auto"),
            PinSetting::Cpus(c) => write!(f, "{c:?}"),
        }
    }
}

/// Where each thread goes; `Err(reason)` where it stays unpinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinPlan {
    /// By vCPU index.
    pub vcpus: Vec<Result<u32, PinError>>,
    pub others: Result<Vec<u32>, PinError>,
}

impl PinPlan {
    fn none(vcpus: u32, why: PinError) -> PinPlan {
        PinPlan {
            vcpus: (0..vcpus).map(|_| Err(why.clone())).collect(),
            others: Err(why),
        }
    }
}

/// The plan for `vcpus` vCPUs on a host whose usable CPUs are `host`.
pub fn plan(setting: &PinSetting, vcpus: u32, host: &[u32]) -> PinPlan {
    let n = vcpus as usize;
    match setting {
        PinSetting::Off => PinPlan::none(vcpus, PinError::Off),
        PinSetting::Auto if host.len() > n => PinPlan {
            vcpus: host[1..=n].iter().map(|c| Ok(*c)).collect(),
            others: Ok(vec![host[0]]),
        },
        PinSetting::Auto if host.len() == n => PinPlan {
            vcpus: host.iter().map(|c| Ok(*c)).collect(),
            others: Err(PinError::NoSpareCpu {
                host: host.len(),
                vcpus,
            }),
        },
        PinSetting::Auto => PinPlan::none(
            vcpus,
            PinError::StackedVcpus {
                host: host.len(),
                vcpus,
            },
        ),
        PinSetting::Cpus(list) if list.len() < n => PinPlan::none(
            vcpus,
            PinError::ShortList {
                listed: list.len(),
                vcpus,
            },
        ),
        PinSetting::Cpus(list) => PinPlan {
            vcpus: list[..n].iter().map(|c| Ok(*c)).collect(),
            others: if list.len() > n {
                Ok(list[n..].to_vec())
            } else {
                Err(PinError::NoCpuForOthers)
            },
        },
    }
}

/// The CPUs this process may run on (its affinity: a cpuset or taskset
/// narrows the host).
pub fn host_cpus() -> Vec<u32> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count() as u32)
            .filter(|&c| set.is_set(c as usize).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Whether an explicit list fits this host: the message for a spec error.
pub fn check_list(list: &[u32], vcpus: u32, host: &[u32]) -> Result<(), PinError> {
    if let Some(&cpu) = list.iter().find(|c| !host.contains(c)) {
        return Err(PinError::NotAllowed {
            cpu,
            allowed: cpu_list(host),
        });
    }
    let mut seen = list.to_vec();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != list.len() {
        return Err(PinError::Twice(list.to_vec()));
    }
    if list.len() < vcpus as usize {
        return Err(PinError::FewerThanVcpus {
            listed: list.len(),
            vcpus,
        });
    }
    Ok(())
}

/// "0-1" or "0,2,5".
pub fn cpu_list(cpus: &[u32]) -> String {
    if cpus.len() > 1 && cpus.windows(2).all(|w| w[1] == w[0] + 1) {
        return format!("{}-{}", cpus[0], cpus[cpus.len() - 1]);
    }
    cpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// One QEMU thread as the boot record lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PinnedThread {
    /// The vCPU index; absent for QEMU's other threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu: Option<u32>,
    pub thread_id: u32,
    /// The host CPUs it may run on after pinning; empty when not pinned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_cpus: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_pinned: Option<String>,
}

/// A boot's pinning: what was asked and what each thread got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pinning {
    pub requested: String,
    pub host_cpus: Vec<u32>,
    /// By vCPU index.
    pub vcpus: Vec<PinnedThread>,
    /// QEMU's other threads (main loop, I/O, RCU) at the time of pinning;
    /// threads QEMU starts later inherit their creator's CPUs.
    pub others: Vec<PinnedThread>,
}

fn set_affinity(tid: u32, cpus: &[u32]) -> Result<(), PinError> {
    let mut set = nix::sched::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu as usize)
            .map_err(|source| PinError::CpuSet { cpu, source })?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid as i32), &set)
        .map_err(|source| PinError::SetAffinity { tid, source })
}

fn pin_one(vcpu: Option<u32>, tid: u32, target: Result<Vec<u32>, PinError>) -> PinnedThread {
    let (host_cpus, not_pinned) = match target.and_then(|c| set_affinity(tid, &c).map(|()| c)) {
        Ok(c) => (c, None),
        Err(why) => (Vec::new(), Some(why.to_string())),
    };
    PinnedThread {
        vcpu,
        thread_id: tid,
        host_cpus,
        not_pinned,
    }
}

/// Pins QEMU `pid`'s threads by `plan`; every thread is listed.
pub fn apply(pid: u32, vcpus: &[VcpuThread], setting: &PinSetting, host: &[u32]) -> Pinning {
    let p = plan(setting, vcpus.len() as u32, host);
    let vcpu_tids: Vec<u32> = vcpus.iter().map(|v| v.thread_id).collect();
    let pinned_vcpus = vcpus
        .iter()
        .zip(&p.vcpus)
        .map(|(v, t)| pin_one(Some(v.cpu_index), v.thread_id, t.clone().map(|c| vec![c])))
        .collect();
    let others = threads_of(pid)
        .into_iter()
        .filter(|t| !vcpu_tids.contains(t))
        .map(|t| pin_one(None, t, p.others.clone()))
        .collect();
    Pinning {
        requested: setting.to_string(),
        host_cpus: host.to_vec(),
        vcpus: pinned_vcpus,
        others,
    }
}

/// A boot whose vCPU threads could not be read (QMP failed): why.
pub fn unknown(setting: &PinSetting, host: &[u32], why: &str) -> Pinning {
    Pinning {
        requested: setting.to_string(),
        host_cpus: host.to_vec(),
        vcpus: Vec::new(),
        others: vec![PinnedThread {
            vcpu: None,
            thread_id: 0,
            host_cpus: Vec::new(),
            not_pinned: Some(format!("vCPU threads unknown: {why}")),
        }],
    }
}

fn threads_of(pid: u32) -> Vec<u32> {
    let mut t: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    t.sort_unstable();
    t
}

impl Pinning {
    /// "vCPU 0 (tid 123) → CPU 1, …; others → CPU 0" for people.
    pub fn describe(&self) -> String {
        let one = |t: &PinnedThread| match &t.not_pinned {
            Some(why) => format!("not pinned: {why}"),
            None => format!("CPU {}", cpu_list(&t.host_cpus)),
        };
        let mut parts: Vec<String> = self
            .vcpus
            .iter()
            .map(|t| {
                format!(
                    "vCPU {} (thread {}) → {}",
                    t.vcpu.unwrap_or(0),
                    t.thread_id,
                    one(t)
                )
            })
            .collect();
        if let Some(first) = self.others.first() {
            parts.push(format!(
                "{} other QEMU thread(s) → {}",
                self.others.len(),
                one(first)
            ));
        }
        format!("pin {}: {}", self.requested, parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_keeps_a_cpu_for_qemus_other_threads_when_there_is_one() {
        let p = plan(&PinSetting::Auto, 2, &[0, 1, 2, 3]);
        assert_eq!(p.vcpus, vec![Ok(1), Ok(2)]);
        assert_eq!(p.others, Ok(vec![0]));
        // Usable CPUs need not start at 0 (a cpuset).
        let p = plan(&PinSetting::Auto, 1, &[4, 6]);
        assert_eq!((p.vcpus, p.others), (vec![Ok(6)], Ok(vec![4])));
    }

    #[test]
    fn auto_on_as_many_cpus_as_vcpus_pins_only_the_vcpus() {
        let p = plan(&PinSetting::Auto, 2, &[0, 1]);
        assert_eq!(p.vcpus, vec![Ok(0), Ok(1)]);
        assert!(
            p.others
                .unwrap_err()
                .to_string()
                .contains("no spare host CPU")
        );
    }

    #[test]
    fn auto_on_too_few_cpus_pins_nothing_and_says_why() {
        let p = plan(&PinSetting::Auto, 4, &[0, 1]);
        assert_eq!(p.vcpus.len(), 4);
        for v in &p.vcpus {
            assert!(
                v.as_ref()
                    .unwrap_err()
                    .to_string()
                    .contains("2 host CPUs for 4 vCPUs")
            );
        }
        assert!(p.others.is_err());
    }

    #[test]
    fn off_and_lists() {
        let p = plan(&PinSetting::Off, 2, &[0, 1, 2]);
        assert!(p.vcpus.iter().all(|v| v.is_err()) && p.others.is_err());
        let p = plan(&PinSetting::Cpus(vec![3, 1, 0, 2]), 2, &[0, 1, 2, 3]);
        assert_eq!((p.vcpus, p.others), (vec![Ok(3), Ok(1)], Ok(vec![0, 2])));
        // A vm.vcpus sweep's larger boot than the list: not pinned.
        let p = plan(&PinSetting::Cpus(vec![1]), 2, &[0, 1]);
        assert!(
            p.vcpus[0]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("1 CPUs for 2 vCPUs")
        );
    }

    #[test]
    fn explicit_lists_are_checked_against_the_host() {
        assert_eq!(check_list(&[1, 0], 2, &[0, 1]), Ok(()));
        let e = check_list(&[0, 5], 2, &[0, 1]).unwrap_err().to_string();
        assert!(e.contains("host CPU 5") && e.contains("(0-1)"), "{e}");
        assert!(
            check_list(&[1, 1], 2, &[0, 1])
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        assert!(
            check_list(&[1], 2, &[0, 1])
                .unwrap_err()
                .to_string()
                .contains("1 host CPUs for 2 vCPUs")
        );
    }

    #[test]
    fn the_setting_reads_words_and_lists() {
        #[derive(Deserialize)]
        struct T {
            pin: PinSetting,
        }
        let t: T = toml::from_str("pin = \"auto\"").unwrap();
        assert_eq!(t.pin, PinSetting::Auto);
        let t: T = toml::from_str("pin = [1, 0]").unwrap();
        assert_eq!(t.pin, PinSetting::Cpus(vec![1, 0]));
        let e = toml::from_str::<T>("pin = \"on\"")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("use \"auto\", \"off\""), "{e}");
    }

    /// sched_setaffinity on a real thread of ours, read back.
    #[test]
    fn pinning_a_thread_is_read_back_from_the_kernel() {
        let host = host_cpus();
        let target = *host.last().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let got = pin_one(Some(0), tid, Ok(vec![target]));
        assert_eq!(got.host_cpus, vec![target], "{got:?}");
        let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(tid as i32)).unwrap();
        let now: Vec<u32> = (0..nix::sched::CpuSet::count() as u32)
            .filter(|&c| set.is_set(c as usize).unwrap())
            .collect();
        assert_eq!(now, vec![target]);
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }
}
