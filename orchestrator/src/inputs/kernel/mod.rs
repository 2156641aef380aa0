//! Kernels: resolve a descriptor (`kernel-configs/<name>.toml`, or a
//! descriptor file named by its path) to a cached bzImage plus modules:
//! a stock Debian binary package, or a kernel built with fragments and
//! patches from the pinned Debian source or from the user's own tree.

mod apt;
mod build;
mod cache;
mod deb;
mod descriptor;
mod error;
mod hashing;
mod modinfo;
mod modules;
mod stock;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use cache::default_cache_root;
pub use error::KernelError;

use descriptor::{Kind, Source, SourceBuild};

/// A resolved, cached kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelArtifact {
    /// Descriptor name, e.g. "debian-cloud" or "vm-base".
    pub name: String,
    /// Content hash key (hex) of the cached artefact.
    pub key: String,
    pub bzimage: PathBuf,
    /// `uname -r`, e.g. "6.1.0-57-cloud-amd64".
    pub release: String,
    /// Directory holding `lib/modules/<release>`; None if the kernel has no modules.
    pub modules_dir: Option<PathBuf>,
    pub config_sha256: Option<String>,
    /// Patch file names applied, in order (empty for stock kernels).
    pub patches: Vec<String>,
    /// E.g. "Debian linux-image-6.1.0-57-cloud-amd64 6.1.192-3".
    pub description: String,
    /// Modules the descriptor says the guest needs (see `default_modules`).
    pub needed_modules: Vec<String>,
}

/// A module to load, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleFile {
    pub name: String,
    /// Uncompressed .ko on disk.
    pub path: PathBuf,
}

impl KernelArtifact {
    /// Directory of the cached artefact (holds bzImage, meta.json, ...).
    pub fn dir(&self) -> Option<&Path> {
        self.bzimage.parent()
    }

    /// Load order (dependencies first) of the given module names plus their
    /// dependencies; built-in modules are skipped.
    pub fn module_load_order(&self, wanted: &[String]) -> Result<Vec<ModuleFile>, KernelError> {
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let root = self
            .modules_dir
            .as_ref()
            .map(|d| d.join("lib/modules").join(&self.release));
        let builtin = match (&root, self.dir()) {
            (Some(r), _) => Some(r.join("modules.builtin")),
            (None, Some(d)) => Some(d.join(cache::BUILTIN_LIST)),
            (None, None) => None,
        };
        let tree = modules::ModuleTree::open(root.as_deref(), builtin.as_deref())?;
        if root.is_none() {
            let missing: Vec<&str> = wanted
                .iter()
                .map(String::as_str)
                .filter(|w| !tree.is_builtin(w))
                .collect();
            if !missing.is_empty() {
                return Err(KernelError::NoModules {
                    name: self.name.clone(),
                    wanted: missing.join(", "),
                });
            }
        }
        tree.load_order(wanted)
    }

    /// Module names the descriptor says the guest needs.
    pub fn default_modules(&self) -> Vec<String> {
        self.needed_modules.clone()
    }
}

/// Resolve a kernel by descriptor name (`<configs_dir>/<name>.toml`),
/// fetching or building as needed, using the cache.
pub fn resolve(
    configs_dir: &Path,
    name: &str,
    cache_root: &Path,
    progress: &dyn Fn(&str),
) -> Result<KernelArtifact, KernelError> {
    let desc = descriptor::load(configs_dir, name)?;
    let artifact = match &desc.kind {
        Kind::DebianBinary(pin) => crate::host::phases::time("kernels", || {
            stock::resolve(&desc, pin, cache_root, progress)
        })?,
        Kind::SourceBuild(sb) => build::build(configs_dir, &desc, sb, cache_root, progress)?,
    };
    Ok(named(artifact, &desc))
}

/// Why kernel `name` cannot be had in this invocation: its build failed
/// earlier (the reason), so whatever needs it is skipped, not rebuilt.
pub fn failed_earlier(configs_dir: &Path, name: &str) -> Option<String> {
    let desc = descriptor::load(configs_dir, name).ok()?;
    match &desc.kind {
        Kind::SourceBuild(sb) => build::failed_earlier(configs_dir, &desc, sb).ok().flatten(),
        Kind::DebianBinary(_) => None,
    }
}

/// Build (or find in the cache) a kernel from source; `name` must be a
/// `kind = "source-build"` or `kind = "local-tree"` descriptor.
pub fn build(
    configs_dir: &Path,
    name: &str,
    cache_root: &Path,
    progress: &dyn Fn(&str),
) -> Result<KernelArtifact, KernelError> {
    let desc = descriptor::load(configs_dir, name)?;
    match &desc.kind {
        Kind::SourceBuild(sb) => {
            let a = build::build(configs_dir, &desc, sb, cache_root, progress)?;
            Ok(named(a, &desc))
        }
        Kind::DebianBinary(_) => Err(KernelError::Descriptor {
            path: desc.path.clone(),
            message: format!(
                "kernel `{name}` is a prebuilt Debian package (kind = \"{}\"), nothing to build; use resolve",
                descriptor::KIND_DEBIAN_BINARY
            ),
        }),
    }
}

/// Only look: Some if already cached; never fetches or builds.
pub fn lookup_cached(
    configs_dir: &Path,
    name: &str,
    cache_root: &Path,
) -> Result<Option<KernelArtifact>, KernelError> {
    let desc = descriptor::load(configs_dir, name)?;
    let key = match &desc.kind {
        Kind::DebianBinary(pin) => stock::key(pin),
        Kind::SourceBuild(sb) => build::key(configs_dir, &desc, sb)?.key,
    };
    Ok(cache::load_entry(cache_root, &key)?.map(|a| named(a, &desc)))
}

/// Names of all kernel descriptors in `configs_dir`, sorted.
pub fn list_descriptors(configs_dir: &Path) -> Result<Vec<String>, KernelError> {
    descriptor::list(configs_dir)
}

/// A Debian package some descriptors pin, and whether it can still be had.
#[derive(Debug, Clone)]
pub struct PinnedPackage {
    pub package: String,
    pub version: String,
    /// The descriptors that pin it.
    pub descriptors: Vec<String>,
    /// Whether apt's index serves that exact version (`Err`: could not tell).
    pub served: Result<bool, String>,
    /// A copy that needs no apt: the user's file or the download cache.
    pub local_copy: Option<String>,
}

/// The Debian packages (binary kernels, source tarballs) the descriptors
/// in `configs_dir` pin, each once, with where it can come from: a pinned
/// version the archive no longer serves fails a fresh machine's build.
pub fn pinned_packages(configs_dir: &Path, cache_root: &Path) -> Vec<PinnedPackage> {
    let mut out: Vec<PinnedPackage> = Vec::new();
    for name in descriptor::list(configs_dir).unwrap_or_default() {
        let Ok(desc) = descriptor::load(configs_dir, &name) else {
            continue;
        };
        let (package, version) = match &desc.kind {
            Kind::DebianBinary(p) => (p.name.clone(), p.version.clone()),
            Kind::SourceBuild(SourceBuild {
                source: Source::Package(p),
                ..
            }) => (p.package.clone(), p.version.clone()),
            Kind::SourceBuild(_) => continue,
        };
        match out
            .iter_mut()
            .find(|p| p.package == package && p.version == version)
        {
            Some(p) => p.descriptors.push(name),
            None => out.push(PinnedPackage {
                served: apt::served(&package, &version),
                local_copy: apt::local_copy(cache_root, &package, &version),
                package,
                version,
                descriptors: vec![name],
            }),
        }
    }
    out
}

/// Every kernel in the cache, sorted by name then key.
pub fn list_cached(cache_root: &Path) -> Result<Vec<KernelArtifact>, KernelError> {
    cache::list(cache_root)
}

/// Name and module list come from the descriptor asked for, not from whichever
/// descriptor first filled a shared cache entry.
fn named(mut a: KernelArtifact, desc: &descriptor::Descriptor) -> KernelArtifact {
    a.name = desc.name.clone();
    a.needed_modules = desc.modules.clone();
    a
}
