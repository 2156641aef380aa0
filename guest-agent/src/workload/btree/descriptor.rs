//! The tree descriptor: one 4 KiB block in the last 4 KiB of the device that
//! names the tree the device holds, so `build = "if-needed"` can skip a
//! rebuild. It lives at the end because offset 0 must be the root.

use super::layout::{Layout, VALUE_SIZE};

pub const DESCRIPTOR_SIZE: u64 = 4096;
const MAGIC: &[u8; 8] = b"TBBTREE1";
const FORMAT_VERSION: u32 = 1;
const BODY: usize = 48;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub node_size: u32,
    pub depth: u32,
    pub keys: u64,
    pub tree_seed: u64,
    pub total_bytes: u64,
}

impl Descriptor {
    pub fn for_layout(layout: &Layout, tree_seed: u64) -> Self {
        Descriptor {
            node_size: layout.node_size,
            depth: layout.depth,
            keys: layout.keys,
            tree_seed,
            total_bytes: layout.total_bytes,
        }
    }

    /// Writes the descriptor into the start of `out` (at least 56 bytes);
    /// the rest of `out` is zeroed.
    pub fn encode_into(&self, out: &mut [u8]) {
        out.fill(0);
        out[0..8].copy_from_slice(MAGIC);
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&self.node_size.to_le_bytes());
        out[16..20].copy_from_slice(&self.depth.to_le_bytes());
        out[20..24].copy_from_slice(&(VALUE_SIZE as u32).to_le_bytes());
        out[24..32].copy_from_slice(&self.keys.to_le_bytes());
        out[32..40].copy_from_slice(&self.tree_seed.to_le_bytes());
        out[40..48].copy_from_slice(&self.total_bytes.to_le_bytes());
        let sum = fnv1a(&out[..BODY]);
        out[BODY..BODY + 8].copy_from_slice(&sum.to_le_bytes());
    }

    /// `None` for anything but a well-formed descriptor of this version.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < BODY + 8 || &bytes[0..8] != MAGIC {
            return None;
        }
        let u32_at =
            |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[o..o + 8]);
            u64::from_le_bytes(w)
        };
        if u32_at(8) != FORMAT_VERSION
            || u64::from(u32_at(20)) != VALUE_SIZE
            || u64_at(BODY) != fnv1a(&bytes[..BODY])
        {
            return None;
        }
        Some(Descriptor {
            node_size: u32_at(12),
            depth: u32_at(16),
            keys: u64_at(24),
            tree_seed: u64_at(32),
            total_bytes: u64_at(40),
        })
    }
}

/// Offset of the descriptor block in a device of `size` bytes: the last
/// whole 4 KiB block.
pub fn descriptor_offset(size: u64) -> Option<u64> {
    (size / DESCRIPTOR_SIZE)
        .checked_sub(1)
        .map(|b| b * DESCRIPTOR_SIZE)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_corruption() {
        let d = Descriptor::for_layout(&Layout::new(512, 3, 1000).unwrap(), 9);
        let mut buf = vec![0xffu8; 4096];
        d.encode_into(&mut buf);
        assert_eq!(Descriptor::decode(&buf), Some(d));
        buf[30] ^= 1;
        assert_eq!(Descriptor::decode(&buf), None);
        assert_eq!(Descriptor::decode(&[0u8; 4096]), None);
    }

    #[test]
    fn sits_in_the_last_whole_block() {
        assert_eq!(descriptor_offset(1 << 20), Some((1 << 20) - 4096));
        assert_eq!(descriptor_offset(8192 + 100), Some(4096));
        assert_eq!(descriptor_offset(4095), None);
    }
}
