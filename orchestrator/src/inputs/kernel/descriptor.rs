//! Kernel descriptors: `kernel-configs/<name>.toml`, or any descriptor file
//! named by its path (`ci/my-kernel.toml`: a name with a `/` or ending in
//! `.toml`), so a user's own kernel needs no file in the testbed's tree.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::KernelError;

/// A parsed and validated descriptor.
#[derive(Debug, Clone)]
pub struct Descriptor {
    pub name: String,
    pub path: PathBuf,
    /// Raw file text; part of a built kernel's cache key.
    pub text: String,
    pub modules: Vec<String>,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub enum Kind {
    /// A Debian binary kernel package, fetched with apt.
    DebianBinary(PackagePin),
    /// A kernel built from source: the pinned Debian source package
    /// (`source-build`) or the user's own tree (`local-tree`).
    SourceBuild(SourceBuild),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackagePin {
    pub name: String,
    pub version: String,
    /// sha256 of the .deb.
    pub sha256: String,
}

#[derive(Debug, Clone)]
pub struct SourceBuild {
    pub source: Source,
    pub base: String,
    pub fragments: Vec<String>,
    /// Patch series directory under `kernel-configs/patches/`, if any.
    pub patch_series: Option<String>,
}

/// Where a built kernel's source comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// `kind = "source-build"`: a pinned Debian `linux-source-*` tarball.
    Package(SourcePin),
    /// `kind = "local-tree"`: a kernel tree on disk, a git checkout or not.
    Tree(TreePin),
}

impl Source {
    /// The descriptor kind this source belongs to.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Package(_) => KIND_SOURCE_BUILD,
            Source::Tree(_) => KIND_LOCAL_TREE,
        }
    }
}

/// `[tree]` of a `local-tree` descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreePin {
    /// Absolute: a relative `path` is taken from the descriptor's directory.
    pub path: PathBuf,
    /// `tree.path` as written, for messages.
    pub written: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourcePin {
    /// Debian source package, e.g. `linux-source-6.1`.
    pub package: String,
    pub version: String,
    /// sha256 of the package's .deb.
    pub deb_sha256: String,
    /// Path of the tarball the package installs, e.g. `/usr/src/linux-source-6.1.tar.xz`.
    pub tarball: String,
    /// sha256 of that tarball.
    pub sha256: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    kind: String,
    package: Option<PackagePin>,
    source: Option<SourcePin>,
    tree: Option<RawTree>,
    config: Option<RawConfig>,
    patches: Option<RawPatches>,
    modules: Option<RawModules>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    base: String,
    fragments: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTree {
    path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPatches {
    series: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModules {
    load: Vec<String>,
}

pub const KIND_DEBIAN_BINARY: &str = "debian-binary";
pub const KIND_SOURCE_BUILD: &str = "source-build";
pub const KIND_LOCAL_TREE: &str = "local-tree";
const BASES: &[&str] = &["tinyconfig", "defconfig", "allnoconfig"];
/// The tables each kind takes; any other is an error naming it.
const KIND_TABLES: &[(&str, &[&str])] = &[
    (KIND_DEBIAN_BINARY, &["package"]),
    (KIND_SOURCE_BUILD, &["source", "config", "patches"]),
    (KIND_LOCAL_TREE, &["tree", "config", "patches"]),
];

/// Path of descriptor `name` in `configs_dir`.
pub fn descriptor_path(configs_dir: &Path, name: &str) -> PathBuf {
    configs_dir.join(format!("{name}.toml"))
}

/// Names of all descriptors (`*.toml` directly in `configs_dir`), sorted.
pub fn list(configs_dir: &Path) -> Result<Vec<String>, KernelError> {
    let entries = std::fs::read_dir(configs_dir).map_err(|e| KernelError::io(configs_dir, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| KernelError::io(configs_dir, e))?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "toml")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            names.push(stem.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// A kernel name that names a descriptor file rather than one in
/// `kernel-configs/`.
pub fn is_path_name(name: &str) -> bool {
    name.contains('/') || name.ends_with(".toml")
}

/// Read and validate descriptor `name`: a file stem in `configs_dir`, or a
/// path to a descriptor file (relative to the current directory).
pub fn load(configs_dir: &Path, name: &str) -> Result<Descriptor, KernelError> {
    if is_path_name(name) {
        return load_path(Path::new(name));
    }
    if name.is_empty() || name.contains('\\') || name.starts_with('.') {
        return Err(KernelError::Descriptor {
            path: configs_dir.to_path_buf(),
            message: format!(
                "invalid kernel name `{name}` (expected a file stem like `vm-base`, or a path to a descriptor file)"
            ),
        });
    }
    let path = descriptor_path(configs_dir, name);
    if !path.is_file() {
        let known = list(configs_dir).map(|v| v.join(", ")).unwrap_or_default();
        return Err(KernelError::UnknownDescriptor {
            name: name.to_string(),
            path,
            known,
        });
    }
    let text = std::fs::read_to_string(&path).map_err(|e| KernelError::io(&path, e))?;
    parse(name, &path, &text)
}

fn load_path(given: &Path) -> Result<Descriptor, KernelError> {
    // Absolute, so a relative `tree.path` has a directory to be relative to.
    let path = std::path::absolute(given).map_err(|e| KernelError::io(given, e))?;
    if !path.is_file() {
        return Err(KernelError::Descriptor {
            path,
            message: "no such descriptor file".into(),
        });
    }
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = std::fs::read_to_string(&path).map_err(|e| KernelError::io(&path, e))?;
    parse(&name, &path, &text)
}

impl Descriptor {
    /// Directories searched for `fragments/` and `patches/`: the
    /// descriptor's own first, then the testbed's `kernel-configs/`, so a
    /// descriptor outside the testbed can use both its own and ours.
    pub fn search_dirs(&self, configs_dir: &Path) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if let Some(own) = self.path.parent() {
            dirs.push(own.to_path_buf());
        }
        if !dirs.iter().any(|d| d == configs_dir) {
            dirs.push(configs_dir.to_path_buf());
        }
        dirs
    }

    /// The descriptor text that goes into a built kernel's cache key. A
    /// local tree is keyed by its content, not by where it lies, so
    /// `tree.path` is left out (and the rest normalised: comments and
    /// layout do not rebuild it).
    pub fn key_text(&self) -> Result<String, KernelError> {
        let Kind::SourceBuild(SourceBuild {
            source: Source::Tree(_),
            ..
        }) = &self.kind
        else {
            return Ok(self.text.clone());
        };
        let bad = |e: String| KernelError::Descriptor {
            path: self.path.clone(),
            message: e,
        };
        let mut table: toml::Table = toml::from_str(&self.text).map_err(|e| bad(e.to_string()))?;
        if let Some(toml::Value::Table(tree)) = table.get_mut("tree") {
            tree.remove("path");
        }
        toml::to_string(&table).map_err(|e| bad(e.to_string()))
    }
}

/// Parse descriptor text (split out so tests need no files). `path` is the
/// descriptor file; a relative `tree.path` is resolved against its directory.
pub fn parse(name: &str, path: &Path, text: &str) -> Result<Descriptor, KernelError> {
    let bad = |message: String| KernelError::Descriptor {
        path: path.to_path_buf(),
        message,
    };
    let raw: RawDescriptor = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
    let modules = raw.modules.map(|m| m.load).unwrap_or_default();
    let Some((_, allowed)) = KIND_TABLES.iter().find(|(k, _)| *k == raw.kind) else {
        return Err(bad(format!(
            "kind = \"{}\" is unknown (expected \"{KIND_DEBIAN_BINARY}\", \"{KIND_SOURCE_BUILD}\" or \"{KIND_LOCAL_TREE}\")",
            raw.kind
        )));
    };
    for (table, present) in [
        ("package", raw.package.is_some()),
        ("source", raw.source.is_some()),
        ("tree", raw.tree.is_some()),
        ("config", raw.config.is_some()),
        ("patches", raw.patches.is_some()),
    ] {
        if present && !allowed.contains(&table) {
            let owners: Vec<String> = KIND_TABLES
                .iter()
                .filter(|(_, t)| t.contains(&table))
                .map(|(k, _)| format!("kind = \"{k}\""))
                .collect();
            return Err(bad(format!(
                "[{table}] is only valid with {} (this descriptor has kind = \"{}\")",
                owners.join(" or "),
                raw.kind
            )));
        }
    }
    let need = |table: &str| bad(format!("kind = \"{}\" needs a [{table}] table", raw.kind));
    let kind = if raw.kind == KIND_DEBIAN_BINARY {
        let pkg = raw.package.ok_or_else(|| need("package"))?;
        check_sha256(&pkg.sha256, "package.sha256").map_err(|e| bad(e.to_string()))?;
        Kind::DebianBinary(pkg)
    } else {
        let source = if raw.kind == KIND_SOURCE_BUILD {
            let source = raw.source.ok_or_else(|| need("source"))?;
            check_sha256(&source.sha256, "source.sha256").map_err(|e| bad(e.to_string()))?;
            check_sha256(&source.deb_sha256, "source.deb_sha256")
                .map_err(|e| bad(e.to_string()))?;
            Source::Package(source)
        } else {
            let tree = raw.tree.ok_or_else(|| need("tree"))?;
            if tree.path.trim().is_empty() {
                return Err(bad(
                    "field `tree.path` is empty (expected the kernel tree's directory)".into(),
                ));
            }
            let given = PathBuf::from(&tree.path);
            let resolved = if given.is_absolute() {
                given
            } else {
                path.parent().unwrap_or(Path::new(".")).join(given)
            };
            Source::Tree(TreePin {
                path: std::path::absolute(&resolved).unwrap_or(resolved),
                written: tree.path,
            })
        };
        let config = raw.config.ok_or_else(|| need("config"))?;
        if !BASES.contains(&config.base.as_str()) {
            return Err(bad(format!(
                "config.base = \"{}\" is not one of {}",
                config.base,
                BASES.join(", ")
            )));
        }
        for f in &config.fragments {
            check_file_stem(f, "config.fragments").map_err(|e| bad(e.to_string()))?;
        }
        let patch_series = match raw.patches {
            Some(p) => {
                check_file_stem(&p.series, "patches.series").map_err(|e| bad(e.to_string()))?;
                Some(p.series)
            }
            None => None,
        };
        Kind::SourceBuild(SourceBuild {
            source,
            base: config.base,
            fragments: config.fragments,
            patch_series,
        })
    };
    Ok(Descriptor {
        name: name.to_string(),
        path: path.to_path_buf(),
        text: text.to_string(),
        modules,
        kind,
    })
}

/// A descriptor field whose value has the wrong form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadField {
    #[error("field `{field}` = \"{value}\" is not a sha256 (64 hex digits)")]
    NotSha256 { field: &'static str, value: String },
    #[error("field `{field}`: \"{value}\" must be a plain name, not a path")]
    NotPlainName { field: &'static str, value: String },
}

fn check_sha256(value: &str, field: &'static str) -> Result<(), BadField> {
    if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(BadField::NotSha256 {
            field,
            value: value.into(),
        })
    }
}

fn check_file_stem(value: &str, field: &'static str) -> Result<(), BadField> {
    if value.is_empty() || value.contains(['/', '\\']) || value.starts_with('.') {
        Err(BadField::NotPlainName {
            field,
            value: value.into(),
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "4fdd0172a8c3f41a97e92465b2ac1867e1c10d82d7aeed3d26ee7a5d14df1754";

    #[test]
    fn parses_debian_binary() {
        let text = format!(
            "kind = \"debian-binary\"\n[package]\nname = \"p\"\nversion = \"1\"\nsha256 = \"{SHA}\"\n[modules]\nload = [\"virtio_pci\"]\n"
        );
        let d = parse("x", Path::new("x.toml"), &text).unwrap();
        assert_eq!(d.modules, vec!["virtio_pci".to_string()]);
        assert!(matches!(d.kind, Kind::DebianBinary(ref p) if p.name == "p"));
    }

    #[test]
    fn unknown_key_names_file_and_key() {
        let text = format!(
            "kind = \"debian-binary\"\n[package]\nname = \"p\"\nversion = \"1\"\nsha256 = \"{SHA}\"\nsha512 = \"x\"\n"
        );
        let err = parse("x", Path::new("k/x.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(err.contains("k/x.toml") && err.contains("sha512"), "{err}");
    }

    #[test]
    fn bad_sha_names_field() {
        let text = "kind = \"debian-binary\"\n[package]\nname = \"p\"\nversion = \"1\"\nsha256 = \"abc\"\n";
        let err = parse("x", Path::new("x.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(err.contains("package.sha256"), "{err}");
    }

    const LOCAL: &str = "kind = \"local-tree\"\n[tree]\npath = \"../linux\"\n[config]\nbase = \"tinyconfig\"\nfragments = [\"vm-base\"]\n[modules]\nload = []\n";

    fn tree_of(d: &Descriptor) -> &TreePin {
        match &d.kind {
            Kind::SourceBuild(SourceBuild {
                source: Source::Tree(t),
                ..
            }) => t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn local_tree_path_is_relative_to_the_descriptor() {
        let d = parse("mine", Path::new("/work/ci/mine.toml"), LOCAL).unwrap();
        let t = tree_of(&d);
        assert_eq!(t.path, Path::new("/work/ci/../linux"));
        assert_eq!(t.written, "../linux");
        assert_eq!(
            match &d.kind {
                Kind::SourceBuild(sb) => (sb.source.kind(), sb.base.as_str()),
                Kind::DebianBinary(_) => unreachable!(),
            },
            (KIND_LOCAL_TREE, "tinyconfig")
        );
        let abs = LOCAL.replace("../linux", "/src/linux");
        let d = parse("mine", Path::new("/work/ci/mine.toml"), &abs).unwrap();
        assert_eq!(tree_of(&d).path, Path::new("/src/linux"));
    }

    #[test]
    fn local_tree_errors_name_file_and_field() {
        let file = Path::new("ci/mine.toml");
        let cases = [
            (
                LOCAL.replace("[tree]\npath = \"../linux\"\n", ""),
                "needs a [tree] table",
            ),
            (LOCAL.replace("../linux", " "), "field `tree.path` is empty"),
            (LOCAL.replace("path =", "paht ="), "paht"),
            (
                format!(
                    "{LOCAL}[source]\npackage = \"p\"\nversion = \"1\"\ndeb_sha256 = \"{SHA}\"\ntarball = \"/t\"\nsha256 = \"{SHA}\"\n"
                ),
                "[source] is only valid with kind = \"source-build\"",
            ),
            (LOCAL.replace("local-tree", "local-trees"), "\"local-tree\""),
            (
                LOCAL.replace("\"vm-base\"", "\"../vm-base\""),
                "config.fragments",
            ),
        ];
        for (text, want) in cases {
            let err = parse("mine", file, &text).unwrap_err().to_string();
            assert!(
                err.contains("ci/mine.toml") && err.contains(want),
                "{want}: {err}"
            );
        }
        // And the other way round: a Debian source build takes no [tree].
        let text = format!(
            "kind = \"source-build\"\n[source]\npackage = \"p\"\nversion = \"1\"\ndeb_sha256 = \"{SHA}\"\ntarball = \"/t\"\nsha256 = \"{SHA}\"\n[tree]\npath = \"/l\"\n[config]\nbase = \"tinyconfig\"\nfragments = []\n"
        );
        let err = parse("x", file, &text).unwrap_err().to_string();
        assert!(
            err.contains("[tree] is only valid with kind = \"local-tree\""),
            "{err}"
        );
    }

    #[test]
    fn a_descriptor_is_found_by_path_and_searches_its_own_dir_first() {
        let t = tempfile::tempdir().unwrap();
        let configs = t.path().join("kernel-configs");
        let ci = t.path().join("ci");
        std::fs::create_dir_all(&configs).unwrap();
        std::fs::create_dir_all(&ci).unwrap();
        std::fs::write(ci.join("mine.toml"), LOCAL).unwrap();
        let by_path = ci.join("mine.toml").display().to_string();
        let d = load(&configs, &by_path).unwrap();
        assert_eq!(d.name, "mine");
        assert_eq!(tree_of(&d).path, ci.join("../linux"));
        assert_eq!(d.search_dirs(&configs), vec![ci.clone(), configs.clone()]);
        let err = load(&configs, &format!("{by_path}.gone"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no such descriptor file"), "{err}");
        // A plain name is still a file stem in kernel-configs/.
        let err = load(&configs, "mine").unwrap_err().to_string();
        assert!(err.contains("no kernel descriptor named `mine`"), "{err}");
    }

    #[test]
    fn key_text_leaves_out_where_the_tree_is() {
        let a = parse("m", Path::new("/a/m.toml"), LOCAL).unwrap();
        let moved = format!("# moved\n{}", LOCAL.replace("../linux", "/elsewhere/linux"));
        let b = parse("m", Path::new("/b/m.toml"), &moved).unwrap();
        assert_eq!(a.key_text().unwrap(), b.key_text().unwrap());
        assert!(!a.key_text().unwrap().contains("linux"));
        let other = parse(
            "m",
            Path::new("/a/m.toml"),
            &LOCAL.replace("tinyconfig", "defconfig"),
        )
        .unwrap();
        assert_ne!(a.key_text().unwrap(), other.key_text().unwrap());
    }

    #[test]
    fn bad_base_is_rejected() {
        let text = format!(
            "kind = \"source-build\"\n[source]\npackage = \"p\"\nversion = \"1\"\ndeb_sha256 = \"{SHA}\"\ntarball = \"/t\"\nsha256 = \"{SHA}\"\n[config]\nbase = \"allyesconfig\"\nfragments = []\n"
        );
        let err = parse("x", Path::new("x.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(err.contains("config.base"), "{err}");
    }
}
