//! Cache key of a built kernel: every input that changes the image.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::patches;
use super::run::capture;
use super::tree::{self, TreeId};
use crate::inputs::kernel::KernelError;
use crate::inputs::kernel::descriptor::{Descriptor, Source, SourceBuild};
use crate::inputs::kernel::hashing::KeyHasher;

/// Bump when the artefact layout or build procedure changes.
const LAYOUT: &str = "source-build-v1";

/// The key and the resolved inputs it was computed from.
#[derive(Debug, Clone)]
pub struct BuildKey {
    pub key: String,
    pub fragments: Vec<PathBuf>,
    pub patches: Vec<PathBuf>,
    /// `gcc --version` first line.
    pub gcc: String,
    /// `pahole --version`, or "none".
    pub pahole: String,
    /// A local tree's identity (None for the Debian source).
    pub tree: Option<TreeId>,
}

/// Inputs as bytes, so the hashing is a pure function.
pub struct KeyInputs<'a> {
    pub descriptor: &'a str,
    /// The Debian tarball's sha256, or a local tree's `TreeId::key_source`.
    pub source_sha256: &'a str,
    pub base: &'a str,
    pub fragments: &'a [(String, Vec<u8>)],
    pub patches: &'a [(String, Vec<u8>)],
    pub toolchain: &'a [String],
}

pub fn hash(inputs: &KeyInputs<'_>) -> String {
    let mut h = KeyHasher::default();
    h.part("layout", LAYOUT.as_bytes())
        .part("descriptor", inputs.descriptor.as_bytes())
        .part(
            "source",
            inputs.source_sha256.to_ascii_lowercase().as_bytes(),
        )
        .part("base", inputs.base.as_bytes());
    for (name, data) in inputs.fragments {
        h.part("fragment", name.as_bytes()).part("content", data);
    }
    for (name, data) in inputs.patches {
        h.part("patch", name.as_bytes()).part("content", data);
    }
    for t in inputs.toolchain {
        h.part("tool", t.as_bytes());
    }
    h.finish()
}

/// `fragments/<name>.config` in the first of `dirs` that has it (else in
/// the last, for the error message).
pub fn fragment_path(dirs: &[PathBuf], name: &str) -> PathBuf {
    let at = |d: &PathBuf| d.join("fragments").join(format!("{name}.config"));
    dirs.iter()
        .map(at)
        .find(|p| p.is_file())
        .or_else(|| dirs.last().map(at))
        .unwrap_or_default()
}

pub fn compute(
    configs_dir: &Path,
    desc: &Descriptor,
    sb: &SourceBuild,
) -> Result<BuildKey, KernelError> {
    let dirs = desc.search_dirs(configs_dir);
    let mut fragment_paths = Vec::new();
    let mut fragments = Vec::new();
    for name in &sb.fragments {
        let path = fragment_path(&dirs, name);
        let data = std::fs::read(&path).map_err(|e| KernelError::Descriptor {
            path: desc.path.clone(),
            message: format!(
                "config.fragments: fragment `{name}` cannot be read at {}: {e}",
                path.display()
            ),
        })?;
        fragments.push((name.clone(), data));
        fragment_paths.push(path);
    }
    let patch_paths = match &sb.patch_series {
        Some(series) => patches::read_series(&dirs, series)?,
        None => Vec::new(),
    };
    let mut patch_data = Vec::new();
    for p in &patch_paths {
        let data = std::fs::read(p).map_err(|e| KernelError::io(p, e))?;
        let name = p
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        patch_data.push((name, data));
    }
    let gcc = first_line(&capture(Command::new("gcc").arg("--version"))?);
    // pahole writes the BTF; without it the build fails later with a clear message.
    let pahole = capture(Command::new("pahole").arg("--version"))
        .map(|s| first_line(&s))
        .unwrap_or_else(|_| "none".into());
    let (source, tree) = match &sb.source {
        Source::Package(pin) => (pin.sha256.clone(), None),
        Source::Tree(pin) => {
            let id = tree::identify_once(desc, pin)?;
            (id.key_source(), Some(id))
        }
    };
    let key = hash(&KeyInputs {
        descriptor: &desc.key_text()?,
        source_sha256: &source,
        base: &sb.base,
        fragments: &fragments,
        patches: &patch_data,
        toolchain: &[gcc.clone(), pahole.clone()],
    });
    Ok(BuildKey {
        key,
        fragments: fragment_paths,
        patches: patch_paths,
        gcc,
        pahole,
        tree,
    })
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(
        frags: &'a [(String, Vec<u8>)],
        patches: &'a [(String, Vec<u8>)],
        tools: &'a [String],
    ) -> KeyInputs<'a> {
        KeyInputs {
            descriptor: "kind = \"source-build\"\n",
            source_sha256: "ab",
            base: "tinyconfig",
            fragments: frags,
            patches,
            toolchain: tools,
        }
    }

    #[test]
    fn key_is_stable_and_sensitive() {
        let frags = vec![("vm-base".to_string(), b"CONFIG_PCI=y\n".to_vec())];
        let pats = vec![
            ("0001-a.patch".to_string(), b"a".to_vec()),
            ("0002-b.patch".to_string(), b"b".to_vec()),
        ];
        let tools = vec![
            "gcc (Debian 12.2.0-14) 12.2.0".to_string(),
            "v1.24".to_string(),
        ];
        let k = hash(&inputs(&frags, &pats, &tools));
        // Golden value: a change here silently invalidates every cached kernel.
        assert_eq!(k, hash(&inputs(&frags, &pats, &tools)));
        assert_eq!(
            k,
            "67055f62aae0808aaab22f3e3dd8e43fe819891c9ab11ffce4e56635f9548749"
        );

        let mut other = frags.clone();
        other[0].1 = b"CONFIG_PCI=n\n".to_vec();
        assert_ne!(k, hash(&inputs(&other, &pats, &tools)));
        let swapped = vec![pats[1].clone(), pats[0].clone()];
        assert_ne!(
            k,
            hash(&inputs(&frags, &swapped, &tools)),
            "patch order matters"
        );
        let newer = vec![
            "gcc (Debian 13.1.0) 13.1.0".to_string(),
            "v1.24".to_string(),
        ];
        assert_ne!(k, hash(&inputs(&frags, &pats, &newer)));
        let mut i = inputs(&frags, &pats, &tools);
        i.base = "defconfig";
        assert_ne!(k, hash(&i));
    }

    /// The key of a local tree follows its content: a tracked edit or a new
    /// untracked file changes it, undoing them restores it, and neither the
    /// tree's place on disk nor a second look changes it.
    #[test]
    fn local_tree_key_follows_the_tree_content() {
        let t = tempfile::tempdir().unwrap();
        let configs = t.path().join("kernel-configs");
        std::fs::create_dir_all(configs.join("fragments")).unwrap();
        std::fs::write(configs.join("fragments/vm.config"), "CONFIG_PCI=y\n").unwrap();
        let tree = t.path().join("linux");
        std::fs::create_dir_all(tree.join("init")).unwrap();
        std::fs::write(tree.join("Makefile"), "VERSION = 6\nPATCHLEVEL = 1\n").unwrap();
        std::fs::write(tree.join("init/main.c"), "int x;\n").unwrap();
        let git = |args: &[&str]| {
            let ok = Command::new("git")
                .arg("-C")
                .arg(&tree)
                .args(args)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.org")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.org")
                .status()
                .unwrap()
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "base"]);
        let text = "kind = \"local-tree\"\n[tree]\npath = \"../linux\"\n[config]\nbase = \"tinyconfig\"\nfragments = [\"vm\"]\n";
        let ci = t.path().join("ci");
        std::fs::create_dir_all(&ci).unwrap();
        std::fs::write(ci.join("mine.toml"), text).unwrap();
        let key = || {
            let d = crate::inputs::kernel::descriptor::load(
                &configs,
                ci.join("mine.toml").to_str().unwrap(),
            )
            .unwrap();
            let crate::inputs::kernel::descriptor::Kind::SourceBuild(sb) = &d.kind else {
                panic!("not a source build")
            };
            compute(&configs, &d, sb).unwrap()
        };
        let clean = key();
        let id = clean.tree.clone().unwrap();
        assert!(!id.git.as_ref().unwrap().dirty);
        assert_eq!(clean.fragments, vec![configs.join("fragments/vm.config")]);
        assert_eq!(key().key, clean.key, "nothing changed");

        std::fs::write(tree.join("init/main.c"), "int y;\n").unwrap();
        let edited = key();
        assert_ne!(edited.key, clean.key, "a tracked file changed");
        assert!(edited.tree.unwrap().git.unwrap().dirty);
        std::fs::write(tree.join("init/main.c"), "int x;\n").unwrap();
        assert_eq!(key().key, clean.key, "the edit undone");

        std::fs::write(tree.join("init/extra.c"), "int z;\n").unwrap();
        let untracked = key();
        assert_ne!(untracked.key, clean.key, "an untracked file appeared");
        std::fs::remove_file(tree.join("init/extra.c")).unwrap();
        assert_eq!(key().key, clean.key);

        // The same tree elsewhere, named by an absolute path: same key.
        let moved = t.path().join("moved");
        std::fs::rename(&tree, &moved).unwrap();
        std::fs::write(
            ci.join("mine.toml"),
            text.replace("../linux", moved.to_str().unwrap()),
        )
        .unwrap();
        assert_eq!(key().key, clean.key, "the tree's place is not its content");

        // Our own fragment next to the descriptor wins over kernel-configs/.
        std::fs::create_dir_all(ci.join("fragments")).unwrap();
        std::fs::write(ci.join("fragments/vm.config"), "CONFIG_PCI=n\n").unwrap();
        let own = key();
        assert_eq!(own.fragments, vec![ci.join("fragments/vm.config")]);
        assert_ne!(own.key, clean.key);
    }
}
