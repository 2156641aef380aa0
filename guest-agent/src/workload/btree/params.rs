//! `[workload] kind = "btree"`: parameters, defaults and pre-boot validation.
//! `resolve` turns parameters plus the device into the exact lookup plan, so
//! validation and the run compute sizes in one place.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::descriptor::{DESCRIPTOR_SIZE, descriptor_offset};
use super::layout::{Layout, MAX_DEPTH, fanout, max_keys};
use super::lookup::{Plan, TreePlan};
use super::lookup_ring::MAX_BATCH;
use super::synthetic::Chain;
use testbed_vocab::protocol::DeviceRef;
use crate::workload::{ParamError, defaults};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// pread with O_DIRECT, one lookup at a time per thread.
    Read,
    /// One io_uring per thread, `batch` lookups in flight.
    #[serde(alias = "io_uring")]
    IoUring,
    /// As io-uring on an IOPOLL ring: completions are polled from the
    /// device's poll queues (the guest boots with `nvme.poll_queues=N`),
    /// no interrupt.
    IoUringPoll,
    /// As io-uring with a kernel thread polling the submission queue
    /// (SQPOLL), the device and the buffers registered with the ring: no
    /// system call and no per-request file or buffer lookup.
    IoUringSqpoll,
    /// NVMe Read commands through io_uring (`IORING_OP_URING_CMD`) on the
    /// namespace's generic char device: no bio, no block layer.
    NvmePassthru,
    /// As nvme-passthru on an IOPOLL ring (needs poll queues).
    NvmePassthruPoll,
    /// chained_read(2) per lookup; the kernel re-issues from the syscall layer.
    SyscallHook,
    /// chained_read(2) per lookup; re-issued from the NVMe completion handler.
    NvmeHook,
    /// IORING_OP_CHAINED_READ, syscall-layer re-issue (run by io-wq).
    SyscallHookUring,
    /// IORING_OP_CHAINED_READ, NVMe-completion re-issue, `batch` in flight.
    NvmeHookUring,
}

impl Engine {
    /// Name used in sample tags and summary key prefixes.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Read => "read",
            Engine::IoUring => "io-uring",
            Engine::IoUringPoll => "io-uring-poll",
            Engine::IoUringSqpoll => "io-uring-sqpoll",
            Engine::NvmePassthru => "nvme-passthru",
            Engine::NvmePassthruPoll => "nvme-passthru-poll",
            Engine::SyscallHook => "syscall-hook",
            Engine::NvmeHook => "nvme-hook",
            Engine::SyscallHookUring => "syscall-hook-uring",
            Engine::NvmeHookUring => "nvme-hook-uring",
        }
    }

    /// A storage-hook engine: needs the vm-hooks kernel and its BPF programs.
    pub fn is_hook(self) -> bool {
        !self.is_user_space()
    }

    /// Reads issued from user space alone (the baselines of the hooks).
    pub fn is_user_space(self) -> bool {
        matches!(
            self,
            Engine::Read
                | Engine::IoUring
                | Engine::IoUringPoll
                | Engine::IoUringSqpoll
                | Engine::NvmePassthru
                | Engine::NvmePassthruPoll
        )
    }

    /// Completes by polling the device's queue: needs poll queues.
    pub fn polls(self) -> bool {
        matches!(self, Engine::IoUringPoll | Engine::NvmePassthruPoll)
    }

    /// Sends NVMe commands to the namespace's char device.
    pub fn passes_through(self) -> bool {
        matches!(self, Engine::NvmePassthru | Engine::NvmePassthruPoll)
    }

    /// Keeps `batch` lookups in flight on an io_uring.
    pub fn uses_ring(self) -> bool {
        matches!(
            self,
            Engine::IoUring
                | Engine::IoUringPoll
                | Engine::IoUringSqpoll
                | Engine::NvmePassthru
                | Engine::NvmePassthruPoll
                | Engine::SyscallHookUring
                | Engine::NvmeHookUring
        )
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Real B+-tree lookups on a built image.
    #[default]
    Tree,
    /// HotOS chains: `depth` dependent reads at seeded random offsets, no data.
    Synthetic,
    /// Builds the tree, then tries to break the storage hooks (no lookups).
    HookSafety,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuildPolicy {
    Always,
    /// Skip the build when the descriptor says the device holds this tree.
    #[default]
    IfNeeded,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BtreeParams {
    /// Name of the `[[devices]]` entry holding the tree.
    pub device: String,
    /// One engine; `engines` runs several interleaved in one job instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Engine>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engines: Option<Vec<Engine>>,
    #[serde(default)]
    pub mode: Mode,
    /// Node levels of the tree (a lookup reads `depth` nodes, then the
    /// value), or reads per chain in synthetic mode.
    #[serde(default = "default_depth")]
    pub depth: u32,
    /// Bytes per node (and per read in synthetic mode): a multiple of 512.
    #[serde(default = "default_node_size")]
    pub node_size: u32,
    /// Keys in the tree; default: fanout^depth, capped by the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<u64>,
    #[serde(default = "defaults::one_u32")]
    pub threads: u32,
    /// io-uring lookups in flight per thread.
    #[serde(default = "defaults::one_u32")]
    pub batch: u32,
    /// Measured lookups per thread and engine.
    #[serde(default = "default_lookups")]
    pub lookups_per_thread: u64,
    /// Unmeasured lookups per thread and engine before measuring.
    #[serde(default = "default_warmup")]
    pub warmup_lookups: u64,
    #[serde(default)]
    pub build: BuildPolicy,
    /// Seed of the value bytes; part of the tree's identity for reuse.
    #[serde(default = "defaults::one_u64")]
    pub tree_seed: u64,
    #[serde(default)]
    pub registered_buffers: bool,
    #[serde(default)]
    pub sqpoll: bool,
    /// Keep every Nth lookup (and its hops) as raw samples.
    #[serde(default = "defaults::one_u64")]
    pub sample_every: u64,
    /// With several engines: lookups per thread in one engine's turn.
    #[serde(default = "default_block")]
    pub interleave_block: u64,
    /// Put the tree in this file (on a filesystem already mounted on the
    /// device) instead of the raw namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Interleave fio randread QD1 (one job per thread, node-sized reads of
    /// the same region) with the lookups and report `read_vs_fio_iops_ratio`.
    #[serde(default)]
    pub compare_with_fio: bool,
    /// fio I/Os per job over all rounds; default: what the read engine did
    /// per thread, at least 2000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fio_ios: Option<u64>,
    /// fio runs in this many segments spread between the lookup blocks.
    #[serde(default = "default_fio_rounds")]
    pub fio_rounds: u32,
    /// fio's I/O engine for the peer (a synchronous one: QD1).
    #[serde(default = "defaults::fio_ioengine")]
    pub fio_ioengine: String,
    /// fio `gtod_reduce` for the peer: IOPS only, no per-I/O clock reads.
    #[serde(default)]
    pub fio_gtod_reduce: bool,
    /// Pin lookup thread t to CPU t (mod the CPUs), and fio's job t too.
    #[serde(default)]
    pub pin_threads: bool,
    /// Count the bios the guest submits during each engine's measured
    /// blocks (`block:block_bio_queue` through perf on every CPU):
    /// `<engine>.block_bios`, `<engine>.bios_per_lookup`. Adds a barrier
    /// per block: for checking paths, not for timing.
    #[serde(default)]
    pub count_bios: bool,
    /// Before measuring, every engine looks up the same keys (one seed for
    /// all engines), each value verified against its key.
    #[serde(default)]
    pub cross_check_lookups: u64,
}

fn default_depth() -> u32 {
    3
}
fn default_node_size() -> u32 {
    512
}
fn default_lookups() -> u64 {
    1000
}
fn default_warmup() -> u64 {
    20
}
fn default_block() -> u64 {
    100
}
fn default_fio_rounds() -> u32 {
    4
}

/// What the run needs beyond the parameters: the plan and where it lives.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub plan: Plan,
    /// Bytes of the device (or tree file) the tree and descriptor live in.
    pub target_size: u64,
}

impl BtreeParams {
    /// The engines of this job, in interleaving order.
    pub fn engine_list(&self) -> Vec<Engine> {
        match (&self.engines, self.engine) {
            (Some(list), _) => list.clone(),
            (None, Some(e)) => vec![e],
            (None, None) => vec![Engine::Read],
        }
    }

    pub fn validate(&self, devices: &BTreeMap<String, DeviceRef>) -> Result<(), ParamError> {
        let dev = devices.get(&self.device).ok_or_else(|| {
            ParamError::new(
                "device",
                format!("no device named {:?} in [[devices]]", self.device),
            )
        })?;
        self.check_engines()?;
        self.check_counts()?;
        self.resolve(dev).map(|_| ())
    }

    fn check_engines(&self) -> Result<(), ParamError> {
        if self.engine.is_some() && self.engines.is_some() {
            return Err(ParamError::new(
                "engines",
                "set either `engine` or `engines`, not both",
            ));
        }
        let list = self.engine_list();
        if list.is_empty() {
            return Err(ParamError::new("engines", "lists no engine"));
        }
        let mut seen = list.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != list.len() {
            return Err(ParamError::new("engines", "names an engine twice"));
        }
        let uring = list.contains(&Engine::IoUring);
        let polled = list.contains(&Engine::IoUringPoll);
        for (field, set, runs) in [
            ("registered_buffers", self.registered_buffers, uring || polled),
            ("sqpoll", self.sqpoll, uring),
        ] {
            if set && !runs {
                return Err(ParamError::new(
                    field,
                    "applies to the io-uring engines only, which this job does not run",
                ));
            }
        }
        let raw_only = list
            .iter()
            .find(|e| e.polls() || e.passes_through());
        if let (Some(e), Some(_)) = (raw_only, &self.file) {
            return Err(ParamError::new(
                "file",
                format!(
                    "{} reads the raw namespace (its queue or its char device), not a file",
                    e.name()
                ),
            ));
        }
        if self.batch > 1 && !list.iter().any(|e| e.uses_ring()) {
            return Err(ParamError::new(
                "batch",
                "applies to the io_uring engines only (io-uring, *-hook-uring), which this job does not run",
            ));
        }
        // The BPF node parser reads BPF-KV's 512 B nodes.
        if list.iter().any(|e| e.is_hook()) && self.mode != Mode::Synthetic && self.node_size != 512
        {
            return Err(ParamError::new(
                "node_size",
                format!(
                    "{} with a hook engine: the BPF node parser reads 512-byte nodes",
                    self.node_size
                ),
            ));
        }
        if self.compare_with_fio
            && !crate::workload::fio::SYNC_ENGINES.contains(&&*self.fio_ioengine)
        {
            return Err(ParamError::new(
                "fio_ioengine",
                format!(
                    "{:?}: the peer is QD1, so one of {:?}",
                    self.fio_ioengine,
                    crate::workload::fio::SYNC_ENGINES
                ),
            ));
        }
        if self.compare_with_fio && !list.contains(&Engine::Read) {
            return Err(ParamError::new(
                "compare_with_fio",
                "compares the read engine with fio, but this job does not run `read`",
            ));
        }
        Ok(())
    }

    fn check_counts(&self) -> Result<(), ParamError> {
        let positive = [
            ("threads", u64::from(self.threads), "worker threads"),
            (
                "batch",
                u64::from(self.batch),
                "io-uring lookups in flight per thread",
            ),
            (
                "lookups_per_thread",
                self.lookups_per_thread,
                "measured lookups",
            ),
            ("sample_every", self.sample_every, "1 keeps every lookup"),
            (
                "interleave_block",
                self.interleave_block,
                "lookups per engine turn",
            ),
            ("fio_rounds", u64::from(self.fio_rounds), "fio segments"),
        ];
        for (field, v, what) in positive {
            if v == 0 {
                return Err(ParamError::new(
                    field,
                    format!("is 0; must be at least 1 ({what})"),
                ));
            }
        }
        if self.batch > MAX_BATCH {
            return Err(ParamError::new(
                "batch",
                format!("{} exceeds the maximum of {MAX_BATCH}", self.batch),
            ));
        }
        if self.fio_ios == Some(0) {
            return Err(ParamError::new("fio_ios", "must be at least 1"));
        }
        if let Some(f) = &self.file
            && !f.starts_with('/')
        {
            return Err(ParamError::new(
                "file",
                format!("{f:?} is not an absolute path"),
            ));
        }
        Ok(())
    }

    /// Bytes available to the tree: the device, or the part of it a file on
    /// a filesystem can reasonably get (7/8, leaving room for metadata).
    fn target_size(&self, dev: &DeviceRef) -> u64 {
        match self.file {
            None => dev.size_bytes,
            Some(_) => dev.size_bytes / 8 * 7 / DESCRIPTOR_SIZE * DESCRIPTOR_SIZE,
        }
    }

    /// Checks the shape against the device and computes the lookup plan.
    pub fn resolve(&self, dev: &DeviceRef) -> Result<Resolved, ParamError> {
        let ns = self.node_size;
        if ns < 512 || !ns.is_multiple_of(512) {
            return Err(ParamError::new(
                "node_size",
                format!(
                    "{ns} is not a multiple of 512 (512 is BPF-KV's node, 4096 the large-node option)"
                ),
            ));
        }
        let lbs = dev.logical_block_size.max(512);
        if !ns.is_multiple_of(lbs) {
            return Err(ParamError::new(
                "node_size",
                format!(
                    "{ns} is not a multiple of device {:?}'s logical block size {lbs} (O_DIRECT)",
                    self.device
                ),
            ));
        }
        if self.depth == 0 || self.depth > MAX_DEPTH {
            return Err(ParamError::new(
                "depth",
                format!("{} is outside 1..={MAX_DEPTH}", self.depth),
            ));
        }
        let target_size = self.target_size(dev);
        let plan = match self.mode {
            Mode::Synthetic => Plan::Synthetic(self.chain(target_size)?),
            Mode::Tree | Mode::HookSafety => Plan::Tree(TreePlan {
                layout: self.layout(target_size)?,
                tree_seed: self.tree_seed,
                value_read: lbs as usize,
            }),
        };
        Ok(Resolved { plan, target_size })
    }

    fn chain(&self, size: u64) -> Result<Chain, ParamError> {
        if self.keys.is_some() {
            return Err(ParamError::new("keys", "applies to mode = \"tree\" only"));
        }
        Chain::new(self.depth, self.node_size as usize, size).ok_or_else(|| {
            ParamError::new(
                "node_size",
                format!(
                    "{}-byte reads do not fit device {:?} of {size} bytes",
                    self.node_size, self.device
                ),
            )
        })
    }

    fn layout(&self, size: u64) -> Result<Layout, ParamError> {
        let (ns, d) = (self.node_size, self.depth);
        let dev = &self.device;
        let budget = descriptor_offset(size).ok_or_else(|| {
            ParamError::new(
                "device",
                format!("{dev:?} has {size} bytes, less than the 4096-byte tree descriptor"),
            )
        })?;
        let room = format!(
            "device {dev:?} offers {budget} bytes ({size} minus the last 4 KiB, which hold the tree descriptor)"
        );
        if let Some(keys) = self.keys {
            let layout =
                Layout::new(ns, d, keys).map_err(|e| ParamError::new("keys", e.to_string()))?;
            if layout.total_bytes > budget {
                return Err(ParamError::new(
                    "keys",
                    format!(
                        "{keys} keys in {d} levels of {ns}-byte nodes need {} bytes ({} nodes, then {keys} 64-byte values); {room}",
                        layout.total_bytes, layout.total_nodes
                    ),
                ));
            }
            return Ok(layout);
        }
        // Default: as many keys as the depth indexes, but never so few that
        // the top level would not be a genuine fan-out level.
        let f = fanout(ns);
        let genuine = if d == 1 { 1 } else { max_keys(ns, d - 1) + 1 };
        let fits = Layout::largest_fitting(ns, d, budget).filter(|&k| u128::from(k) >= genuine);
        match fits {
            Some(keys) => {
                Layout::new(ns, d, keys).map_err(|e| ParamError::new("keys", e.to_string()))
            }
            None => {
                let need = u64::try_from(genuine)
                    .ok()
                    .and_then(|k| Layout::new(ns, d, k).ok())
                    .map_or_else(
                        || "more than 2^64".to_string(),
                        |l| l.total_bytes.to_string(),
                    );
                Err(ParamError::new(
                    "depth",
                    format!(
                        "a depth-{d} tree of {ns}-byte nodes (fanout {f}) needs more than {f}^{} keys, at least {need} bytes; {room}. \
                         Use a smaller depth, a larger device, or set `keys` (the top levels then have single children)",
                        d - 1
                    ),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn devices(size: u64, lbs: u32) -> BTreeMap<String, DeviceRef> {
        BTreeMap::from([(
            "data".to_string(),
            DeviceRef {
                path: None,
                size_bytes: size,
                logical_block_size: lbs,
            },
        )])
    }

    fn parse(extra: &str) -> Result<BtreeParams, String> {
        let text = format!("{{\"device\": \"data\"{extra}}}");
        serde_json::from_str(&text).map_err(|e| e.to_string())
    }

    fn refused(p: &BtreeParams, size: u64) -> ParamError {
        p.validate(&devices(size, 512)).unwrap_err()
    }

    #[test]
    fn defaults_fill_the_depth() {
        let p = parse(", \"depth\": 2").unwrap();
        assert_eq!(p.engine_list(), vec![Engine::Read]);
        assert_eq!(
            (p.node_size, p.threads, p.batch, p.sample_every),
            (512, 1, 1, 1)
        );
        assert_eq!(p.build, BuildPolicy::IfNeeded);
        let r = p.resolve(&devices(1 << 20, 512)["data"]).unwrap();
        let Plan::Tree(t) = r.plan else { panic!() };
        assert_eq!(t.layout.keys, 961);
        assert_eq!(r.target_size, 1 << 20);
    }

    #[test]
    fn the_user_space_baselines_are_engines_that_read_the_raw_namespace() {
        let p = parse(
            ", \"engines\": [\"read\", \"io-uring-poll\", \"io-uring-sqpoll\", \"nvme-passthru\", \"nvme-passthru-poll\"], \"batch\": 4",
        )
        .unwrap();
        let names: Vec<&str> = p.engine_list().iter().map(|e| e.name()).collect();
        assert_eq!(
            names,
            ["read", "io-uring-poll", "io-uring-sqpoll", "nvme-passthru", "nvme-passthru-poll"]
        );
        assert!(p.engine_list().iter().all(|e| e.is_user_space() && !e.is_hook()));
        assert!(p.validate(&devices(64 << 20, 512)).is_ok());
        let on_file = parse(", \"engines\": [\"read\", \"nvme-passthru\"], \"file\": \"/mnt/t\"").unwrap();
        let e = refused(&on_file, 64 << 20);
        assert_eq!(e.field, "file");
        assert!(e.to_string().contains("nvme-passthru"), "{e}");
        // SQPOLL is the io-uring-sqpoll engine's own; the option is io-uring's.
        let e = refused(
            &parse(", \"engines\": [\"io-uring-poll\"], \"sqpoll\": true").unwrap(),
            64 << 20,
        );
        assert_eq!(e.field, "sqpoll");
    }

    #[test]
    fn default_keys_are_capped_by_the_device() {
        let p = parse(", \"depth\": 4").unwrap();
        let r = p.resolve(&devices(64 << 20, 512)["data"]).unwrap();
        let Plan::Tree(t) = r.plan else { panic!() };
        assert!(
            t.layout.keys > 29_791 && t.layout.keys < 923_521,
            "{}",
            t.layout.keys
        );
        assert!(t.layout.total_bytes <= (64 << 20) - 4096);
    }

    #[test]
    fn every_bad_parameter_is_refused_with_its_field_and_numbers() {
        let gib = 1u64 << 30;
        // Depth 6 needs 31^5+1 keys = over 2 GB.
        let e = refused(&parse(", \"depth\": 6").unwrap(), 512 << 20);
        assert_eq!(e.field, "depth");
        assert!(
            e.reason.contains("536866816") && e.reason.contains("31^5"),
            "{e}"
        );
        let e = refused(&parse(", \"depth\": 11").unwrap(), gib);
        assert_eq!(e.field, "depth");
        assert_eq!(
            refused(&parse(", \"depth\": 0").unwrap(), gib).field,
            "depth"
        );
        assert_eq!(
            refused(&parse(", \"threads\": 0").unwrap(), gib).field,
            "threads"
        );
        let e = refused(
            &parse(", \"engine\": \"io-uring\", \"batch\": 0").unwrap(),
            gib,
        );
        assert_eq!(e.field, "batch");
        let e = refused(&parse(", \"node_size\": 1000").unwrap(), gib);
        assert!(e.field == "node_size" && e.reason.contains("1000"), "{e}");
        assert_eq!(
            refused(&parse(", \"node_size\": 256").unwrap(), gib).field,
            "node_size"
        );
        let e = parse(", \"engine\": \"spdk\"").unwrap_err();
        assert!(e.contains("spdk") && e.contains("io-uring"), "{e}");
        let e = refused(&parse(", \"depth\": 2, \"keys\": 962").unwrap(), gib);
        assert!(e.field == "keys" && e.reason.contains("961"), "{e}");
        let e = refused(&parse(", \"depth\": 3, \"keys\": 29000").unwrap(), 1 << 20);
        assert!(e.field == "keys" && e.reason.contains("bytes"), "{e}");
        assert_eq!(
            refused(&parse(", \"batch\": 4").unwrap(), gib).field,
            "batch"
        );
        assert_eq!(
            refused(&parse(", \"sqpoll\": true").unwrap(), gib).field,
            "sqpoll"
        );
        let both = ", \"engine\": \"read\", \"engines\": [\"read\"]";
        assert_eq!(refused(&parse(both).unwrap(), gib).field, "engines");
        let twice = ", \"engines\": [\"read\", \"read\"]";
        assert_eq!(refused(&parse(twice).unwrap(), gib).field, "engines");
        let fio = ", \"engine\": \"io-uring\", \"compare_with_fio\": true";
        assert_eq!(refused(&parse(fio).unwrap(), gib).field, "compare_with_fio");
        let e = parse(", \"depht\": 3").unwrap_err();
        assert!(e.contains("depht"), "{e}");
        let mut p = parse("").unwrap();
        p.device = "nope".into();
        assert_eq!(refused(&p, gib).field, "device");
        // 512 B nodes cannot be read with O_DIRECT on a 4 KiB-sector device.
        let e = parse("")
            .unwrap()
            .validate(&devices(gib, 4096))
            .unwrap_err();
        assert!(e.field == "node_size" && e.reason.contains("4096"), "{e}");
    }

    #[test]
    fn job_json_roundtrips_through_the_workload_enum() {
        use crate::workload::Workload;
        let p =
            parse(", \"engines\": [\"read\", \"io_uring\"], \"batch\": 4, \"keys\": 77").unwrap();
        let w = Workload::Btree(p);
        let text = serde_json::to_string(&w).unwrap();
        assert!(
            text.contains("\"kind\":\"btree\"") && text.contains("io-uring"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Workload>(&text).unwrap(), w);
    }

    #[test]
    fn explicit_keys_allow_deep_trees_on_small_devices() {
        let p = parse(", \"depth\": 10, \"keys\": 1000").unwrap();
        assert!(p.validate(&devices(1 << 20, 512)).is_ok());
        let s = parse(
            ", \"mode\": \"synthetic\", \"depth\": 10, \"engine\": \"io_uring\", \"batch\": 8",
        )
        .unwrap();
        assert!(s.validate(&devices(1 << 20, 512)).is_ok());
        let bad = parse(", \"mode\": \"synthetic\", \"keys\": 5").unwrap();
        assert_eq!(refused(&bad, 1 << 20).field, "keys");
    }
}
