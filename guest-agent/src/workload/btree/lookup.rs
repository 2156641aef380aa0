//! One lookup as a small state machine that both engines drive: it names the
//! next I/O, then consumes that I/O's bytes, verifying as it goes. A tree
//! lookup is `depth` node reads plus one read of the value's block (the
//! value read counts as a hop: `index_ios = depth`, `total_ios = depth + 1`).

use rand::Rng;

use super::layout::{Layout, MAX_DEPTH, NODE_INNER, NODE_LEAF, NodeRef, VALUE_SIZE, value_bytes};
use super::recorder::Recorder;
use super::synthetic::Chain;
use crate::workload::WorkloadError;

/// The lookups one engine run does: `n` keys (or chains) drawn from `rng`
/// by `plan`, each verified and recorded in `rec`.
pub struct Lookups<'a> {
    pub plan: &'a Plan,
    pub rng: &'a mut rand_chacha::ChaCha8Rng,
    pub n: u64,
    pub rec: &'a mut Recorder,
}

/// Most I/Os one lookup can issue (tree depth 10 plus the value).
pub const MAX_HOPS: usize = MAX_DEPTH as usize + 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Io {
    pub offset: u64,
    pub len: usize,
}

#[derive(Debug, Clone)]
pub struct Lookup {
    pub key: u64,
    /// Index of the I/O in flight (0 = root or first chain read).
    pub hop: u32,
    pub io: Io,
    /// Byte offset of the value, once the leaf named it.
    value_at: u64,
    /// Generator state of a synthetic chain.
    chain_state: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TreePlan {
    pub layout: Layout,
    pub tree_seed: u64,
    /// Bytes read to fetch a value: one logical block, at least 512.
    pub value_read: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    Tree(TreePlan),
    Synthetic(Chain),
}

impl Plan {
    pub fn ios_per_lookup(&self) -> u32 {
        match self {
            Plan::Tree(t) => t.layout.depth + 1,
            Plan::Synthetic(c) => c.depth,
        }
    }

    pub fn index_ios_per_lookup(&self) -> u32 {
        match self {
            Plan::Tree(t) => t.layout.depth,
            Plan::Synthetic(c) => c.depth,
        }
    }

    /// Size of the largest I/O, for buffers.
    pub fn max_io_len(&self) -> usize {
        match self {
            Plan::Tree(t) => (t.layout.node_size as usize).max(t.value_read),
            Plan::Synthetic(c) => c.read_len,
        }
    }

    /// Starts a lookup of a uniformly random key (or a fresh chain).
    pub fn begin(&self, rng: &mut impl Rng) -> Lookup {
        match self {
            Plan::Tree(t) => Lookup {
                key: rng.random_range(0..t.layout.keys),
                hop: 0,
                io: Io {
                    offset: 0,
                    len: t.layout.node_size as usize,
                },
                value_at: 0,
                chain_state: 0,
            },
            Plan::Synthetic(c) => {
                let mut chain_state: u64 = rng.random();
                let offset = c.next_offset(&mut chain_state);
                Lookup {
                    key: 0,
                    hop: 0,
                    io: Io {
                        offset,
                        len: c.read_len,
                    },
                    value_at: 0,
                    chain_state,
                }
            }
        }
    }

    /// Consumes the bytes of `l.io` (the engine has checked it got all of
    /// them). Returns true when the lookup is complete and verified;
    /// otherwise `l.io` is the next I/O to issue.
    pub fn advance(&self, l: &mut Lookup, data: &[u8]) -> Result<bool, WorkloadError> {
        match self {
            Plan::Tree(t) => t.advance(l, data),
            Plan::Synthetic(c) => {
                l.hop += 1;
                if l.hop >= c.depth {
                    return Ok(true);
                }
                l.io.offset = c.next_offset(&mut l.chain_state);
                Ok(false)
            }
        }
    }
}

impl TreePlan {
    fn advance(&self, l: &mut Lookup, data: &[u8]) -> Result<bool, WorkloadError> {
        let layout = &self.layout;
        let (key, off) = (l.key, l.io.offset);
        if l.hop == layout.depth {
            return self.check_value(l, data).map(|()| true);
        }
        let level = l.hop;
        let node = NodeRef::new(data);
        let is_leaf = level + 1 == layout.depth;
        let want = if is_leaf { NODE_LEAF } else { NODE_INNER };
        let bad = |what: String| {
            WorkloadError::Verify(format!(
                "key {key}: node at offset {off} (level {level}) {what}"
            ))
        };
        if node.kind() != want {
            return Err(bad(format!("has type {}, expected {want}", node.kind())));
        }
        if node.num() == 0 || node.num() > node.fanout() as u64 {
            return Err(bad(format!("holds {} keys", node.num())));
        }
        if is_leaf {
            let slot = node
                .search_eq(key)
                .ok_or_else(|| bad("does not hold the key".into()))?;
            let v = node.ptr(slot);
            let in_log = v >= layout.value_log_offset
                && v.checked_add(VALUE_SIZE)
                    .is_some_and(|e| e <= layout.value_log_end())
                && (v - layout.value_log_offset).is_multiple_of(VALUE_SIZE);
            if !in_log {
                return Err(bad(format!("points outside the value log: {v}")));
            }
            let block = self.value_read as u64;
            l.value_at = v;
            l.io = Io {
                offset: v / block * block,
                len: self.value_read,
            };
        } else {
            let slot = node
                .search_le(key)
                .ok_or_else(|| bad("has no child for the key".into()))?;
            let child = node.ptr(slot);
            let next = level + 1;
            let in_level = child >= layout.node_offset(next, 0)
                && child < layout.level_end(next)
                && child.is_multiple_of(u64::from(layout.node_size));
            if !in_level {
                return Err(bad(format!("points outside level {next}: {child}")));
            }
            l.io = Io {
                offset: child,
                len: layout.node_size as usize,
            };
        }
        l.hop += 1;
        Ok(false)
    }

    fn check_value(&self, l: &Lookup, data: &[u8]) -> Result<(), WorkloadError> {
        let within = (l.value_at - l.io.offset) as usize;
        let got = data
            .get(within..within + VALUE_SIZE as usize)
            .ok_or_else(|| WorkloadError::Verify(format!("key {}: short value read", l.key)))?;
        let want = value_bytes(self.tree_seed, l.key);
        match got.iter().zip(want.iter()).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(WorkloadError::Verify(format!(
                "key {}: value at offset {} differs at byte {i} (read {:#04x}, expected {:#04x})",
                l.key, l.value_at, got[i], want[i]
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::build::image_to_vec;
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Runs one lookup against an in-memory image; returns the I/Os made.
    fn walk(plan: &Plan, img: &[u8], l: &mut Lookup) -> Result<Vec<Io>, WorkloadError> {
        let mut ios = vec![];
        loop {
            ios.push(l.io);
            let io = l.io;
            if plan.advance(l, &img[io.offset as usize..io.offset as usize + io.len])? {
                return Ok(ios);
            }
        }
    }

    fn tree(depth: u32, keys: u64) -> (Plan, Vec<u8>) {
        let layout = Layout::new(512, depth, keys).unwrap();
        let img = image_to_vec(&layout, 3).unwrap();
        let plan = Plan::Tree(TreePlan {
            layout,
            tree_seed: 3,
            value_read: 512,
        });
        (plan, img)
    }

    #[test]
    fn every_key_is_found_in_depth_plus_one_reads() {
        let (plan, img) = tree(3, 5000);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for key in 0..5000 {
            let mut l = plan.begin(&mut rng);
            l.key = key;
            let ios = walk(&plan, &img, &mut l).unwrap();
            assert_eq!(ios.len(), 4, "key {key}");
            assert_eq!(ios[0].offset, 0);
        }
    }

    #[test]
    fn wrong_seed_or_flipped_byte_fails_naming_key_and_offset() {
        let (plan, mut img) = tree(2, 100);
        let Plan::Tree(t) = &plan else { unreachable!() };
        let at = t.layout.value_offset(42) as usize + 17;
        img[at] ^= 0x40;
        let mut l = plan.begin(&mut ChaCha8Rng::seed_from_u64(1));
        l.key = 42;
        let err = walk(&plan, &img, &mut l).unwrap_err().to_string();
        assert!(
            err.contains("key 42") && err.contains(&format!("offset {}", at - 17)),
            "{err}"
        );
        assert!(err.contains("byte 17"), "{err}");
    }

    #[test]
    fn a_node_of_the_wrong_type_is_caught() {
        let (plan, mut img) = tree(2, 100);
        img[8] = 1; // root claims to be a leaf
        let mut l = plan.begin(&mut ChaCha8Rng::seed_from_u64(1));
        let err = walk(&plan, &img, &mut l).unwrap_err().to_string();
        assert!(err.contains("offset 0") && err.contains("type 1"), "{err}");
    }

    #[test]
    fn synthetic_chain_issues_exactly_depth_reads() {
        let chain = Chain::new(7, 512, 1 << 20).unwrap();
        let plan = Plan::Synthetic(chain);
        let img = vec![0u8; 1 << 20];
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut l = plan.begin(&mut rng);
        let ios = walk(&plan, &img, &mut l).unwrap();
        assert_eq!(ios.len(), 7);
        assert!(ios.iter().all(|io| io.offset % 4096 == 0 && io.len == 512));
        assert_eq!((plan.ios_per_lookup(), plan.index_ios_per_lookup()), (7, 7));
    }
}
