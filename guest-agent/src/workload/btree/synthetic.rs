//! The HotOS "synthetic chain": `depth` dependent reads at random 4 KiB-aligned
//! offsets, each offset drawn from a per-lookup seeded generator. It needs
//! no data on the device; a hop is "verified" when the read returns all its
//! bytes, which the engines check for every I/O.

use super::layout::splitmix64;

/// Offsets are multiples of this, as in the HotOS benchmark.
pub const CHAIN_ALIGN: u64 = 4096;

#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    pub depth: u32,
    /// Bytes per read.
    pub read_len: usize,
    /// Number of aligned offsets a read may start at.
    pub slots: u64,
}

impl Chain {
    /// A chain over a region of `size` bytes; `None` if no read fits.
    pub fn new(depth: u32, read_len: usize, size: u64) -> Option<Chain> {
        let last_start = size.checked_sub(read_len as u64)?;
        Some(Chain {
            depth,
            read_len,
            slots: last_start / CHAIN_ALIGN + 1,
        })
    }

    /// Next offset of a chain whose generator state is `state`.
    pub fn next_offset(&self, state: &mut u64) -> u64 {
        (splitmix64(state) % self.slots) * CHAIN_ALIGN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_aligned_in_range_and_reproducible() {
        let c = Chain::new(5, 512, 1 << 20).unwrap();
        assert_eq!(c.slots, 256);
        let (mut a, mut b) = (42u64, 42u64);
        let xs: Vec<u64> = (0..100).map(|_| c.next_offset(&mut a)).collect();
        let ys: Vec<u64> = (0..100).map(|_| c.next_offset(&mut b)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|&o| o % 4096 == 0 && o + 512 <= 1 << 20));
        assert!(xs.iter().collect::<std::collections::BTreeSet<_>>().len() > 50);
        assert_eq!(Chain::new(1, 512, 100), None);
    }
}
