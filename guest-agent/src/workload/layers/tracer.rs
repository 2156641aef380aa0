//! The tracing programs of ebpf-programs/layer_trace.bpf.c, loaded and
//! attached with aya: one probe per boundary, attached and detached as a
//! whole so that the same boot measures reads with and without them.

use std::path::Path;

use aya::maps::{MapData, RingBuf};
use aya::programs::kprobe::KProbeLinkId;
use aya::programs::trace_point::TracePointLinkId;
use aya::programs::{KProbe, TracePoint};
use aya::{Ebpf, EbpfLoader};

use super::events::Event;

/// Where each program attaches. The boundary each marks is in
/// ebpf-programs/README.md.
enum Attach {
    Kprobe(&'static str),
    Tracepoint(&'static str, &'static str),
}

/// What the reads go through: a file on ext4, or the block device itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadPath {
    #[default]
    Ext4,
    BlockDevice,
}

/// (program name in the object, where it attaches, the read path it
/// belongs to: None for both).
const PROBES: [(&str, Attach, Option<ReadPath>); 11] = [
    (
        "sys_enter",
        Attach::Tracepoint("raw_syscalls", "sys_enter"),
        None,
    ),
    (
        "ext4_enter",
        Attach::Kprobe("ext4_file_read_iter"),
        Some(ReadPath::Ext4),
    ),
    (
        "blkdev_enter",
        Attach::Kprobe("blkdev_read_iter"),
        Some(ReadPath::BlockDevice),
    ),
    (
        "bio_queue",
        Attach::Tracepoint("block", "block_bio_queue"),
        None,
    ),
    ("nvme_prep_rq", Attach::Kprobe("nvme_prep_rq"), None),
    (
        "rq_issue",
        Attach::Tracepoint("block", "block_rq_issue"),
        None,
    ),
    ("nvme_irq", Attach::Kprobe("nvme_irq"), None),
    (
        "rq_complete",
        Attach::Tracepoint("block", "block_rq_complete"),
        None,
    ),
    // The kretprobes: the section name makes them so.
    (
        "ext4_exit",
        Attach::Kprobe("ext4_file_read_iter"),
        Some(ReadPath::Ext4),
    ),
    (
        "blkdev_exit",
        Attach::Kprobe("blkdev_read_iter"),
        Some(ReadPath::BlockDevice),
    ),
    (
        "sys_exit",
        Attach::Tracepoint("raw_syscalls", "sys_exit"),
        None,
    ),
];

pub const OBJECT: &str = "layer_trace.bpf.o";

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("loading {path}: {source}")]
    Load {
        path: String,
        source: Box<aya::EbpfError>,
    },
    #[error("program {name}: {what}: {source}")]
    Program {
        name: &'static str,
        what: &'static str,
        source: Box<aya::programs::ProgramError>,
    },
    #[error("{0}")]
    Object(String),
}

enum Link {
    Kprobe(&'static str, KProbeLinkId),
    Tracepoint(&'static str, TracePointLinkId),
}

pub struct Tracer {
    path: ReadPath,
    ebpf: Ebpf,
    ring: RingBuf<MapData>,
    links: Vec<Link>,
}

impl Tracer {
    /// Loads the programs (verified, not attached) for reads through `path` by thread
    /// `tid` on the block device `dev` (the kernel's dev_t encoding).
    pub fn load(object: &Path, path: ReadPath, tid: u32, dev: u32) -> Result<Tracer, TraceError> {
        let object_name = object.display().to_string();
        let mut ebpf = EbpfLoader::new()
            .override_global("target_tid", &tid, true)
            .override_global("target_dev", &dev, true)
            .load_file(object)
            .map_err(|source| TraceError::Load {
                path: object_name.clone(),
                source: Box::new(source),
            })?;
        for (name, attach, _) in &PROBES {
            let loaded = match attach {
                Attach::Kprobe(_) => typed::<KProbe>(&mut ebpf, name)?.load(),
                Attach::Tracepoint(..) => typed::<TracePoint>(&mut ebpf, name)?.load(),
            };
            loaded.map_err(|e| program_error(name, "load", e))?;
        }
        let map = ebpf
            .take_map("EVENTS")
            .ok_or_else(|| TraceError::Object(format!("{object_name} has no map EVENTS")))?;
        let ring = RingBuf::try_from(map)
            .map_err(|e| TraceError::Object(format!("{object_name}: EVENTS: {e}")))?;
        Ok(Tracer {
            path,
            ebpf,
            ring,
            links: Vec::new(),
        })
    }

    /// Attaches every probe (no-op when attached).
    pub fn attach(&mut self) -> Result<(), TraceError> {
        if !self.links.is_empty() {
            return Ok(());
        }
        let path = self.path;
        for (name, attach, _) in PROBES.iter().filter(|p| p.2.is_none_or(|p| p == path)) {
            let link = match attach {
                Attach::Kprobe(func) => Link::Kprobe(
                    name,
                    typed::<KProbe>(&mut self.ebpf, name)?
                        .attach(func, 0)
                        .map_err(|e| program_error(name, "attach", e))?,
                ),
                Attach::Tracepoint(category, event) => Link::Tracepoint(
                    name,
                    typed::<TracePoint>(&mut self.ebpf, name)?
                        .attach(category, event)
                        .map_err(|e| program_error(name, "attach", e))?,
                ),
            };
            self.links.push(link);
        }
        Ok(())
    }

    /// Detaches every probe: afterwards no program runs on the I/O path.
    pub fn detach(&mut self) -> Result<(), TraceError> {
        for link in std::mem::take(&mut self.links) {
            match link {
                Link::Kprobe(name, id) => {
                    let p = typed::<KProbe>(&mut self.ebpf, name)?;
                    p.detach(id).map_err(|e| program_error(name, "detach", e))?;
                }
                Link::Tracepoint(name, id) => {
                    let p = typed::<TracePoint>(&mut self.ebpf, name)?;
                    p.detach(id).map_err(|e| program_error(name, "detach", e))?;
                }
            }
        }
        Ok(())
    }

    /// Moves every event in the ring into `out`; returns how many records
    /// were not events (none unless the object and agent disagree).
    pub fn drain(&mut self, out: &mut Vec<Event>) -> u64 {
        let mut foreign = 0;
        while let Some(item) = self.ring.next() {
            match Event::parse(&item) {
                Some(e) => out.push(e),
                None => foreign += 1,
            }
        }
        foreign
    }
}

/// Program `name` of the object, as its type.
fn typed<'a, P>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut P, TraceError>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let program = ebpf
        .program_mut(name)
        .ok_or_else(|| TraceError::Object(format!("the object has no program {name}")))?;
    program
        .try_into()
        .map_err(|e| program_error(name, "program type", e))
}

fn program_error(
    name: &'static str,
    what: &'static str,
    source: aya::programs::ProgramError,
) -> TraceError {
    TraceError::Program {
        name,
        what,
        source: Box::new(source),
    }
}
