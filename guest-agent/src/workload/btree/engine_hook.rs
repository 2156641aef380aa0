//! The `syscall-hook` and `nvme-hook` engines: one chained_read(2) per
//! lookup, the kernel walking the chain with a BPF program (the B+-tree
//! node parser, or the HotOS synthetic chain) and re-issuing every read
//! itself, from the system-call layer or from the NVMe completion handler.
//! Every lookup is verified: the value against its key, the hop count and
//! where the chain ended against what the tree (or generator) dictates.
//! The kernel does not time single hops, so only lookup latency is kept.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::layout::{VALUE_SIZE, value_bytes};
use super::engine::LookupEngine;
use super::lookup::{Lookups, Plan, TreePlan};
use super::recorder::ns_since;
use super::synthetic::Chain;
use super::target::{Target, direct_buf};
use crate::bpf::abi::{
    self, BPF_PROG_TYPE_STORAGE_CHAIN, CHAINED_READ_NVME, CHAINED_READ_SYSCALL, ChainArgs, Scratch,
    bt, sc,
};
use crate::bpf::chain::chained_read;
use crate::bpf::prog::Program;
use crate::workload::WorkloadError;
use crate::workload::randread::AlignedBuf;

/// Where the programs are in the guest image; `TESTBED_BPF_DIR` overrides.
pub const BPF_DIR: &str = "/lib/testbed/bpf";
/// The section clang puts a `SEC("storage_chain")` program in.
pub const PROG_SECTION: &str = "storage_chain";

/// Where the kernel re-issues the reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookMode {
    Syscall,
    Nvme,
}

impl HookMode {
    pub fn flags(self) -> u32 {
        match self {
            HookMode::Syscall => CHAINED_READ_SYSCALL,
            HookMode::Nvme => CHAINED_READ_NVME,
        }
    }
}

pub fn bpf_dir() -> PathBuf {
    std::env::var_os("TESTBED_BPF_DIR").map_or_else(|| PathBuf::from(BPF_DIR), PathBuf::from)
}

/// Loads the program that walks `plan`'s chains.
pub fn load_program(plan: &Plan) -> Result<Program, WorkloadError> {
    let object = match plan {
        Plan::Tree(_) => "btree_lookup.bpf.o",
        Plan::Synthetic(_) => "synthetic_chain.bpf.o",
    };
    load_object(&bpf_dir().join(object), PROG_SECTION)
}

pub fn load_object(path: &Path, section: &str) -> Result<Program, WorkloadError> {
    Program::load_file(path, section, BPF_PROG_TYPE_STORAGE_CHAIN)
        .map_err(|e| WorkloadError::Other(e.to_string()))
}

/// One lookup as the kernel runs it: where it starts, the scratch words it
/// starts with, and how it must end.
#[derive(Debug, Clone)]
pub struct ChainJob {
    pub first: u64,
    pub scratch: Scratch,
    expect: Expect,
}

#[derive(Debug, Clone, Copy)]
enum Expect {
    Tree { key: u64, value_at: u64, depth: u32 },
    Synthetic { last: u64, depth: u32 },
}

/// Bytes per read of a chain (every hop reads this much).
pub fn read_size(plan: &Plan) -> usize {
    match plan {
        Plan::Tree(t) => t.layout.node_size as usize,
        Plan::Synthetic(c) => c.read_len,
    }
}

/// Starts a lookup, drawing from `rng` exactly as `Plan::begin` does, so
/// every engine looks up the same keys from the same seed.
pub fn begin(plan: &Plan, rng: &mut ChaCha8Rng) -> ChainJob {
    match plan {
        Plan::Tree(t) => tree_job(t, plan.begin(rng).key),
        Plan::Synthetic(c) => synthetic_job(c, rng.random()),
    }
}

fn tree_job(t: &TreePlan, key: u64) -> ChainJob {
    let mut scratch = [0u64; abi::SCRATCH_WORDS];
    scratch[bt::KEY] = key;
    ChainJob {
        first: 0,
        scratch,
        expect: Expect::Tree {
            key,
            value_at: t.layout.value_offset(key),
            depth: t.layout.depth,
        },
    }
}

fn synthetic_job(c: &Chain, mut state: u64) -> ChainJob {
    let first = c.next_offset(&mut state);
    let mut scratch = [0u64; abi::SCRATCH_WORDS];
    scratch[sc::STATE] = state;
    scratch[sc::SLOTS] = c.slots;
    scratch[sc::DEPTH] = u64::from(c.depth);
    let mut last = first;
    for _ in 1..c.depth {
        last = c.next_offset(&mut state);
    }
    ChainJob {
        first,
        scratch,
        expect: Expect::Synthetic {
            last,
            depth: c.depth,
        },
    }
}

impl ChainJob {
    /// The arguments of this lookup's chain; the scratch words stay in
    /// `self` (the kernel writes them back there).
    pub fn args(&mut self, fd: i32, prog_fd: i32, buf: &mut [u8], mode: HookMode) -> ChainArgs {
        ChainArgs {
            fd: fd as u32,
            prog_fd: prog_fd as u32,
            buf: buf.as_mut_ptr() as u64,
            offset: self.first,
            scratch: self.scratch.as_mut_ptr() as u64,
            size: buf.len() as u32,
            scratch_len: std::mem::size_of::<Scratch>() as u32,
            flags: mode.flags(),
            ..Default::default()
        }
    }

    /// Checks a finished chain: `read` is what the kernel returned, `buf`
    /// the last block. Returns the hops done in the kernel.
    pub fn verify(
        &self,
        read: usize,
        args: &ChainArgs,
        buf: &[u8],
        seed: u64,
    ) -> Result<u32, WorkloadError> {
        let fail = |what: String| WorkloadError::Verify(format!("{self:?}: {what}; {args:?}"));
        if read != buf.len() {
            return Err(fail(format!(
                "chain returned {read} bytes, not {}",
                buf.len()
            )));
        }
        match self.expect {
            Expect::Tree {
                key,
                value_at,
                depth,
            } => {
                let err = self.scratch[bt::ERROR];
                if err != 0 {
                    return Err(fail(format!(
                        "key {key}: the program stopped: {}",
                        bt::error_name(err)
                    )));
                }
                let found = self.scratch[bt::VALUE];
                if found != value_at || self.scratch[bt::NODES] != u64::from(depth) {
                    return Err(fail(format!(
                        "key {key}: value found at {found} after {} nodes, expected {value_at} after {depth}",
                        self.scratch[bt::NODES]
                    )));
                }
                let block = buf.len() as u64;
                if args.final_offset != value_at / block * block || args.hops != depth + 1 {
                    return Err(fail(format!(
                        "key {key}: chain ended at {} after {} reads, expected the value's block after {}",
                        args.final_offset,
                        args.hops,
                        depth + 1
                    )));
                }
                let within = (value_at - args.final_offset) as usize;
                let got = &buf[within..within + VALUE_SIZE as usize];
                if got != value_bytes(seed, key) {
                    return Err(fail(format!("key {key}: value bytes differ")));
                }
            }
            Expect::Synthetic { last, depth } => {
                if args.final_offset != last || args.hops != depth {
                    return Err(fail(format!(
                        "chain ended at {} after {} reads, expected {last} after {depth}",
                        args.final_offset, args.hops
                    )));
                }
            }
        }
        Ok(args.hops)
    }
}

/// The seed the tree's values were written with (0 for synthetic chains).
pub fn tree_seed(plan: &Plan) -> u64 {
    match plan {
        Plan::Tree(t) => t.tree_seed,
        Plan::Synthetic(_) => 0,
    }
}

/// Names the likely cause of a failed chained_read(2).
pub fn syscall_error(path: &str, e: std::io::Error) -> WorkloadError {
    let hint = match e.raw_os_error() {
        Some(libc::ENOSYS) => " (this kernel has no chained_read: use kernel.name = \"vm-hooks\")",
        Some(libc::EOPNOTSUPP) => " (the device's driver does not re-issue reads: NVMe only)",
        _ => "",
    };
    WorkloadError::io(format!("chained_read on {path}{hint}"), e)
}

/// `syscall-hook` / `nvme-hook`: synchronous, one lookup at a time.
pub struct HookEngine {
    target: Target,
    prog: Program,
    buf: AlignedBuf,
    mode: HookMode,
    /// Reads done in the kernel since the last `take_kernel_hops`.
    kernel_hops: u64,
}

impl HookEngine {
    pub fn open(path: &str, plan: &Plan, mode: HookMode) -> Result<Self, WorkloadError> {
        super::protection::refuse_protection_information(path, std::path::Path::new("/sys"))?;
        Ok(HookEngine {
            target: Target::open(path)?,
            prog: load_program(plan)?,
            buf: direct_buf(read_size(plan))?,
            mode,
            kernel_hops: 0,
        })
    }

}

impl LookupEngine for HookEngine {
    fn take_kernel_hops(&mut self) -> u64 {
        std::mem::take(&mut self.kernel_hops)
    }

    /// Runs `n` lookups back to back.
    fn run(&mut self, job: Lookups<'_>) -> Result<(), WorkloadError> {
        let Lookups { plan, rng, n, rec } = job;
        let seed = tree_seed(plan);
        for _ in 0..n {
            let mut job = begin(plan, rng);
            let buf = self.buf.as_mut_slice();
            let mut args = job.args(self.target.fd(), self.prog.fd(), buf, self.mode);
            let started = Instant::now();
            let read = chained_read(&mut args).map_err(|e| syscall_error(&self.target.path, e))?;
            let ns = ns_since(started);
            let hops = job.verify(read, &args, self.buf.as_slice(), seed)?;
            self.kernel_hops += u64::from(hops);
            rec.record(ns, &[]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::Layout;
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn jobs_draw_the_same_keys_as_the_user_space_engines() {
        let layout = Layout::new(512, 3, 5000).unwrap();
        let plan = Plan::Tree(TreePlan {
            layout,
            tree_seed: 1,
            value_read: 512,
        });
        let (mut a, mut b) = (ChaCha8Rng::seed_from_u64(5), ChaCha8Rng::seed_from_u64(5));
        for _ in 0..50 {
            let job = begin(&plan, &mut a);
            let l = plan.begin(&mut b);
            assert_eq!(job.scratch[bt::KEY], l.key);
            assert_eq!(job.first, 0);
        }
    }

    #[test]
    fn synthetic_jobs_start_where_the_user_space_chain_does_and_know_the_end() {
        let chain = Chain::new(4, 512, 1 << 20).unwrap();
        let plan = Plan::Synthetic(chain.clone());
        let (mut a, mut b) = (ChaCha8Rng::seed_from_u64(9), ChaCha8Rng::seed_from_u64(9));
        let job = begin(&plan, &mut a);
        let mut l = plan.begin(&mut b);
        assert_eq!(job.first, l.io.offset);
        let mut offsets = vec![l.io.offset];
        while !plan.advance(&mut l, &[]).unwrap() {
            offsets.push(l.io.offset);
        }
        let Expect::Synthetic { last, depth } = job.expect else {
            panic!("not synthetic")
        };
        assert_eq!(
            (last, depth as usize),
            (*offsets.last().unwrap(), offsets.len())
        );
        // What the BPF program computes from the scratch words.
        let mut state = job.scratch[sc::STATE];
        let second = (abi_splitmix(&mut state) % job.scratch[sc::SLOTS]) * 4096;
        assert_eq!(second, offsets[1]);
    }

    fn abi_splitmix(s: &mut u64) -> u64 {
        super::super::layout::splitmix64(s)
    }

    #[test]
    fn verify_accepts_the_right_value_and_names_a_wrong_one() {
        let layout = Layout::new(512, 2, 100).unwrap();
        let seed = 4;
        let plan = Plan::Tree(TreePlan {
            layout: layout.clone(),
            tree_seed: seed,
            value_read: 512,
        });
        let Plan::Tree(t) = &plan else { unreachable!() };
        let mut job = tree_job(t, 42);
        let value_at = layout.value_offset(42);
        let block = value_at / 512 * 512;
        let mut buf = vec![0u8; 512];
        let within = (value_at - block) as usize;
        buf[within..within + 64].copy_from_slice(&value_bytes(seed, 42));
        job.scratch[bt::VALUE] = value_at;
        job.scratch[bt::NODES] = 2;
        let args = ChainArgs {
            final_offset: block,
            hops: 3,
            ..Default::default()
        };
        assert_eq!(job.verify(512, &args, &buf, seed).unwrap(), 3);
        buf[within + 9] ^= 1;
        let e = job.verify(512, &args, &buf, seed).unwrap_err().to_string();
        assert!(e.contains("key 42") && e.contains("differ"), "{e}");
        job.scratch[bt::ERROR] = 5;
        let e = job.verify(512, &args, &buf, seed).unwrap_err().to_string();
        assert!(e.contains("does not hold the key"), "{e}");
    }
}
