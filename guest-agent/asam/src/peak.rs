//! Peak memory of a stage that runs inside this process (ArrowSAM's), by
//! the measure `wait4` gives an external tool: the process's resident
//! high-water mark. Linux keeps it as VmHWM and lets a process reset it to
//! the current resident size (`5` into /proc/self/clear_refs, since 4.0),
//! so each stage's peak is read on its own. And the bytes a tmpfs store
//! directory holds, which belong to no process.

use std::path::Path;

use crate::{AsamError, Result};

/// Starts a new high-water mark at the current resident size.
pub fn reset() -> Result<()> {
    let path = Path::new("/proc/self/clear_refs");
    std::fs::write(path, "5").map_err(|e| AsamError::io(path, e))
}

/// The resident high-water mark since the last [`reset`] (or the start).
pub fn high_water_bytes() -> Result<u64> {
    let path = Path::new("/proc/self/status");
    let text = std::fs::read_to_string(path).map_err(|e| AsamError::io(path, e))?;
    parse_hwm(&text).ok_or_else(|| AsamError::Invalid(format!("{}: no VmHWM line", path.display())))
}

fn parse_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes allocated to the files directly in `dir` (blocks, not lengths:
/// what tmpfs holds in memory).
pub fn dir_bytes(dir: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| AsamError::io(dir, e))? {
        let entry = entry.map_err(|e| AsamError::io(dir, e))?;
        let meta = entry
            .metadata()
            .map_err(|e| AsamError::io(entry.path(), e))?;
        if meta.is_file() {
            total += meta.blocks() * 512;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_high_water_mark_follows_a_touched_allocation_and_resets() {
        reset().unwrap();
        let before = high_water_bytes().unwrap();
        let mut big = vec![0u8; 64 << 20];
        for i in (0..big.len()).step_by(4096) {
            big[i] = 1;
        }
        std::hint::black_box(&big);
        let during = high_water_bytes().unwrap();
        assert!(during >= before + (60 << 20), "{before} -> {during}");
        drop(big);
        reset().unwrap();
        let after = high_water_bytes().unwrap();
        assert!(after + (60 << 20) <= during, "{during} -> {after}");
    }

    #[test]
    fn a_directory_counts_its_files_blocks() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(dir_bytes(dir.path()).unwrap(), 0);
        std::fs::write(dir.path().join("a"), vec![1u8; 100_000]).unwrap();
        let n = dir_bytes(dir.path()).unwrap();
        assert!((100_000..200_000).contains(&n), "{n}");
        assert_eq!(
            parse_hwm("VmPeak:\t 9 kB\nVmHWM:\t  2048 kB\n"),
            Some(2 << 20)
        );
    }
}
