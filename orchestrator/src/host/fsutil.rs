//! File writes that never leave a half-written file behind, a file's
//! sha256, and where a byte offset stands in a file's text.

use std::io::{Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

/// Writes to a temporary file beside `path`, syncs it, then renames it over
/// `path`: readers see the old file or the whole new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The sha256 of a file's content (hex) and its size, the error naming
/// the file.
pub fn sha256_file(path: &Path) -> std::io::Result<(String, u64)> {
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let mut file = std::fs::File::open(path).map_err(named)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(named)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), bytes))
}

/// Creates a directory (and parents), naming it in the error.
pub fn create_dir(path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("create {}: {e}", path.display())))
}

/// 1-based line and column of a byte offset in a file's text.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    // An offset inside a multi-byte character counts as that character.
    let before = &source[..source.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |p| before.len() - p - 1)
        + 1;
    (line, col)
}
