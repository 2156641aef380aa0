//! The shared-memory object store between stages. The paper kept ArrowSAM
//! batches in Plasma, which Arrow has since removed; its modern stand-in is
//! an Arrow IPC file on tmpfs (`/dev/shm`) that the next stage memory-maps,
//! so batches are read in place, without a copy or a decode of the values.

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use arrow::ipc::convert::try_fb_to_schema;
use arrow::ipc::reader::{FileDecoder, read_footer_length};
use arrow::ipc::root_as_footer;
use arrow::ipc::writer::FileWriter;

use crate::{AsamError, Result};

/// Where stores go by default: tmpfs, memory that other processes can map.
pub fn default_dir() -> PathBuf {
    PathBuf::from("/dev/shm")
}

/// Writes `batches` (all of `schema`) as one Arrow IPC file at `path`.
pub fn put(path: &Path, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<()> {
    let file = std::fs::File::create(path).map_err(|e| AsamError::io(path, e))?;
    let ctx = |what: &str| format!("{what} {}", path.display());
    let mut w = FileWriter::try_new(std::io::BufWriter::new(file), schema)
        .map_err(|e| AsamError::arrow(ctx("open"), e))?;
    for b in batches {
        w.write(b).map_err(|e| AsamError::arrow(ctx("write"), e))?;
    }
    w.finish().map_err(|e| AsamError::arrow(ctx("finish"), e))
}

/// Maps the IPC file at `path` and returns its batches, whose buffers point
/// into the mapping (kept alive by the buffers themselves).
pub fn get(path: &Path) -> Result<Vec<RecordBatch>> {
    let file = std::fs::File::open(path).map_err(|e| AsamError::io(path, e))?;
    // SAFETY: the stores are written once by the previous stage and never
    // modified afterwards; a concurrent writer would be a misuse of the store.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| AsamError::io(path, e))?;
    let len = map.len();
    let bad = |why: String| {
        AsamError::Invalid(format!("{}: not an Arrow IPC file: {why}", path.display()))
    };
    if len < 10 {
        return Err(bad("too short".into()));
    }
    let ptr = NonNull::new(map.as_ptr().cast_mut()).ok_or_else(|| bad("empty mapping".into()))?;
    // SAFETY: ptr and len describe the mapping, which the Arc keeps mapped
    // for as long as any buffer sliced from it lives.
    let buffer = unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(map)) };
    let trailer: [u8; 10] = buffer[len - 10..]
        .try_into()
        .map_err(|_| bad("no trailer".into()))?;
    let footer_len =
        read_footer_length(trailer).map_err(|e| AsamError::arrow(path.display().to_string(), e))?;
    let footer_start = (len - 10)
        .checked_sub(footer_len)
        .ok_or_else(|| bad("footer longer than the file".into()))?;
    let footer = root_as_footer(&buffer[footer_start..len - 10]).map_err(|e| bad(e.to_string()))?;
    let schema = footer.schema().ok_or_else(|| bad("no schema".into()))?;
    let schema =
        try_fb_to_schema(schema).map_err(|e| AsamError::arrow(path.display().to_string(), e))?;
    let decoder = FileDecoder::new(Arc::new(schema), footer.version());
    let mut batches = Vec::new();
    for block in footer.recordBatches().into_iter().flatten() {
        let block_len = block.bodyLength() as usize + block.metaDataLength() as usize;
        let data = buffer.slice_with_length(block.offset() as usize, block_len);
        if let Some(b) = decoder
            .read_record_batch(block, &data)
            .map_err(|e| AsamError::arrow(format!("read {}", path.display()), e))?
        {
            batches.push(b);
        }
    }
    Ok(batches)
}

/// Writes `text` beside the store (the SAM header travels with the batches).
pub fn put_text(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| AsamError::io(path, e))
}

pub fn get_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| AsamError::io(path, e))
}
