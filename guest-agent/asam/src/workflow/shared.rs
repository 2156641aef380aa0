//! The store the ArrowSAM placement's stage processes share: a private
//! directory (mode 0700, ours) on tmpfs made by the workflow driver; each
//! stage process maps its inputs from it and writes its outputs into it.
//! This is the cross-process form of [`crate::store`] (the paper's Plasma
//! store): the next process maps the Arrow IPC file, no copy, no decode.
//!
//! A stage process is handed the directory's path, so it checks that the
//! directory is still private and ours before trusting anything in it, and
//! opens files without following symlinks.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::{AsamError, Result};

/// A shared store directory that was checked to be private and ours.
#[derive(Debug, Clone)]
pub struct SharedDir {
    dir: PathBuf,
}

/// Makes a new private store directory under `parent` (removed on drop).
pub fn create(parent: &Path) -> Result<tempfile::TempDir> {
    crate::store::private_dir(parent, "testbed-asam-flow-")
}

impl SharedDir {
    /// Opens `dir` after checking it is a real directory (not a symlink),
    /// owned by this user, and closed to everyone else.
    pub fn open(dir: &Path) -> Result<SharedDir> {
        let m = std::fs::symlink_metadata(dir).map_err(|e| AsamError::io(dir, e))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        let refuse = |why: &str| {
            Err(AsamError::Invalid(format!(
                "{}: not a private store directory: {why}",
                dir.display()
            )))
        };
        if !m.file_type().is_dir() {
            return refuse("not a directory");
        }
        if m.uid() != euid {
            return refuse(&format!("owned by uid {}, not {euid}", m.uid()));
        }
        if m.mode() & 0o077 != 0 {
            return refuse(&format!("mode {:o} lets others in", m.mode() & 0o777));
        }
        Ok(SharedDir {
            dir: dir.to_path_buf(),
        })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn create(&self, name: &str) -> Result<(File, PathBuf)> {
        let path = self.path(name);
        Ok((crate::store::create_new(&path)?, path))
    }

    fn open_file(&self, name: &str) -> Result<(File, PathBuf)> {
        let path = self.path(name);
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| AsamError::io(&path, e))?;
        let m = file.metadata().map_err(|e| AsamError::io(&path, e))?;
        if !m.file_type().is_file() {
            return Err(AsamError::Invalid(format!(
                "{}: not a regular file",
                path.display()
            )));
        }
        Ok((file, path))
    }

    /// Writes `batches` as the Arrow IPC file `name` (which must be new).
    pub fn put(&self, name: &str, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<()> {
        let (file, path) = self.create(name)?;
        crate::store::write_ipc(&file, &path, schema, batches)
    }

    /// Maps `name` and returns its batches (zero-copy).
    pub fn get(&self, name: &str) -> Result<Vec<RecordBatch>> {
        let (file, path) = self.open_file(name)?;
        crate::store::map_file(&file, &path)
    }

    pub fn put_text(&self, name: &str, text: &str) -> Result<()> {
        let (mut file, path) = self.create(name)?;
        file.write_all(text.as_bytes())
            .map_err(|e| AsamError::io(&path, e))
    }

    pub fn get_text(&self, name: &str) -> Result<String> {
        let (mut file, path) = self.open_file(name)?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|e| AsamError::io(&path, e))?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_a_private_directory_of_ours_is_opened() {
        let parent = tempfile::tempdir().unwrap();
        let d = create(parent.path()).unwrap();
        let s = SharedDir::open(d.path()).unwrap();
        s.put_text("header.sam", "@HD\tVN:1.6\n").unwrap();
        assert_eq!(s.get_text("header.sam").unwrap(), "@HD\tVN:1.6\n");
        assert!(s.put_text("header.sam", "again").is_err());
        let schema = crate::schema::schema();
        s.put("a.arrow", &schema, &[]).unwrap();
        assert!(s.get("a.arrow").unwrap().is_empty());

        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = SharedDir::open(d.path()).unwrap_err().to_string();
        assert!(e.contains("mode 755"), "{e}");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = parent.path().join("link");
        std::os::unix::fs::symlink(d.path(), &link).unwrap();
        assert!(SharedDir::open(&link).is_err());
        // A planted symlink inside is not followed.
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("planted")).unwrap();
        assert!(s.get_text("planted").is_err());
    }
}
