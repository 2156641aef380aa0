//! Patch series: `kernel-configs/patches/<series>/series` lists patch files in
//! order. Each is dry-run first with GNU patch (no fuzz: a hunk that only
//! applies with fuzz is stale), and a failure names the file and hunk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::inputs::kernel::KernelError;

pub const SERIES_FILE: &str = "series";

/// Patch files of series `name`, in order, from the first of `dirs` that
/// has `patches/<name>/series`.
pub fn read_series(dirs: &[PathBuf], name: &str) -> Result<Vec<PathBuf>, KernelError> {
    let at = |d: &PathBuf| d.join("patches").join(name);
    let dir = dirs
        .iter()
        .map(at)
        .find(|d| d.join(SERIES_FILE).is_file())
        .or_else(|| dirs.last().map(at))
        .unwrap_or_default();
    let series = dir.join(SERIES_FILE);
    let text = std::fs::read_to_string(&series).map_err(|e| KernelError::io(&series, e))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let entry = line.split('#').next().unwrap_or("").trim();
        if entry.is_empty() {
            continue;
        }
        let path = dir.join(entry);
        if entry.contains('/') || !path.is_file() {
            return Err(KernelError::Descriptor {
                path: series.clone(),
                message: format!(
                    "line {}: `{entry}` is not a patch file in {}",
                    i + 1,
                    dir.display()
                ),
            });
        }
        out.push(path);
    }
    Ok(out)
}

/// Apply one patch to `tree` (`-p1`), failing without touching the tree if
/// any hunk does not apply.
pub fn apply(tree: &Path, patch: &Path) -> Result<(), KernelError> {
    let text = std::fs::read_to_string(patch).map_err(|e| KernelError::io(patch, e))?;
    run_patch(tree, patch, &text, true)?;
    run_patch(tree, patch, &text, false)
}

fn run_patch(tree: &Path, patch: &Path, text: &str, dry_run: bool) -> Result<(), KernelError> {
    let mut cmd = Command::new("patch");
    cmd.args([
        "-p1",
        "--forward",
        "--batch",
        "--fuzz=0",
        "--no-backup-if-mismatch",
    ]);
    if dry_run {
        cmd.arg("--dry-run");
    }
    let out = cmd
        .arg("-i")
        .arg(patch)
        .current_dir(tree)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| KernelError::ToolMissing {
            tool: "patch".into(),
            hint: "apt-get install patch".into(),
            source: e,
        })?;
    if out.status.success() {
        return Ok(());
    }
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    Err(KernelError::PatchFailed {
        patch: patch.to_path_buf(),
        details: explain(&output, text),
    })
}

/// Turn GNU patch's output into "file F: hunk #N `@@ ... @@` FAILED at L".
pub fn explain(output: &str, patch_text: &str) -> String {
    let hunks = hunk_headers(patch_text);
    let mut file = String::new();
    let mut problems = Vec::new();
    let mut lines = output.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(f) = line
            .strip_prefix("checking file ")
            .or_else(|| line.strip_prefix("patching file "))
        {
            file = f.trim().trim_matches('\'').to_string();
        } else if let Some(rest) = line.strip_prefix("Hunk #") {
            let Some((num, after)) = rest.split_once(' ') else {
                continue;
            };
            if !after.starts_with("FAILED") {
                continue;
            }
            let header = num
                .parse::<usize>()
                .ok()
                .and_then(|n| hunks.get(&file).and_then(|h| h.get(n.wrapping_sub(1))))
                .map_or(String::new(), |h| format!(" `{h}`"));
            problems.push(format!(
                "file {file}: hunk #{num}{header} {}",
                after.trim_end_matches('.')
            ));
        } else if line.starts_with("can't find file to patch") {
            // The lines after quote the diff header; take the target path from it.
            let mut target = String::from("(unknown)");
            while let Some(next) = lines.peek() {
                if let Some(p) = next
                    .strip_prefix("|+++ ")
                    .or_else(|| next.strip_prefix("|--- "))
                {
                    target = strip_one(p);
                }
                if next.starts_with("No file to patch") || next.starts_with("File to patch") {
                    break;
                }
                lines.next();
            }
            problems.push(format!("file {target} does not exist in the source tree"));
        } else if line.starts_with("Reversed (or previously applied) patch detected") {
            problems.push(format!(
                "file {file}: already applied (reversed patch detected)"
            ));
        } else if let Some(msg) = line.strip_prefix("patch: **** ") {
            problems.push(msg.to_string());
        }
    }
    if problems.is_empty() {
        output.trim().to_string()
    } else {
        problems.join("; ")
    }
}

/// Hunk headers (`@@ -a,b +c,d @@ ctx`) per target file (after `-p1`).
fn hunk_headers(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut file = String::new();
    for line in text.lines() {
        if let Some(p) = line.strip_prefix("+++ ") {
            file = strip_one(p);
        } else if line.starts_with("@@ ") {
            out.entry(file.clone())
                .or_default()
                .push(line.trim().to_string());
        }
    }
    out
}

/// `b/fs/x.c\t2024-...` -> `fs/x.c` (what `-p1` leaves).
fn strip_one(p: &str) -> String {
    let p = p.split('\t').next().unwrap_or(p).trim();
    p.split_once('/').map_or(p, |(_, rest)| rest).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGINAL: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n";

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.txt"), ORIGINAL).unwrap();
        dir
    }

    const GOOD: &str =
        "--- a/src/a.txt\n+++ b/src/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n";
    /// Hunk 1 applies; hunk 2 expects text that is not there.
    const BAD: &str = "--- a/src/a.txt\n+++ b/src/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n@@ -7,3 +7,3 @@ context\n seven\n-EIGHT\n+8\n nine\n";

    #[test]
    fn good_patch_applies() {
        let t = tree();
        let p = t.path().join("0001-good.patch");
        std::fs::write(&p, GOOD).unwrap();
        apply(t.path(), &p).unwrap();
        let now = std::fs::read_to_string(t.path().join("src/a.txt")).unwrap();
        assert!(now.starts_with("one\nTWO\nthree\n"));
        // Applying it again is reported, not silently accepted.
        let err = apply(t.path(), &p).unwrap_err().to_string();
        assert!(err.contains("already applied"), "{err}");
    }

    #[test]
    fn failing_hunk_is_named_and_tree_untouched() {
        let t = tree();
        let p = t.path().join("0002-bad.patch");
        std::fs::write(&p, BAD).unwrap();
        let err = apply(t.path(), &p).unwrap_err().to_string();
        assert!(err.contains("0002-bad.patch"), "{err}");
        assert!(
            err.contains("file src/a.txt: hunk #2 `@@ -7,3 +7,3 @@ context` FAILED at 7"),
            "{err}"
        );
        // The dry run kept hunk #1 from landing.
        let now = std::fs::read_to_string(t.path().join("src/a.txt")).unwrap();
        assert_eq!(now, ORIGINAL);
    }

    #[test]
    fn missing_file_is_named() {
        let t = tree();
        let p = t.path().join("0003-missing.patch");
        std::fs::write(&p, GOOD.replace("src/a.txt", "src/gone.c")).unwrap();
        let err = apply(t.path(), &p).unwrap_err().to_string();
        assert!(err.contains("file src/gone.c does not exist"), "{err}");
    }

    #[test]
    fn series_order_and_bad_entry() {
        let dir = tempfile::tempdir().unwrap();
        let s = dir.path().join("patches/hooks");
        std::fs::create_dir_all(&s).unwrap();
        std::fs::write(s.join("0002-b.patch"), GOOD).unwrap();
        std::fs::write(s.join("0001-a.patch"), GOOD).unwrap();
        std::fs::write(
            s.join("series"),
            "# order\n0002-b.patch\n0001-a.patch # why\n",
        )
        .unwrap();
        let dirs = [dir.path().join("own"), dir.path().to_path_buf()];
        let got = read_series(&dirs, "hooks").unwrap();
        let names: Vec<_> = got
            .iter()
            .map(|p| p.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(names, vec!["0002-b.patch", "0001-a.patch"]);
        std::fs::write(s.join("series"), "0001-a.patch\n0009-nope.patch\n").unwrap();
        let err = read_series(&dirs, "hooks").unwrap_err().to_string();
        assert!(
            err.contains("line 2") && err.contains("0009-nope.patch"),
            "{err}"
        );
        // A series next to the descriptor comes before ours.
        let own = dirs[0].join("patches/hooks");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("0001-a.patch"), GOOD).unwrap();
        std::fs::write(
            own.join("series"),
            "0001-a.patch
",
        )
        .unwrap();
        assert_eq!(
            read_series(&dirs, "hooks").unwrap(),
            vec![own.join("0001-a.patch")]
        );
    }
}
