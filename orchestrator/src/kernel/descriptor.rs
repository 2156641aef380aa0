//! Kernel descriptors: `kernel-configs/<name>.toml`.

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
    /// A kernel built from a Debian source package.
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
    pub source: SourcePin,
    pub base: String,
    pub fragments: Vec<String>,
    /// Patch series directory under `kernel-configs/patches/`, if any.
    pub patch_series: Option<String>,
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
const BASES: &[&str] = &["tinyconfig", "defconfig", "allnoconfig"];

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

/// Read and validate descriptor `name`.
pub fn load(configs_dir: &Path, name: &str) -> Result<Descriptor, KernelError> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        return Err(KernelError::Descriptor {
            path: configs_dir.to_path_buf(),
            message: format!("invalid kernel name `{name}` (expected a file stem like `vm-base`)"),
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

/// Parse descriptor text (split out so tests need no files).
pub fn parse(name: &str, path: &Path, text: &str) -> Result<Descriptor, KernelError> {
    let bad = |message: String| KernelError::Descriptor {
        path: path.to_path_buf(),
        message,
    };
    let raw: RawDescriptor = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
    let modules = raw.modules.map(|m| m.load).unwrap_or_default();
    let kind = match raw.kind.as_str() {
        KIND_DEBIAN_BINARY => {
            let pkg = raw
                .package
                .ok_or_else(|| bad("kind = \"debian-binary\" needs a [package] table".into()))?;
            for (field, present) in [
                ("source", raw.source.is_some()),
                ("config", raw.config.is_some()),
                ("patches", raw.patches.is_some()),
            ] {
                if present {
                    return Err(bad(format!(
                        "[{field}] is only valid with kind = \"{KIND_SOURCE_BUILD}\""
                    )));
                }
            }
            check_sha256(&pkg.sha256, "package.sha256").map_err(bad)?;
            Kind::DebianBinary(pkg)
        }
        KIND_SOURCE_BUILD => {
            let source = raw
                .source
                .ok_or_else(|| bad("kind = \"source-build\" needs a [source] table".into()))?;
            let config = raw
                .config
                .ok_or_else(|| bad("kind = \"source-build\" needs a [config] table".into()))?;
            if raw.package.is_some() {
                return Err(bad(format!(
                    "[package] is only valid with kind = \"{KIND_DEBIAN_BINARY}\""
                )));
            }
            check_sha256(&source.sha256, "source.sha256").map_err(bad)?;
            check_sha256(&source.deb_sha256, "source.deb_sha256").map_err(bad)?;
            if !BASES.contains(&config.base.as_str()) {
                return Err(bad(format!(
                    "config.base = \"{}\" is not one of {}",
                    config.base,
                    BASES.join(", ")
                )));
            }
            for f in &config.fragments {
                check_file_stem(f, "config.fragments").map_err(bad)?;
            }
            let patch_series = match raw.patches {
                Some(p) => {
                    check_file_stem(&p.series, "patches.series").map_err(bad)?;
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
        }
        other => {
            return Err(bad(format!(
                "kind = \"{other}\" is unknown (expected \"{KIND_DEBIAN_BINARY}\" or \"{KIND_SOURCE_BUILD}\")"
            )));
        }
    };
    Ok(Descriptor {
        name: name.to_string(),
        path: path.to_path_buf(),
        text: text.to_string(),
        modules,
        kind,
    })
}

fn check_sha256(value: &str, field: &str) -> Result<(), String> {
    if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(format!(
            "field `{field}` = \"{value}\" is not a sha256 (64 hex digits)"
        ))
    }
}

fn check_file_stem(value: &str, field: &str) -> Result<(), String> {
    if value.is_empty() || value.contains(['/', '\\']) || value.starts_with('.') {
        Err(format!(
            "field `{field}`: \"{value}\" must be a plain name, not a path"
        ))
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
