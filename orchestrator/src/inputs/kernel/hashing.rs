//! sha256 helpers.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::KernelError;

pub fn sha256_file(path: &Path) -> Result<String, KernelError> {
    let mut buf = vec![0u8; 1 << 20];
    Ok(hex::encode(digest_file(path, &mut buf)?))
}

/// sha256 of a file's content, reading through `buf`.
fn digest_file(path: &Path, buf: &mut [u8]) -> Result<[u8; 32], KernelError> {
    let mut file = std::fs::File::open(path).map_err(|e| KernelError::io(path, e))?;
    let mut hasher = Sha256::new();
    loop {
        let n = file.read(buf).map_err(|e| KernelError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

/// One entry of a hashed tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeEntry {
    /// A regular file; the executable bit matters to a build (scripts).
    File { exec: bool },
    /// A symbolic link, hashed by its target, never followed.
    Link,
}

/// What a tree hash covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeDigest {
    pub sha256: String,
    pub files: usize,
    pub bytes: u64,
}

/// The entry at `path`, or None for what a build does not read (sockets,
/// fifos, devices) and for directories.
pub fn tree_entry(path: &Path) -> Result<Option<TreeEntry>, KernelError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| KernelError::io(path, e))?;
    let t = meta.file_type();
    Ok(if t.is_file() {
        Some(TreeEntry::File {
            exec: meta.permissions().mode() & 0o111 != 0,
        })
    } else if t.is_symlink() {
        Some(TreeEntry::Link)
    } else {
        None
    })
}

/// Every regular file and symlink under `root`, as paths relative to it,
/// in a fixed order (sorted by name at each level).
pub fn walk_tree(root: &Path) -> Result<Vec<(PathBuf, TreeEntry)>, KernelError> {
    fn walk(
        root: &Path,
        rel: &Path,
        out: &mut Vec<(PathBuf, TreeEntry)>,
    ) -> Result<(), KernelError> {
        let dir = root.join(rel);
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| KernelError::io(&dir, e))? {
            names.push(entry.map_err(|e| KernelError::io(&dir, e))?.file_name());
        }
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        for name in names {
            let rel = rel.join(&name);
            let path = root.join(&rel);
            let t = std::fs::symlink_metadata(&path)
                .map_err(|e| KernelError::io(&path, e))?
                .file_type();
            if t.is_dir() {
                walk(root, &rel, out)?;
            } else if let Some(e) = tree_entry(&path)? {
                out.push((rel, e));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, Path::new(""), &mut out)?;
    Ok(out)
}

/// sha256 over each entry's relative path, kind and content, in the given
/// order. The contents are hashed on every core: a 6.1 tree is 1.5 GB.
pub fn hash_entries(
    root: &Path,
    entries: &[(PathBuf, TreeEntry)],
) -> Result<TreeDigest, KernelError> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(entries.len().max(1));
    let mut digests: Vec<Option<([u8; 32], u64)>> = vec![None; entries.len()];
    std::thread::scope(|s| -> Result<(), KernelError> {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                s.spawn(
                    move || -> Result<Vec<(usize, [u8; 32], u64)>, KernelError> {
                        let mut buf = vec![0u8; 1 << 20];
                        let mut out = Vec::new();
                        for (i, (rel, entry)) in entries.iter().enumerate().skip(w).step_by(workers)
                        {
                            let path = root.join(rel);
                            let (digest, len) = match entry {
                                TreeEntry::File { .. } => {
                                    let len = std::fs::symlink_metadata(&path)
                                        .map_err(|e| KernelError::io(&path, e))?
                                        .len();
                                    (digest_file(&path, &mut buf)?, len)
                                }
                                TreeEntry::Link => {
                                    let target = std::fs::read_link(&path)
                                        .map_err(|e| KernelError::io(&path, e))?;
                                    (Sha256::digest(target.as_os_str().as_bytes()).into(), 0)
                                }
                            };
                            out.push((i, digest, len));
                        }
                        Ok(out)
                    },
                )
            })
            .collect();
        for h in handles {
            let done = h.join().map_err(|_| {
                KernelError::io(root, std::io::Error::other("a hashing thread panicked"))
            })??;
            for (i, d, len) in done {
                digests[i] = Some((d, len));
            }
        }
        Ok(())
    })?;
    let mut h = KeyHasher::default();
    let mut bytes = 0;
    for ((rel, entry), d) in entries.iter().zip(&digests) {
        let Some((digest, len)) = d else {
            return Err(KernelError::io(rel, std::io::Error::other("not hashed")));
        };
        bytes += len;
        let kind: &[u8] = match entry {
            TreeEntry::File { exec: false } => b"file",
            TreeEntry::File { exec: true } => b"exec",
            TreeEntry::Link => b"link",
        };
        h.part("path", rel.as_os_str().as_bytes())
            .part("kind", kind)
            .part("content", digest);
    }
    Ok(TreeDigest {
        sha256: h.finish(),
        files: entries.len(),
        bytes,
    })
}

/// [`hash_entries`] over every file and symlink under `root`.
pub fn hash_tree(root: &Path) -> Result<TreeDigest, KernelError> {
    hash_entries(root, &walk_tree(root)?)
}

/// Hash of labelled parts; labels and lengths keep part boundaries unambiguous.
#[derive(Default)]
pub struct KeyHasher(Sha256);

impl KeyHasher {
    pub fn part(&mut self, label: &str, data: &[u8]) -> &mut Self {
        self.0.update(label.as_bytes());
        self.0.update([0]);
        self.0.update((data.len() as u64).to_le_bytes());
        self.0.update(data);
        self
    }

    pub fn finish(&self) -> String {
        hex::encode(self.0.clone().finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_hash_is_sha256() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn tree_hash_covers_paths_content_mode_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f"), b"one").unwrap();
        std::fs::write(root.join("top"), b"two").unwrap();
        let first = hash_tree(root).unwrap();
        assert_eq!((first.files, first.bytes), (2, 6));
        assert_eq!(hash_tree(root).unwrap(), first, "nothing changed");
        std::fs::write(root.join("a/b/f"), b"One").unwrap();
        let edited = hash_tree(root).unwrap();
        assert_ne!(edited.sha256, first.sha256, "content");
        std::fs::rename(root.join("top"), root.join("top2")).unwrap();
        let renamed = hash_tree(root).unwrap();
        assert_ne!(renamed.sha256, edited.sha256, "path");
        std::fs::set_permissions(root.join("top2"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let exec = hash_tree(root).unwrap();
        assert_ne!(exec.sha256, renamed.sha256, "executable bit");
        std::os::unix::fs::symlink("a/b/f", root.join("l")).unwrap();
        let linked = hash_tree(root).unwrap();
        assert_eq!(linked.files, 3);
        assert_ne!(linked.sha256, exec.sha256, "symlink");
        // An empty directory is not part of a build.
        std::fs::create_dir(root.join("empty")).unwrap();
        assert_eq!(hash_tree(root).unwrap(), linked);
    }

    #[test]
    fn key_parts_are_not_ambiguous() {
        let a = KeyHasher::default()
            .part("x", b"ab")
            .part("y", b"c")
            .finish();
        let b = KeyHasher::default()
            .part("x", b"a")
            .part("y", b"bc")
            .finish();
        assert_ne!(a, b);
    }
}
