//! On-disk layout of the BPF-KV style B+-tree: node encoding, level sizes and
//! byte offsets. All fields are little-endian u64.
//!
//! Image, from byte 0 of the device:
//! `[root | level 1 | ... | level d-1 (leaves) | value log | zero pad to 4 KiB]`
//!
//! A node is `{u64 num, u64 type, u64 key[f], u64 ptr[f]}` with
//! `f = (node_size - 16) / 16` (31 for 512 B nodes, 255 for 4 KiB).
//! Inner nodes: `ptr[i]` is the byte offset of child `i`, `key[i]` the
//! smallest key below it. Leaves: `ptr[i]` is the byte offset of `key[i]`'s
//! 64 B value in the log. `num` is the number of slots in use for both kinds
//! (BPF-KV reuses it as a `next` link in leaves for range scans; point
//! lookups need the count instead).
//!
//! Keys are `0..keys`, packed left to right into full leaves. A tree of depth
//! `d` has exactly `d` node levels; when `keys` is too small for `d` genuine
//! levels the top levels hold single-child nodes, so a lookup still costs
//! `d` node reads plus one value read.

pub const VALUE_SIZE: u64 = 64;
pub const MAX_DEPTH: u32 = 10;
pub const NODE_INNER: u64 = 0;
pub const NODE_LEAF: u64 = 1;
/// The image is padded to this, so O_DIRECT writes of 4 KiB-sector devices work.
pub const IMAGE_ALIGN: u64 = 4096;
const HEADER_WORDS: usize = 2;

/// Slots per node for a node size (both keys and pointers are u64).
pub fn fanout(node_size: u32) -> u64 {
    (u64::from(node_size).saturating_sub(16)) / 16
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LayoutError {
    #[error("node size {0} is not a multiple of 512 of at least 512")]
    NodeSize(u32),
    #[error("depth {0} is outside 1..={MAX_DEPTH}")]
    Depth(u32),
    #[error("a tree needs at least one key")]
    NoKeys,
    #[error(
        "{keys} keys do not fit {depth} levels of fanout {fanout} (at most {fanout}^{depth} = {max})"
    )]
    TooManyKeys {
        keys: u64,
        depth: u32,
        fanout: u64,
        max: u128,
    },
    #[error("the image of {keys} keys would exceed 2^64 bytes")]
    Overflow { keys: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub node_size: u32,
    pub depth: u32,
    pub keys: u64,
    pub fanout: u64,
    /// Nodes per level, root first.
    pub level_nodes: Vec<u64>,
    /// Global index of each level's first node (nodes are numbered in write order).
    level_first: Vec<u64>,
    pub total_nodes: u64,
    pub value_log_offset: u64,
    /// Image size including the padding to `IMAGE_ALIGN`.
    pub total_bytes: u64,
}

impl Layout {
    pub fn new(node_size: u32, depth: u32, keys: u64) -> Result<Layout, LayoutError> {
        if node_size < 512 || !node_size.is_multiple_of(512) {
            return Err(LayoutError::NodeSize(node_size));
        }
        if depth == 0 || depth > MAX_DEPTH {
            return Err(LayoutError::Depth(depth));
        }
        if keys == 0 {
            return Err(LayoutError::NoKeys);
        }
        let f = fanout(node_size);
        let max = max_keys(node_size, depth);
        if u128::from(keys) > max {
            return Err(LayoutError::TooManyKeys {
                keys,
                depth,
                fanout: f,
                max,
            });
        }
        // Bottom-up: full leaves, then ceil(children / f) parents per level,
        // never fewer than one node.
        let mut level_nodes = vec![0u64; depth as usize];
        let mut below = keys;
        for l in (0..depth as usize).rev() {
            below = below.div_ceil(f).max(1);
            level_nodes[l] = below;
        }
        let mut level_first = Vec::with_capacity(depth as usize);
        let mut total_nodes = 0u64;
        for &n in &level_nodes {
            level_first.push(total_nodes);
            total_nodes += n;
        }
        let overflow = || LayoutError::Overflow { keys };
        let value_log_offset = total_nodes
            .checked_mul(u64::from(node_size))
            .ok_or_else(overflow)?;
        let end = keys
            .checked_mul(VALUE_SIZE)
            .and_then(|v| v.checked_add(value_log_offset))
            .and_then(|e| e.checked_next_multiple_of(IMAGE_ALIGN))
            .ok_or_else(overflow)?;
        Ok(Layout {
            node_size,
            depth,
            keys,
            fanout: f,
            level_nodes,
            level_first,
            total_nodes,
            value_log_offset,
            total_bytes: end,
        })
    }

    /// Byte offset of node `index` of `level` (0 = root).
    pub fn node_offset(&self, level: u32, index: u64) -> u64 {
        (self.level_first[level as usize] + index) * u64::from(self.node_size)
    }

    /// First byte after the last node of `level`.
    pub fn level_end(&self, level: u32) -> u64 {
        self.node_offset(level, self.level_nodes[level as usize])
    }

    pub fn value_offset(&self, key: u64) -> u64 {
        self.value_log_offset + key * VALUE_SIZE
    }

    pub fn value_log_end(&self) -> u64 {
        self.value_log_offset + self.keys * VALUE_SIZE
    }

    /// Keys covered by one node of `level`: f^(depth - level).
    fn span(&self, level: u32) -> u128 {
        u128::from(self.fanout).pow(self.depth - level)
    }

    /// Smallest key below node `index` of `level`; only meaningful for nodes
    /// that exist, whose first key is always below `keys`.
    pub fn min_key(&self, level: u32, index: u64) -> u64 {
        let k = u128::from(index) * self.span(level);
        u64::try_from(k).unwrap_or(u64::MAX)
    }

    /// Largest key count whose image fits in `budget` bytes, at most f^depth.
    /// `None` if not even one key fits.
    pub fn largest_fitting(node_size: u32, depth: u32, budget: u64) -> Option<u64> {
        let cap = u64::try_from(max_keys(node_size, depth)).unwrap_or(u64::MAX);
        let fits = |k: u64| Layout::new(node_size, depth, k).is_ok_and(|l| l.total_bytes <= budget);
        if !fits(1) {
            return None;
        }
        // The image size grows with the key count: binary search the boundary.
        let (mut lo, mut hi) = (1u64, cap.min(budget / VALUE_SIZE).max(1));
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) { lo = mid } else { hi = mid - 1 }
        }
        Some(lo)
    }
}

/// f^depth: the most keys `depth` levels can index.
pub fn max_keys(node_size: u32, depth: u32) -> u128 {
    u128::from(fanout(node_size)).saturating_pow(depth)
}

/// Read-only view of one encoded node.
#[derive(Clone, Copy)]
pub struct NodeRef<'a> {
    bytes: &'a [u8],
    fanout: usize,
}

impl<'a> NodeRef<'a> {
    /// `bytes` must be one whole node (`node_size` bytes).
    pub fn new(bytes: &'a [u8]) -> Self {
        let fanout = bytes.len().saturating_sub(16) / 16;
        NodeRef { bytes, fanout }
    }

    fn word(&self, i: usize) -> u64 {
        let b = &self.bytes[i * 8..i * 8 + 8];
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }

    pub fn num(&self) -> u64 {
        self.word(0)
    }
    pub fn kind(&self) -> u64 {
        self.word(1)
    }
    pub fn fanout(&self) -> usize {
        self.fanout
    }
    pub fn key(&self, slot: usize) -> u64 {
        self.word(HEADER_WORDS + slot)
    }
    pub fn ptr(&self, slot: usize) -> u64 {
        self.word(HEADER_WORDS + self.fanout + slot)
    }

    /// Slots in use, clamped so a corrupt `num` cannot index past the node.
    fn used(&self) -> usize {
        usize::try_from(self.num()).map_or(self.fanout, |n| n.min(self.fanout))
    }

    /// Slot of the last key `<= target` (the child to descend into).
    pub fn search_le(&self, target: u64) -> Option<usize> {
        // Binary search for the first key > target.
        let (mut lo, mut hi) = (0usize, self.used());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) <= target {
                lo = mid + 1
            } else {
                hi = mid
            }
        }
        lo.checked_sub(1)
    }

    /// Slot holding exactly `target`.
    pub fn search_eq(&self, target: u64) -> Option<usize> {
        self.search_le(target).filter(|&s| self.key(s) == target)
    }
}

/// Encodes a node into `out` (one whole node, zeroed first).
pub fn encode_node(out: &mut [u8], kind: u64, entries: impl Iterator<Item = (u64, u64)>) {
    out.fill(0);
    let f = out.len().saturating_sub(16) / 16;
    let mut n = 0usize;
    for (i, (key, ptr)) in entries.take(f).enumerate() {
        put_word(out, HEADER_WORDS + i, key);
        put_word(out, HEADER_WORDS + f + i, ptr);
        n = i + 1;
    }
    put_word(out, 0, n as u64);
    put_word(out, 1, kind);
}

fn put_word(out: &mut [u8], i: usize, v: u64) {
    out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
}

/// Encodes node `index` of `level` as the builder writes it.
pub fn encode_tree_node(layout: &Layout, level: u32, index: u64, out: &mut [u8]) {
    let f = layout.fanout;
    if level + 1 == layout.depth {
        let first = index * f;
        let end = (first + f).min(layout.keys);
        encode_node(
            out,
            NODE_LEAF,
            (first..end).map(|k| (k, layout.value_offset(k))),
        );
    } else {
        let children = layout.level_nodes[level as usize + 1];
        let first = index * f;
        let end = (first + f).min(children);
        encode_node(
            out,
            NODE_INNER,
            (first..end).map(|c| {
                (
                    layout.min_key(level + 1, c),
                    layout.node_offset(level + 1, c),
                )
            }),
        );
    }
}

/// SplitMix64 step: a tiny, fast, seedable generator (values and offsets).
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 64 B value stored for `key`: the key itself, then bytes derived from
/// (seed, key), so any reader can verify a value without a copy of the data.
pub fn value_bytes(seed: u64, key: u64) -> [u8; VALUE_SIZE as usize] {
    let mut v = [0u8; VALUE_SIZE as usize];
    v[..8].copy_from_slice(&key.to_le_bytes());
    let mut s = seed ^ key.wrapping_mul(0xd6e8_feb8_6659_fd93);
    for chunk in v[8..].chunks_exact_mut(8) {
        chunk.copy_from_slice(&splitmix64(&mut s).to_le_bytes());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpf_kv_sizes_match_the_paper() {
        assert_eq!(fanout(512), 31);
        assert_eq!(fanout(4096), 255);
        // XRP: 4 levels = 72 MB (MiB), 5 levels = 2.2 GB (GiB).
        let l4 = Layout::new(512, 4, 31u64.pow(4)).unwrap();
        assert_eq!(l4.level_nodes, vec![1, 31, 961, 29791]);
        assert_eq!(l4.total_bytes / (1 << 20), 71);
        let l5 = Layout::new(512, 5, 31u64.pow(5)).unwrap();
        assert_eq!(
            (l5.total_bytes as f64 / (1u64 << 30) as f64 * 10.0).round(),
            22.0
        );
    }

    #[test]
    fn small_key_counts_keep_every_level() {
        let l = Layout::new(512, 4, 40).unwrap();
        assert_eq!(l.level_nodes, vec![1, 1, 1, 2]);
        assert_eq!(l.node_offset(0, 0), 0);
        assert_eq!(l.node_offset(3, 1), 4 * 512);
        assert_eq!(l.value_log_offset, 5 * 512);
        assert_eq!(l.total_bytes, 8192);
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert_eq!(Layout::new(700, 3, 10), Err(LayoutError::NodeSize(700)));
        assert_eq!(Layout::new(512, 0, 10), Err(LayoutError::Depth(0)));
        assert_eq!(Layout::new(512, 11, 10), Err(LayoutError::Depth(11)));
        assert!(matches!(
            Layout::new(512, 2, 962),
            Err(LayoutError::TooManyKeys { max: 961, .. })
        ));
    }

    #[test]
    fn node_roundtrip_and_search() {
        let mut buf = vec![0u8; 512];
        encode_node(&mut buf, NODE_INNER, (0..5u64).map(|i| (i * 10, 1000 + i)));
        let n = NodeRef::new(&buf);
        assert_eq!((n.num(), n.kind(), n.fanout()), (5, NODE_INNER, 31));
        assert_eq!(n.search_le(0), Some(0));
        assert_eq!(n.search_le(25), Some(2));
        assert_eq!(n.search_le(1_000), Some(4));
        assert_eq!(n.ptr(2), 1002);
        assert_eq!(n.search_eq(30), Some(3));
        assert_eq!(n.search_eq(31), None);
        encode_node(&mut buf, NODE_LEAF, (7..9u64).map(|k| (k, k)));
        assert_eq!(NodeRef::new(&buf).search_le(3), None);
    }

    #[test]
    fn largest_fitting_is_exact() {
        let budget = 1 << 20;
        let k = Layout::largest_fitting(512, 5, budget).unwrap();
        assert!(Layout::new(512, 5, k).unwrap().total_bytes <= budget);
        assert!(Layout::new(512, 5, k + 1).unwrap().total_bytes > budget);
        assert_eq!(Layout::largest_fitting(512, 2, budget), Some(961));
        // Three nodes and one value pad to 4 KiB.
        assert_eq!(Layout::largest_fitting(512, 3, 4095), None);
        assert!(Layout::largest_fitting(512, 3, 4096).is_some());
    }

    #[test]
    fn values_depend_on_key_and_seed() {
        assert_eq!(&value_bytes(1, 77)[..8], &77u64.to_le_bytes());
        assert_ne!(value_bytes(1, 77), value_bytes(2, 77));
        assert_ne!(value_bytes(1, 77)[8..], value_bytes(1, 78)[8..]);
    }
}
