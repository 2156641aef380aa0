//! A user's own kernel tree (`kind = "local-tree"`): that it is a kernel
//! tree, what identifies its content for the cache key, and whether kbuild
//! can build it out of tree.
//!
//! A git checkout is identified by HEAD's commit plus a hash of `git diff
//! --binary HEAD` and of every untracked file git does not ignore; a plain
//! directory by a hash over every file's relative path, mode and content.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::inputs::kernel::KernelError;
use crate::inputs::kernel::descriptor::{Descriptor, TreePin};
use crate::inputs::kernel::hashing::{self, KeyHasher};

/// What identified a tree when its key was computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeId {
    pub path: PathBuf,
    /// None for a plain directory.
    pub git: Option<GitState>,
    /// git: over the diff against HEAD and the untracked files; plain
    /// directory: over every file.
    pub content_sha256: String,
    /// Files the content hash read (untracked ones for a git checkout).
    pub files: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitState {
    pub commit: String,
    /// Tracked changes against HEAD or untracked files that are not ignored.
    pub dirty: bool,
}

impl TreeId {
    /// The tree's part of the cache key (its place on disk is not).
    pub fn key_source(&self) -> String {
        match &self.git {
            Some(g) => format!("git {} {}", g.commit, self.content_sha256),
            None => format!("dir {}", self.content_sha256),
        }
    }

    /// One line for descriptions and progress.
    pub fn describe(&self) -> String {
        match &self.git {
            Some(g) => format!(
                "{} (git {}{})",
                self.path.display(),
                &g.commit[..12.min(g.commit.len())],
                if g.dirty { ", dirty" } else { "" }
            ),
            None => format!(
                "{} (directory, content {})",
                self.path.display(),
                &self.content_sha256[..12]
            ),
        }
    }

    /// For meta.json: what identified the tree.
    pub fn inputs(&self) -> Vec<(&'static str, String)> {
        let (commit, dirty) = match &self.git {
            Some(g) => (g.commit.clone(), if g.dirty { "yes" } else { "no" }),
            None => (String::new(), "n/a (not a git checkout)"),
        };
        vec![
            ("tree_path", self.path.display().to_string()),
            ("tree_commit", commit),
            ("tree_dirty", dirty.to_string()),
            ("tree_content_sha256", self.content_sha256.clone()),
        ]
    }
}

/// Fails unless `tree.path` is a directory holding a kernel Makefile.
pub fn check(desc: &Descriptor, pin: &TreePin) -> Result<(), KernelError> {
    let bad = |what: String| KernelError::Descriptor {
        path: desc.path.clone(),
        message: format!(
            "field `tree.path` = \"{}\": {} {what}",
            pin.written,
            pin.path.display()
        ),
    };
    if !pin.path.exists() {
        return Err(bad("does not exist".into()));
    }
    if !pin.path.is_dir() {
        return Err(bad("is not a directory".into()));
    }
    let makefile = pin.path.join("Makefile");
    let text = std::fs::read_to_string(&makefile).unwrap_or_default();
    let has = |var: &str| {
        text.lines()
            .take(20)
            .any(|l| l.split('=').next().is_some_and(|k| k.trim() == var))
    };
    if !(has("VERSION") && has("PATCHLEVEL")) {
        return Err(bad(
            "is not a kernel tree (no Makefile setting VERSION and PATCHLEVEL at its top)".into(),
        ));
    }
    Ok(())
}

/// The tree's identity, computed once per process: the key is asked for
/// more than once per invocation, and the answers must agree.
pub fn identify_once(desc: &Descriptor, pin: &TreePin) -> Result<TreeId, KernelError> {
    static SEEN: Mutex<BTreeMap<PathBuf, TreeId>> = Mutex::new(BTreeMap::new());
    // Unit tests change a tree between two looks on purpose.
    if !cfg!(test)
        && let Some(id) = SEEN.lock().ok().and_then(|m| m.get(&pin.path).cloned())
    {
        return Ok(id);
    }
    let id = identify(desc, pin)?;
    if let Ok(mut m) = SEEN.lock() {
        m.insert(pin.path.clone(), id.clone());
    }
    Ok(id)
}

/// The tree's identity, from its content as it is now.
pub fn identify(desc: &Descriptor, pin: &TreePin) -> Result<TreeId, KernelError> {
    check(desc, pin)?;
    let path = pin.path.clone();
    // `.git` is a directory in a checkout and a file in a worktree.
    if !path.join(".git").exists() {
        let d = hashing::hash_tree(&path)?;
        return Ok(TreeId {
            path,
            git: None,
            content_sha256: d.sha256,
            files: d.files,
        });
    }
    let commit = String::from_utf8_lossy(&git(&path, &["rev-parse", "--verify", "HEAD"])?)
        .trim()
        .to_string();
    // Raw bytes: sources are not all UTF-8, and a lossy conversion could
    // make two different diffs hash alike.
    let diff = git(
        &path,
        &[
            "diff",
            "--binary",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "HEAD",
            "--",
        ],
    )?;
    let listed = git(&path, &["ls-files", "-z", "--others", "--exclude-standard"])?;
    let mut untracked = Vec::new();
    for name in listed.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let rel = PathBuf::from(std::ffi::OsStr::from_bytes(name));
        if let Some(e) = hashing::tree_entry(&path.join(&rel))? {
            untracked.push((rel, e));
        }
    }
    untracked.sort_by(|a, b| a.0.as_os_str().as_bytes().cmp(b.0.as_os_str().as_bytes()));
    let files = hashing::hash_entries(&path, &untracked)?;
    let content_sha256 = KeyHasher::default()
        .part("diff", &diff)
        .part("untracked", files.sha256.as_bytes())
        .finish();
    Ok(TreeId {
        git: Some(GitState {
            commit,
            dirty: !diff.is_empty() || !untracked.is_empty(),
        }),
        path,
        content_sha256,
        files: untracked.len(),
    })
}

/// stdout of a read-only git command in `dir`.
fn git(dir: &Path, args: &[&str]) -> Result<Vec<u8>, KernelError> {
    let mut cmd = Command::new("git");
    // No index refresh written into the user's .git, no pager, no locale.
    cmd.arg("-C")
        .arg(dir)
        .arg("--no-optional-locks")
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("LC_ALL", "C");
    let out = cmd.output().map_err(|e| KernelError::ToolMissing {
        tool: "git".into(),
        hint: "apt-get install git".into(),
        source: e,
    })?;
    if !out.status.success() {
        return Err(KernelError::CommandFailed {
            command: format!("git {}", args.join(" ")),
            dir: dir.to_path_buf(),
            status: out.status.to_string(),
            tail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out.stdout)
}

/// Why kbuild would refuse to build `src` out of tree (`make O=`): its
/// "source tree is not clean" check, word for word.
pub fn in_tree_build_state(src: &Path) -> Option<&'static str> {
    [".config", "include/config", "arch/x86/include/generated"]
        .into_iter()
        .find(|p| src.join(p).exists())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::kernel::descriptor;

    const MAKEFILE: &str =
        "# SPDX-License-Identifier: GPL-2.0\nVERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 0\n";

    fn git_in(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.org")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.org")
            .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    /// A descriptor file in `dir` pointing at `tree` (as written).
    fn descriptor_for(dir: &Path, tree: &str) -> Descriptor {
        let text = format!(
            "kind = \"local-tree\"\n[tree]\npath = \"{tree}\"\n[config]\nbase = \"tinyconfig\"\nfragments = []\n"
        );
        let path = dir.join("mine.toml");
        std::fs::write(&path, &text).unwrap();
        descriptor::load(dir, path.to_str().unwrap()).unwrap()
    }

    fn pin(d: &Descriptor) -> TreePin {
        match &d.kind {
            descriptor::Kind::SourceBuild(sb) => match &sb.source {
                descriptor::Source::Tree(t) => t.clone(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    fn kernel_tree(root: &Path) {
        std::fs::create_dir_all(root.join("init")).unwrap();
        std::fs::write(root.join("Makefile"), MAKEFILE).unwrap();
        std::fs::write(root.join("init/main.c"), "int main;\n").unwrap();
        std::fs::write(root.join(".gitignore"), "*.o\n").unwrap();
    }

    #[test]
    fn git_checkout_identity_follows_changes_and_untracked_files() {
        let t = tempfile::tempdir().unwrap();
        let tree = t.path().join("linux");
        kernel_tree(&tree);
        git_in(&tree, &["init", "-q"]);
        git_in(&tree, &["add", "-A"]);
        git_in(&tree, &["commit", "-q", "-m", "base"]);
        let d = descriptor_for(t.path(), "linux");
        let p = pin(&d);
        let clean = identify(&d, &p).unwrap();
        let g = clean.git.clone().unwrap();
        assert_eq!(g.commit.len(), 40);
        assert!(!g.dirty);
        assert_eq!(identify(&d, &p).unwrap(), clean, "nothing changed");

        std::fs::write(tree.join("init/main.c"), "int main2;\n").unwrap();
        let edited = identify(&d, &p).unwrap();
        assert!(edited.git.as_ref().unwrap().dirty);
        assert_ne!(edited.key_source(), clean.key_source(), "tracked edit");

        std::fs::write(tree.join("new.c"), "x\n").unwrap();
        let untracked = identify(&d, &p).unwrap();
        assert_eq!(untracked.files, 1);
        assert_ne!(
            untracked.key_source(),
            edited.key_source(),
            "untracked file"
        );
        std::fs::write(tree.join("new.c"), "y\n").unwrap();
        let changed = identify(&d, &p).unwrap();
        assert_ne!(
            changed.key_source(),
            untracked.key_source(),
            "untracked content"
        );

        // Ignored files (build outputs) are not the tree's content.
        std::fs::write(tree.join("init/main.o"), "obj").unwrap();
        assert_eq!(identify(&d, &p).unwrap().key_source(), changed.key_source());

        // Committing the same content: clean again, a new commit id.
        git_in(&tree, &["add", "-A"]);
        git_in(&tree, &["commit", "-q", "-m", "mine"]);
        let committed = identify(&d, &p).unwrap();
        assert!(!committed.git.as_ref().unwrap().dirty);
        assert_ne!(committed.git.as_ref().unwrap().commit, g.commit);
        let inputs: BTreeMap<_, _> = committed.inputs().into_iter().collect();
        assert_eq!(inputs["tree_dirty"], "no");
        assert_eq!(inputs["tree_path"], tree.display().to_string());
    }

    #[test]
    fn plain_directory_identity_is_its_content() {
        let t = tempfile::tempdir().unwrap();
        let tree = t.path().join("src");
        kernel_tree(&tree);
        let d = descriptor_for(t.path(), &tree.display().to_string());
        let p = pin(&d);
        let a = identify(&d, &p).unwrap();
        assert!(a.git.is_none());
        assert_eq!(a.files, 3);
        assert_eq!(identify(&d, &p).unwrap(), a);
        std::fs::write(tree.join("init/new.c"), "x\n").unwrap();
        assert_ne!(identify(&d, &p).unwrap().key_source(), a.key_source());
        // Where the tree lies is not part of its identity.
        let moved = t.path().join("moved");
        std::fs::rename(&tree, &moved).unwrap();
        let d2 = descriptor_for(t.path(), "moved");
        let b = identify(&d2, &pin(&d2)).unwrap();
        std::fs::remove_file(moved.join("init/new.c")).unwrap();
        let c = identify(&d2, &pin(&d2)).unwrap();
        assert_ne!(b.key_source(), c.key_source());
        assert_eq!(c.key_source(), a.key_source());
    }

    #[test]
    fn missing_or_foreign_trees_name_file_and_field() {
        let t = tempfile::tempdir().unwrap();
        let d = descriptor_for(t.path(), "../nowhere/linux");
        let err = identify(&d, &pin(&d)).unwrap_err().to_string();
        assert!(
            err.contains("mine.toml")
                && err.contains("tree.path")
                && err.contains("../nowhere/linux")
                && err.contains("does not exist"),
            "{err}"
        );
        let not_kernel = t.path().join("proj");
        std::fs::create_dir_all(&not_kernel).unwrap();
        std::fs::write(not_kernel.join("Makefile"), "all:\n\techo hi\n").unwrap();
        let d = descriptor_for(t.path(), "proj");
        let err = identify(&d, &pin(&d)).unwrap_err().to_string();
        assert!(
            err.contains("mine.toml")
                && err.contains("tree.path")
                && err.contains("not a kernel tree"),
            "{err}"
        );
    }

    #[test]
    fn in_tree_build_state_is_what_kbuild_refuses() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(in_tree_build_state(t.path()), None);
        std::fs::create_dir_all(t.path().join("include/config")).unwrap();
        assert_eq!(in_tree_build_state(t.path()), Some("include/config"));
    }
}
