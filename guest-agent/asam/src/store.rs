//! The shared-memory object store between stages. The paper kept ArrowSAM
//! batches in Plasma, which Arrow has since removed; its modern stand-in is
//! an Arrow IPC file on tmpfs (`/dev/shm`) that the next stage memory-maps,
//! so batches are read in place, without a copy or a decode of the values.
//!
//! The files live in a private directory (mkdtemp, mode 0700) and are
//! created new (O_EXCL, no symlink followed, mode 0600); each is read back
//! through the descriptor it was written with, never reopened by path, so
//! nobody else can swap or change what a stage maps.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use arrow::ipc::convert::fb_to_schema;
use arrow::ipc::reader::{FileDecoder, read_footer_length};
use arrow::ipc::root_as_footer;
use arrow::ipc::writer::FileWriter;

use crate::{AsamError, Result};

/// Where stores go by default: tmpfs, memory that other processes can map.
pub fn default_dir() -> PathBuf {
    PathBuf::from("/dev/shm")
}

/// The stores of one run: a fresh private directory under a parent
/// (default [`default_dir`]), removed with everything in it on drop.
pub struct Store {
    dir: tempfile::TempDir,
}

/// One stored file, kept open: [`get`] and [`get_text`] read it through
/// this descriptor.
pub struct Stored {
    file: File,
    path: PathBuf,
}

impl Stored {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Store {
    /// `parent/testbed-asam-XXXXXX`, mode 0700 (the parent is created if
    /// missing).
    pub fn create_in(parent: &Path) -> Result<Store> {
        Ok(Store {
            dir: private_dir(parent, "testbed-asam-")?,
        })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A new file `name` in the store, ours only, never through a symlink.
    fn create(&self, name: &str) -> Result<Stored> {
        let path = self.dir.path().join(name);
        let file = create_new(&path)?;
        Ok(Stored { file, path })
    }

    /// Writes `batches` (all of `schema`) as one Arrow IPC file `name`.
    pub fn put(&self, name: &str, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Stored> {
        let stored = self.create(name)?;
        write_ipc(&stored.file, &stored.path, schema, batches)?;
        Ok(stored)
    }

    /// Writes the batches `fill` hands to its writer, as they come, as one
    /// Arrow IPC file `name` (all of `schema`): a producer streams into the
    /// store without holding its batches. Returns `fill`'s result too.
    pub fn put_with<T>(
        &self,
        name: &str,
        schema: &SchemaRef,
        fill: impl FnOnce(&mut dyn FnMut(RecordBatch) -> Result<()>) -> Result<T>,
    ) -> Result<(Stored, T)> {
        let stored = self.create(name)?;
        let path = stored.path.display().to_string();
        let mut w = FileWriter::try_new(std::io::BufWriter::new(&stored.file), schema)
            .map_err(|e| AsamError::arrow(format!("open {path}"), e))?;
        let out = fill(&mut |b: RecordBatch| {
            w.write(&b)
                .map_err(|e| AsamError::arrow(format!("write {path}"), e))
        })?;
        w.finish()
            .map_err(|e| AsamError::arrow(format!("finish {path}"), e))?;
        drop(w);
        Ok((stored, out))
    }

    /// Writes `text` as file `name` (the SAM header travels with the batches).
    pub fn put_text(&self, name: &str, text: &str) -> Result<Stored> {
        let stored = self.create(name)?;
        (&stored.file)
            .write_all(text.as_bytes())
            .map_err(|e| AsamError::io(&stored.path, e))?;
        Ok(stored)
    }
}

/// A fresh private directory `parent/<prefix>XXXXXX` (mode 0700; the
/// parent is created if missing), removed on drop.
pub fn private_dir(parent: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    std::fs::create_dir_all(parent).map_err(|e| AsamError::io(parent, e))?;
    // tempfile leaves the mode to the umask (often 0755).
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
        .map_err(|e| AsamError::io(parent, e))
}

/// A new file at `path`, ours only (mode 0600), never through a symlink.
pub fn create_new(path: &Path) -> Result<File> {
    testbed_proc::create_private_file(path).map_err(|e| AsamError::io(path, e))
}

/// Writes `batches` (all of `schema`) into `file` as one Arrow IPC file.
pub fn write_ipc(
    file: &File,
    path: &Path,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<()> {
    let ctx = |what: &str| format!("{what} {}", path.display());
    let mut w = FileWriter::try_new(std::io::BufWriter::new(file), schema)
        .map_err(|e| AsamError::arrow(ctx("open"), e))?;
    for b in batches {
        w.write(b).map_err(|e| AsamError::arrow(ctx("write"), e))?;
    }
    w.finish().map_err(|e| AsamError::arrow(ctx("finish"), e))
}

/// Maps the stored IPC file and returns its batches, whose buffers point
/// into the mapping (kept alive by the buffers themselves).
pub fn get(stored: &Stored) -> Result<Vec<RecordBatch>> {
    map_file(&stored.file, &stored.path)
}

/// Maps an IPC file opened by the caller (another process's stage output
/// in a private directory: see `workflow::shared`) and returns its batches.
pub fn map_file(file: &File, path: &Path) -> Result<Vec<RecordBatch>> {
    // SAFETY: a mapping is sound while nothing changes the file. We created
    // it new (O_EXCL, O_NOFOLLOW, mode 0600) in a 0700 directory we made,
    // map it through a descriptor opened without following symlinks, and
    // never write it after it is complete: only a process of our own user
    // or root could still change it.
    let map = unsafe { memmap2::Mmap::map(file) }.map_err(|e| AsamError::io(path, e))?;
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
    // arrow 59's schema conversion panics on a type it does not know (a
    // damaged or foreign file): an error here, not a crash.
    let schema = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fb_to_schema(schema)))
        .map_err(|_| bad("a schema this reader cannot convert".into()))?;
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

/// The text of a stored file.
pub fn get_text(stored: &Stored) -> Result<String> {
    let mut f = &stored.file;
    let mut text = String::new();
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.read_to_string(&mut text))
        .map_err(|e| AsamError::io(&stored.path, e))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_store_is_a_private_dir_of_new_files_removed_on_drop() {
        let parent = tempfile::tempdir().unwrap();
        let store = Store::create_in(&parent.path().join("shm")).unwrap();
        let dir = store.dir().to_path_buf();
        assert_eq!(mode(&dir), 0o700);
        let t = store.put_text("header.sam", "@HD\tVN:1.6\n").unwrap();
        assert_eq!(mode(t.path()), 0o600);
        assert_eq!(get_text(&t).unwrap(), "@HD\tVN:1.6\n");
        // A name is written once: a second put (or a planted file) fails.
        assert!(store.put_text("header.sam", "x").is_err());
        let victim = parent.path().join("victim");
        std::fs::write(&victim, "mine").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("planted.arrow")).unwrap();
        let schema = crate::schema::schema();
        assert!(store.put("planted.arrow", &schema, &[]).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
        drop(store);
        assert!(!dir.exists());
    }

    #[test]
    fn a_store_is_read_through_its_descriptor_not_its_path() {
        let parent = tempfile::tempdir().unwrap();
        let store = Store::create_in(parent.path()).unwrap();
        let schema = crate::schema::schema();
        let s = store.put("a.arrow", &schema, &[]).unwrap();
        // Another file swapped in under the name is not what is read.
        std::fs::remove_file(s.path()).unwrap();
        std::fs::write(s.path(), "not an arrow file").unwrap();
        assert!(get(&s).unwrap().is_empty());
    }
}
