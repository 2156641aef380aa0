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

/// Fails unless every file of `names` holds the same in `a` and `b`:
/// Arrow files (`.arrow`) batch for batch, the others as text. The error
/// names the first file that differs, and where.
pub fn same_files(a: &SharedDir, b: &SharedDir, names: &[&str]) -> Result<()> {
    for name in names {
        let differs = if name.ends_with(".arrow") {
            let (x, y) = (a.get(name)?, b.get(name)?);
            if x.len() != y.len() {
                Some(format!("{} batches against {}", x.len(), y.len()))
            } else {
                x.iter()
                    .zip(&y)
                    .position(|(p, q)| p != q)
                    .map(|i| format!("batch {i} differs"))
            }
        } else {
            (a.get_text(name)? != b.get_text(name)?).then(|| "the text differs".to_string())
        };
        if let Some(why) = differs {
            return Err(AsamError::Invalid(format!(
                "{} and {}: {why}",
                a.path(name).display(),
                b.path(name).display()
            )));
        }
    }
    Ok(())
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

    #[test]
    fn stores_are_the_same_only_if_every_batch_and_text_is() {
        use arrow::array::{ArrayRef, Int32Array, RecordBatch};
        use arrow::datatypes::{DataType, Field, Schema};
        let parent = tempfile::tempdir().unwrap();
        let schema = std::sync::Arc::new(Schema::new(vec![Field::new(
            "flags",
            DataType::Int32,
            false,
        )]));
        let batch = |v: Vec<i32>| {
            RecordBatch::try_new(
                schema.clone(),
                vec![std::sync::Arc::new(Int32Array::from(v)) as ArrayRef],
            )
            .unwrap()
        };
        let store = |flags: Vec<Vec<i32>>, text: &str| {
            let d = create(parent.path()).unwrap();
            let s = SharedDir::open(d.path()).unwrap();
            let batches: Vec<RecordBatch> = flags.into_iter().map(batch).collect();
            s.put("flags.arrow", &schema, &batches).unwrap();
            s.put_text("recal.txt", text).unwrap();
            (d, s)
        };
        let names = ["flags.arrow", "recal.txt"];
        let (_a, a) = store(vec![vec![99, 147], vec![1123]], "t");
        let (_b, b) = store(vec![vec![99, 147], vec![1123]], "t");
        same_files(&a, &b, &names).unwrap();
        // One duplicate bit cleared in the second batch.
        let (_c, c) = store(vec![vec![99, 147], vec![99]], "t");
        let e = same_files(&a, &c, &names).unwrap_err().to_string();
        assert!(
            e.contains("flags.arrow") && e.contains("batch 1 differs"),
            "{e}"
        );
        let (_d, d) = store(vec![vec![99, 147], vec![1123]], "u");
        let e = same_files(&a, &d, &names).unwrap_err().to_string();
        assert!(e.contains("recal.txt") && e.contains("text differs"), "{e}");
    }
}
