//! What `testbed verify`, `pack` and `unpack` check in a run directory,
//! beyond the output files the manifest lists (outputs.rs):
//!
//! - the manifest itself: every write of `manifest.json` also writes
//!   `manifest.json.sha256` beside it (`sha256sum -c` reads it), so an
//!   edited field shows;
//! - the kernel patches a run booted: their sha256 is in the manifest
//!   (`inputs.kernel.patch_sha256`), checked when `pack` adds them and in
//!   a packed run's `kernel/patches/`;
//! - the files `pack` adds that the run did not write (figures, claims,
//!   report, the kernel's config and patches): listed with size and
//!   sha256 in the packed run's `packed.json`, and checked against it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::manifest::{self, Manifest, ManifestError};
use super::outputs::{self, OutputFile, PACKED_KERNEL_DIR};

/// The manifest's digest, beside it.
pub const MANIFEST_DIGEST: &str = "manifest.json.sha256";

/// The index of the files `pack` added to a run, inside the packed run.
pub const PACK_INDEX: &str = "packed.json";

/// `packed.json`: what `pack` added beyond the manifest's outputs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackIndex {
    pub files: Vec<OutputFile>,
}

/// `<manifest>.sha256` for a manifest at `path`.
pub fn digest_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256");
    path.with_file_name(name)
}

/// The digest file's line for `bytes` written as `name`, as `sha256sum`
/// writes it.
pub fn digest_line(bytes: &[u8], name: &str) -> String {
    format!("{}  {name}\n", hex::encode(Sha256::digest(bytes)))
}

/// What is wrong with the manifest of `run` against its digest, if
/// anything.
pub fn check_manifest(run: &Path) -> Option<String> {
    let path = run.join("manifest.json");
    let digest = digest_path(&path);
    let want = match std::fs::read_to_string(&digest) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(format!(
                "manifest.json: no {MANIFEST_DIGEST} beside it, so the manifest itself cannot be checked (written before testbed recorded its digest, or removed)"
            ));
        }
        Err(e) => return Some(format!("{MANIFEST_DIGEST}: {e}")),
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return Some(format!("manifest.json: {e}")),
    };
    let want = want.split_whitespace().next().unwrap_or("");
    let now = hex::encode(Sha256::digest(&bytes));
    (now != want).then(|| {
        format!(
            "manifest.json: its sha256 is {now}, {MANIFEST_DIGEST} records {want} (the manifest was edited after the run wrote it)"
        )
    })
}

/// One run's check: the manifest against its digest, every output file
/// against the manifest, and for a packed run the files `pack` added.
#[derive(Debug, Default)]
pub struct RunCheck {
    /// Files that match their record (outputs and packed files).
    pub matched: usize,
    pub bytes: u64,
    pub rows: u64,
    /// The output files the manifest lists.
    pub recorded: usize,
    /// Each file that differs, with why; the manifest's own first.
    pub problems: Vec<String>,
    /// Output files the manifest does not list (written after the run).
    pub unrecorded: Vec<String>,
}

impl RunCheck {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks `run` (see [`RunCheck`]); the manifest as read. An unreadable
/// manifest is an error.
pub fn check_run(run: &Path) -> Result<(Manifest, RunCheck), ManifestError> {
    let mut c = RunCheck::default();
    c.problems.extend(check_manifest(run));
    let m = manifest::read(&run.join("manifest.json"))?;
    c.recorded = m.outputs.len();
    if m.outputs.is_empty() {
        c.problems.push(
            "manifest.json records no output files (written before testbed recorded them, or the run did not finish): nothing to check them against".into(),
        );
    }
    let v = outputs::verify(run, &m.outputs);
    c.matched += v.matched;
    c.bytes += v.bytes;
    c.rows += v.rows;
    c.problems.extend(v.problems);
    c.unrecorded = v.unrecorded;
    let index_path = run.join(PACK_INDEX);
    if index_path.is_file() {
        match read_index(&index_path) {
            Ok(index) => {
                let v = outputs::verify(run, &index.files);
                c.matched += v.matched;
                c.bytes += v.bytes;
                c.problems.extend(
                    v.problems
                        .into_iter()
                        .map(|p| format!("{p} (packed: {PACK_INDEX}'s record)")),
                );
            }
            Err(e) => c.problems.push(e),
        }
        c.problems.extend(packed_patch_problems(run, &m));
    }
    Ok((m, c))
}

fn read_index(path: &Path) -> Result<PackIndex, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{PACK_INDEX}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{PACK_INDEX}: not a pack index ({e})"))
}

/// The kernel patches of a packed run against the sha256 the manifest
/// recorded when the run booted them.
fn packed_patch_problems(run: &Path, m: &Manifest) -> Vec<String> {
    let Some(k) = &m.inputs.kernel else {
        return Vec::new();
    };
    let dir = run.join(PACKED_KERNEL_DIR).join("patches");
    k.patch_sha256
        .iter()
        // A patch the kernel cache no longer held was not packed (pack
        // said so).
        .filter(|(name, _)| dir.join(name).exists())
        .filter_map(|(name, want)| {
            patch_problem(&dir.join(name), want)
                .map(|why| format!("{PACKED_KERNEL_DIR}/patches/{name}: {why}"))
        })
        .collect()
}

/// Why the patch at `path` is not the one whose sha256 is `want`.
pub fn patch_problem(path: &Path, want: &str) -> Option<String> {
    match crate::host::fsutil::sha256_file(path) {
        Ok((now, _)) if now == want => None,
        Ok((now, _)) => Some(format!(
            "its sha256 is {now}, the manifest records {want} for the patch the run's kernel was built with"
        )),
        Err(e) => Some(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_line_is_sha256sums() {
        assert_eq!(
            digest_line(b"abc", "manifest.json"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  manifest.json\n"
        );
        assert_eq!(
            digest_path(Path::new("/r/manifest.json")),
            Path::new("/r/manifest.json.sha256")
        );
    }

    #[test]
    fn an_edited_or_unsealed_manifest_is_named() {
        let t = tempfile::tempdir().unwrap();
        let m = t.path().join("manifest.json");
        std::fs::write(&m, "{\"seed\": 1}").unwrap();
        let missing = check_manifest(t.path()).unwrap();
        assert!(missing.contains("no manifest.json.sha256"), "{missing}");
        std::fs::write(
            digest_path(&m),
            digest_line(b"{\"seed\": 1}", "manifest.json"),
        )
        .unwrap();
        assert_eq!(check_manifest(t.path()), None);
        std::fs::write(&m, "{\"seed\": 2}").unwrap();
        let edited = check_manifest(t.path()).unwrap();
        assert!(
            edited.starts_with("manifest.json: its sha256 is") && edited.contains("edited"),
            "{edited}"
        );
    }
}
