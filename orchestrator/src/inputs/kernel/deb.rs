//! Unpack chosen files of a Debian package without dpkg: a .deb is an `ar`
//! archive whose `data.tar.{xz,zst}` member holds the installed files.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::KernelError;

/// Compression of a single file inside the data tarball (e.g. `.ko.xz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Xz,
    Zstd,
}

/// Where to put one archive member.
pub struct Extract {
    /// Destination relative to the unpack root.
    pub dest: PathBuf,
    /// Decompress the member while writing it.
    pub decompress: Option<Codec>,
}

/// Extract the regular files that `select` maps (from a path like
/// `lib/modules/x/kernel/a.ko`) to a destination under `dest_root`.
/// Returns the destinations written, in archive order.
pub fn unpack(
    deb: &Path,
    dest_root: &Path,
    select: &dyn Fn(&Path) -> Option<Extract>,
) -> Result<Vec<PathBuf>, KernelError> {
    let bad = |message: String| KernelError::Deb {
        path: deb.to_path_buf(),
        message,
    };
    let file = std::fs::File::open(deb).map_err(|e| KernelError::io(deb, e))?;
    let mut archive = ar::Archive::new(file);
    while let Some(entry) = archive.next_entry() {
        let entry = entry.map_err(|e| bad(format!("bad ar archive: {e}")))?;
        let member = String::from_utf8_lossy(entry.header().identifier()).into_owned();
        let reader: Box<dyn Read + '_> = match member.as_str() {
            "data.tar.xz" => Box::new(liblzma::read::XzDecoder::new(entry)),
            "data.tar.zst" => Box::new(
                zstd::stream::read::Decoder::new(entry)
                    .map_err(|e| bad(format!("{member}: {e}")))?,
            ),
            "data.tar" => Box::new(entry),
            m if m.starts_with("data.tar") => {
                return Err(bad(format!("unsupported data member compression `{m}`")));
            }
            _ => continue,
        };
        return unpack_tar(reader, &member, dest_root, select).map_err(|e| match e {
            UnpackError::Kernel(k) => k,
            UnpackError::Archive(m) => bad(m),
        });
    }
    Err(bad("no data.tar.* member".into()))
}

enum UnpackError {
    Kernel(KernelError),
    Archive(String),
}

fn unpack_tar(
    reader: Box<dyn Read + '_>,
    member: &str,
    dest_root: &Path,
    select: &dyn Fn(&Path) -> Option<Extract>,
) -> Result<Vec<PathBuf>, UnpackError> {
    let arch_err = |e: std::io::Error| UnpackError::Archive(format!("{member}: {e}"));
    let mut tar = tar::Archive::new(reader);
    let mut written = Vec::new();
    for entry in tar.entries().map_err(arch_err)? {
        let mut entry = entry.map_err(arch_err)?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let raw_path = entry.path().map_err(arch_err)?.into_owned();
        let path = normalise(&raw_path);
        let Some(ex) = select(&path) else { continue };
        if !is_safe_relative(&ex.dest) {
            return Err(UnpackError::Archive(format!(
                "{member}: refusing unsafe destination {}",
                ex.dest.display()
            )));
        }
        let dest = dest_root.join(&ex.dest);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| UnpackError::Kernel(KernelError::io(parent, e)))?;
        }
        let mut out = std::fs::File::create(&dest)
            .map_err(|e| UnpackError::Kernel(KernelError::io(&dest, e)))?;
        let copied = match ex.decompress {
            None => std::io::copy(&mut entry, &mut out),
            Some(Codec::Xz) => {
                std::io::copy(&mut liblzma::read::XzDecoder::new(&mut entry), &mut out)
            }
            Some(Codec::Zstd) => zstd::stream::read::Decoder::new(&mut entry)
                .and_then(|mut d| std::io::copy(&mut d, &mut out)),
        };
        copied.map_err(|e| {
            UnpackError::Archive(format!("{member}: extracting {}: {e}", path.display()))
        })?;
        written.push(dest);
    }
    Ok(written)
}

/// `./lib/x` -> `lib/x`.
fn normalise(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect()
}

fn is_safe_relative(path: &Path) -> bool {
    path.components().all(|c| matches!(c, Component::Normal(_)))
        && path.components().next().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_strips_dot() {
        assert_eq!(
            normalise(Path::new("./lib/modules/a.ko")),
            PathBuf::from("lib/modules/a.ko")
        );
        assert!(!is_safe_relative(Path::new("../x")));
        assert!(!is_safe_relative(Path::new("/x")));
        assert!(is_safe_relative(Path::new("a/b")));
    }
}
