//! The tracing programs' events and how they become layers: each event is
//! a boundary crossed at a kernel timestamp; the events inside one read's
//! user-space window, one of each boundary, split that window into the six
//! layers of HotOS'21 Table 1. The boundaries and their probes are listed
//! in ebpf-programs/README.md.

/// A boundary, numbered as `enum boundary` in ebpf-programs/layer_trace.bpf.c.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u32)]
pub enum Boundary {
    SysEnter = 0,
    FsEnter = 1,
    BioQueue = 2,
    NvmePrepRq = 3,
    RqIssue = 4,
    NvmeIrq = 5,
    RqComplete = 6,
    FsExit = 7,
    SysExit = 8,
}

pub const BOUNDARIES: usize = 9;

impl Boundary {
    pub fn from_u32(v: u32) -> Option<Boundary> {
        use Boundary::*;
        [
            SysEnter,
            FsEnter,
            BioQueue,
            NvmePrepRq,
            RqIssue,
            NvmeIrq,
            RqComplete,
            FsExit,
            SysExit,
        ]
        .get(v as usize)
        .copied()
    }
}

/// The layers, in the order of the paper's table (and the figure's x axis),
/// for a read of a file on ext4.
pub const LAYERS: [&str; 6] = [
    "kernel crossing",
    "read syscall",
    "ext4",
    "bio",
    "NVMe driver",
    "device",
];

/// The same for a read of the block device itself: the block device
/// file's direct-I/O path stands where ext4 does.
pub const LAYERS_BLOCK_DEVICE: [&str; 6] = [
    "kernel crossing",
    "read syscall",
    "block device file",
    "bio",
    "NVMe driver",
    "device",
];

/// One event as the program writes it (`struct layer_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub ts_ns: u64,
    pub boundary: Boundary,
}

/// Size of `struct layer_event`: u64 ts, u32 boundary, u32 cpu.
pub const EVENT_BYTES: usize = 16;

impl Event {
    /// Parses one ring-buffer record; None for a record of another shape.
    pub fn parse(bytes: &[u8]) -> Option<Event> {
        if bytes.len() < EVENT_BYTES {
            return None;
        }
        let ts_ns = u64::from_ne_bytes(bytes[0..8].try_into().ok()?);
        let b = u32::from_ne_bytes(bytes[8..12].try_into().ok()?);
        Some(Event {
            ts_ns,
            boundary: Boundary::from_u32(b)?,
        })
    }
}

/// One read's user-space window, CLOCK_MONOTONIC (bpf_ktime_get_ns' clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Why a read's window could not be split into layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unattributed {
    /// A boundary did not fire inside the window (e.g. the request was
    /// merged or served without the device).
    Missing(Boundary),
    /// A boundary fired twice: other I/O on the device or driver overlapped.
    Twice(Boundary),
    /// The boundaries are not in the order of the I/O path.
    OutOfOrder,
}

/// Per-layer nanoseconds of one read, in [`LAYERS`] order. They sum to the
/// window exactly: every boundary lies inside it.
pub type Layers = [u64; 6];

/// Splits each window by the events inside it. `events` in any order.
pub fn attribute(windows: &[Window], events: &[Event]) -> Vec<Result<Layers, Unattributed>> {
    let mut sorted: Vec<Event> = events.to_vec();
    sorted.sort_by_key(|e| e.ts_ns);
    let mut next = 0;
    windows
        .iter()
        .map(|w| {
            while next < sorted.len() && sorted[next].ts_ns < w.start_ns {
                next += 1;
            }
            let mut at: [Option<u64>; BOUNDARIES] = [None; BOUNDARIES];
            let mut twice = None;
            while next < sorted.len() && sorted[next].ts_ns <= w.end_ns {
                let e = sorted[next];
                let slot = &mut at[e.boundary as usize];
                if slot.is_some() {
                    twice.get_or_insert(e.boundary);
                }
                *slot = Some(e.ts_ns);
                next += 1;
            }
            if let Some(b) = twice {
                return Err(Unattributed::Twice(b));
            }
            split(w, &at)
        })
        .collect()
}

fn split(w: &Window, at: &[Option<u64>; BOUNDARIES]) -> Result<Layers, Unattributed> {
    use Boundary::*;
    let t = |b: Boundary| at[b as usize].ok_or(Unattributed::Missing(b));
    let order = [
        w.start_ns,
        t(SysEnter)?,
        t(FsEnter)?,
        t(BioQueue)?,
        t(NvmePrepRq)?,
        t(RqIssue)?,
        t(NvmeIrq)?,
        t(RqComplete)?,
        t(FsExit)?,
        t(SysExit)?,
        w.end_ns,
    ];
    if order.windows(2).any(|p| p[0] > p[1]) {
        return Err(Unattributed::OutOfOrder);
    }
    let d = |a: Boundary, b: Boundary| at[b as usize].unwrap_or(0) - at[a as usize].unwrap_or(0);
    let sys_enter = order[1];
    let sys_exit = order[9];
    Ok([
        // kernel crossing: into the kernel and back out
        (sys_enter - w.start_ns) + (w.end_ns - sys_exit),
        // read syscall: VFS dispatch to the file's read_iter and back
        d(SysEnter, FsEnter) + d(FsExit, SysExit),
        // ext4 (or the block device file): to the bio, and from its
        // completion back (the wait and the reader's wake-up are here)
        d(FsEnter, BioQueue) + d(RqComplete, FsExit),
        // bio: block layer from submission to the driver
        d(BioQueue, NvmePrepRq),
        // NVMe driver: command set-up, and the interrupt to the request's end
        d(NvmePrepRq, RqIssue) + d(NvmeIrq, RqComplete),
        // device: from the last step before the doorbell to the interrupt
        d(RqIssue, NvmeIrq),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts_ns: u64, boundary: Boundary) -> Event {
        Event { ts_ns, boundary }
    }

    fn one_read(base: u64) -> Vec<Event> {
        use Boundary::*;
        [
            (10, SysEnter),
            (20, FsEnter),
            (50, BioQueue),
            (60, NvmePrepRq),
            (65, RqIssue),
            (165, NvmeIrq),
            (170, RqComplete),
            (200, FsExit),
            (205, SysExit),
        ]
        .into_iter()
        .map(|(t, b)| ev(base + t, b))
        .collect()
    }

    #[test]
    fn a_read_splits_into_six_layers_that_sum_to_its_window() {
        let w = Window {
            start_ns: 1000,
            end_ns: 1212,
        };
        let mut events = one_read(1000);
        events.reverse(); // the ring may hold them out of order (two CPUs)
        let got = attribute(&[w], &events);
        let layers = got[0].unwrap();
        assert_eq!(layers, [10 + 7, 10 + 5, 30 + 30, 10, 5 + 5, 100]);
        assert_eq!(layers.iter().sum::<u64>(), w.end_ns - w.start_ns);
    }

    #[test]
    fn events_outside_a_window_and_doubled_boundaries_are_not_attributed() {
        let w1 = Window {
            start_ns: 1000,
            end_ns: 1212,
        };
        let w2 = Window {
            start_ns: 2000,
            end_ns: 2212,
        };
        let w3 = Window {
            start_ns: 3000,
            end_ns: 3212,
        };
        let mut events = one_read(1000);
        // Between windows: the agent's own I/O, ignored.
        events.push(ev(1500, Boundary::NvmeIrq));
        events.extend(one_read(2000));
        events.push(ev(2100, Boundary::NvmeIrq)); // a second interrupt
        events.extend(one_read(3000).into_iter().filter(|e| e.boundary != Boundary::BioQueue));
        let got = attribute(&[w1, w2, w3], &events);
        assert!(got[0].is_ok());
        assert_eq!(got[1], Err(Unattributed::Twice(Boundary::NvmeIrq)));
        assert_eq!(got[2], Err(Unattributed::Missing(Boundary::BioQueue)));
    }

    #[test]
    fn boundaries_out_of_path_order_are_refused() {
        let w = Window {
            start_ns: 1000,
            end_ns: 1212,
        };
        let mut events = one_read(1000);
        events[5].ts_ns = 1062; // the interrupt before the doorbell
        assert_eq!(attribute(&[w], &events)[0], Err(Unattributed::OutOfOrder));
    }

    #[test]
    fn records_parse_as_the_program_writes_them() {
        let mut b = Vec::new();
        b.extend_from_slice(&123u64.to_ne_bytes());
        b.extend_from_slice(&5u32.to_ne_bytes());
        b.extend_from_slice(&1u32.to_ne_bytes());
        assert_eq!(Event::parse(&b), Some(ev(123, Boundary::NvmeIrq)));
        b[8] = 9;
        assert_eq!(Event::parse(&b), None);
        assert_eq!(Event::parse(&b[..12]), None);
    }
}
