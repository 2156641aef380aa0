//! sha256 helpers.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::KernelError;

pub fn sha256_file(path: &Path) -> Result<String, KernelError> {
    let mut file = std::fs::File::open(path).map_err(|e| KernelError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| KernelError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
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
