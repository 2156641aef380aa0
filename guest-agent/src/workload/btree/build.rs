//! Builds the tree image: nodes level by level from the root at offset 0,
//! then the value log, streamed in large sequential writes. With
//! `build = "if-needed"` the descriptor at the device's end decides whether
//! the device already holds this exact tree.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Instant;

use super::descriptor::{DESCRIPTOR_SIZE, Descriptor, descriptor_offset};
use super::layout::{Layout, encode_tree_node, value_bytes};
use crate::workload::WorkloadError;
use crate::workload::randread::{AlignedBuf, open_direct};

/// Bytes per write while building: large enough to stream, small enough for
/// a guest with little memory.
pub const BUILD_CHUNK: usize = 1 << 20;

/// Where an image goes: a `Vec` (benches, tests) or an O_DIRECT file.
pub trait ImageSink {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), WorkloadError>;
}

impl ImageSink for Vec<u8> {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), WorkloadError> {
        let start = usize::try_from(offset)
            .map_err(|_| WorkloadError::Other(format!("offset {offset} too large for memory")))?;
        let end = start + data.len();
        if self.len() < end {
            self.resize(end, 0);
        }
        self.get_mut(start..end)
            .ok_or_else(|| WorkloadError::Other("image range out of bounds".into()))?
            .copy_from_slice(data);
        Ok(())
    }
}

/// A device or file opened for O_DIRECT writes.
pub struct DirectSink {
    file: File,
    path: String,
}

impl DirectSink {
    pub fn open(path: &str, size: u64) -> Result<Self, WorkloadError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .map_err(|e| WorkloadError::io(format!("open {path} for building"), e))?;
        let meta = file
            .metadata()
            .map_err(|e| WorkloadError::io(format!("stat {path}"), e))?;
        // A file stands in for a device of `size` bytes; a block device has its size.
        if meta.is_file() && meta.len() < size {
            file.set_len(size)
                .map_err(|e| WorkloadError::io(format!("extend {path} to {size} bytes"), e))?;
        }
        Ok(DirectSink {
            file,
            path: path.to_string(),
        })
    }

    pub fn sync(&self) -> Result<(), WorkloadError> {
        self.file
            .sync_data()
            .map_err(|e| WorkloadError::io(format!("fdatasync {}", self.path), e))
    }
}

impl ImageSink for DirectSink {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), WorkloadError> {
        self.file
            .write_all_at(data, offset)
            .map_err(|e| WorkloadError::io(format!("write {} at {offset}", self.path), e))
    }
}

/// Fills a chunk buffer and hands it to the sink whenever it is full.
struct Chunker<'a, S: ImageSink> {
    sink: &'a mut S,
    buf: &'a mut [u8],
    fill: usize,
    offset: u64,
}

impl<S: ImageSink> Chunker<'_, S> {
    fn put(&mut self, mut bytes: &[u8]) -> Result<(), WorkloadError> {
        while !bytes.is_empty() {
            let n = bytes.len().min(self.buf.len() - self.fill);
            self.buf[self.fill..self.fill + n].copy_from_slice(&bytes[..n]);
            self.fill += n;
            bytes = &bytes[n..];
            if self.fill == self.buf.len() {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), WorkloadError> {
        if self.fill > 0 {
            self.sink.write_at(self.offset, &self.buf[..self.fill])?;
            self.offset += self.fill as u64;
            self.fill = 0;
        }
        Ok(())
    }
}

/// Streams the whole image (`layout.total_bytes`) into `sink`. `chunk` must
/// be a multiple of 4 KiB long (and aligned, for O_DIRECT sinks).
pub fn write_image<S: ImageSink>(
    layout: &Layout,
    tree_seed: u64,
    sink: &mut S,
    chunk: &mut [u8],
) -> Result<(), WorkloadError> {
    let mut w = Chunker {
        sink,
        buf: chunk,
        fill: 0,
        offset: 0,
    };
    let mut node = vec![0u8; layout.node_size as usize];
    for level in 0..layout.depth {
        for index in 0..layout.level_nodes[level as usize] {
            encode_tree_node(layout, level, index, &mut node);
            w.put(&node)?;
        }
    }
    for key in 0..layout.keys {
        w.put(&value_bytes(tree_seed, key))?;
    }
    let pad = layout.total_bytes - layout.value_log_end();
    w.put(&vec![0u8; pad as usize])?;
    w.flush()
}

/// Builds the image of `layout` into a `Vec` (tests and benches).
pub fn image_to_vec(layout: &Layout, tree_seed: u64) -> Result<Vec<u8>, WorkloadError> {
    let mut out = Vec::with_capacity(layout.total_bytes as usize);
    let mut chunk = vec![0u8; BUILD_CHUNK];
    write_image(layout, tree_seed, &mut out, &mut chunk)?;
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuildOutcome {
    /// False when the descriptor showed the tree was already there.
    pub built: bool,
    pub seconds: f64,
}

/// Makes sure `path` (a device of `size` bytes) holds the tree of `layout`:
/// rebuilds unless `reuse` is set and the descriptor matches.
pub fn ensure_tree(
    path: &str,
    size: u64,
    layout: &Layout,
    tree_seed: u64,
    reuse: bool,
) -> Result<BuildOutcome, WorkloadError> {
    let started = Instant::now();
    let desc_off = descriptor_offset(size).ok_or_else(|| WorkloadError::Device {
        name: path.to_string(),
        reason: format!("{size} bytes leave no room for the tree descriptor"),
    })?;
    let want = Descriptor::for_layout(layout, tree_seed);
    if reuse && read_descriptor(path, desc_off)? == Some(want.clone()) {
        return Ok(BuildOutcome {
            built: false,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    let mut sink = DirectSink::open(path, size)?;
    let mut block = AlignedBuf::new(DESCRIPTOR_SIZE as usize, 4096)?;
    // Invalidate first: a build cut short must not leave a matching descriptor.
    block.as_mut_slice().fill(0);
    sink.write_at(desc_off, block.as_slice())?;
    sink.sync()?;
    let mut chunk = AlignedBuf::new(BUILD_CHUNK, 4096)?;
    write_image(layout, tree_seed, &mut sink, chunk.as_mut_slice())?;
    sink.sync()?;
    want.encode_into(block.as_mut_slice());
    sink.write_at(desc_off, block.as_slice())?;
    sink.sync()?;
    Ok(BuildOutcome {
        built: true,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The descriptor at `offset`, if a valid one is there (a missing or short
/// file counts as none).
pub fn read_descriptor(path: &str, offset: u64) -> Result<Option<Descriptor>, WorkloadError> {
    if !std::path::Path::new(path).exists() {
        return Ok(None);
    }
    let file = open_direct(path)?;
    let mut block = AlignedBuf::new(DESCRIPTOR_SIZE as usize, 4096)?;
    let n = file
        .read_at(block.as_mut_slice(), offset)
        .map_err(|e| WorkloadError::io(format!("read tree descriptor of {path} at {offset}"), e))?;
    if n < DESCRIPTOR_SIZE as usize {
        return Ok(None);
    }
    Ok(Descriptor::decode(block.as_slice()))
}

#[cfg(test)]
mod tests {
    use super::super::layout::{NODE_INNER, NODE_LEAF, NodeRef};
    use super::*;

    #[test]
    fn image_is_root_first_then_levels_then_values() {
        let l = Layout::new(512, 3, 1000).unwrap();
        let img = image_to_vec(&l, 5).unwrap();
        assert_eq!(img.len() as u64, l.total_bytes);
        let root = NodeRef::new(&img[..512]);
        assert_eq!((root.kind(), root.num()), (NODE_INNER, 2));
        assert_eq!((root.key(1), root.ptr(1)), (961, l.node_offset(1, 1)));
        let leaf_off = l.node_offset(2, 3) as usize;
        let leaf = NodeRef::new(&img[leaf_off..leaf_off + 512]);
        assert_eq!((leaf.kind(), leaf.num(), leaf.key(0)), (NODE_LEAF, 31, 93));
        let v = leaf.ptr(4) as usize;
        assert_eq!(&img[v..v + 64], &value_bytes(5, 97));
        assert!(img[l.value_log_end() as usize..].iter().all(|&b| b == 0));
    }

    #[test]
    fn chunk_size_does_not_change_the_image() {
        let l = Layout::new(1024, 2, 500).unwrap();
        let a = image_to_vec(&l, 1).unwrap();
        let mut b = Vec::new();
        write_image(&l, 1, &mut b, &mut [0u8; 4096]).unwrap();
        assert_eq!(a, b);
    }
}
