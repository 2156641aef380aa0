//! Build a kernel from the pinned Debian source: unpack, patch, configure,
//! check the config, `make bzImage`, and store the outputs in the cache.

mod check;
mod collect;
mod configfile;
mod configure;
mod kconfig;
mod key;
mod patches;
mod run;
mod source;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub use key::BuildKey;

use super::cache::{self, Meta, Staging};
use super::descriptor::{Descriptor, KIND_SOURCE_BUILD, SourceBuild};
use super::hashing::sha256_file;
use super::{KernelArtifact, KernelError};

/// Kbuild's architecture names for x86-64 guests.
const ARCH: &str = "x86_64";
pub const SRCARCH: &str = "x86";

/// `make ARCH=x86_64 <args>`.
fn make(args: &[&str]) -> Command {
    let mut c = Command::new("make");
    c.arg(format!("ARCH={ARCH}")).args(args);
    c
}

pub fn key(
    configs_dir: &Path,
    desc: &Descriptor,
    sb: &SourceBuild,
) -> Result<BuildKey, KernelError> {
    key::compute(configs_dir, desc, sb)
}

/// What the failure memory calls a kernel build.
fn subject(name: &str, key: &str) -> String {
    format!("kernel {name} (key {})", &key[..12.min(key.len())])
}

/// The reason this kernel's build failed earlier in this invocation, if it did.
pub fn failed_earlier(
    configs_dir: &Path,
    desc: &Descriptor,
    sb: &SourceBuild,
) -> Result<Option<String>, KernelError> {
    let k = key::compute(configs_dir, desc, sb)?;
    Ok(crate::failures::recall(&subject(&desc.name, &k.key)))
}

pub fn build(
    configs_dir: &Path,
    desc: &Descriptor,
    sb: &SourceBuild,
    cache_root: &Path,
    progress: &dyn Fn(&str),
) -> Result<KernelArtifact, KernelError> {
    let k = key::compute(configs_dir, desc, sb)?;
    if let Some(a) = cache::load_entry(cache_root, &k.key)? {
        return Ok(a);
    }
    // A failure is paid for once: the next spec that needs this kernel
    // fails at once with the first attempt's reason.
    let subject = subject(&desc.name, &k.key);
    if let Some(reason) = crate::failures::recall(&subject) {
        return Err(KernelError::FailedEarlier {
            name: desc.name.clone(),
            reason,
        });
    }
    let result = crate::phases::time("kernels", || {
        crate::hosttools::preflight(&["kernel-build"])
            .map_err(|e| KernelError::ToolsMissing(e.to_string()))?;
        build_uncached(configs_dir, desc, sb, &k, cache_root, progress)
    });
    if let Err(e) = &result {
        crate::failures::remember(&subject, &e.to_string());
    }
    result
}

/// Marks a work tree that is unpacked, patched and configured for its key.
const CONFIGURED_STAMP: &str = "configured.stamp";

fn build_uncached(
    configs_dir: &Path,
    desc: &Descriptor,
    sb: &SourceBuild,
    k: &BuildKey,
    cache_root: &Path,
    progress: &dyn Fn(&str),
) -> Result<KernelArtifact, KernelError> {
    let work_root = cache_root.join("kernel-work");
    std::fs::create_dir_all(&work_root).map_err(|e| KernelError::io(&work_root, e))?;
    let _lock = cache::lock_entry(
        cache_root,
        &k.key,
        &format!("the build of kernel {}", desc.name),
        progress,
    )?;
    // Another process may have finished it while we waited.
    if let Some(a) = cache::load_entry(cache_root, &k.key)? {
        return Ok(a);
    }
    let started = Instant::now();
    let work = work_root.join(&k.key);
    let log = work.join("build.log");
    // The key covers every input, so a tree an earlier attempt configured
    // for this key is still right: `make` resumes it incrementally (after
    // a missing tool is installed, say) instead of unpacking again.
    let tree = match resumable_tree(&work) {
        Some(tree) => {
            progress(&format!(
                "resuming the earlier attempt's configured tree {} (incremental make)",
                tree.display()
            ));
            tree
        }
        None => {
            if work.exists() {
                std::fs::remove_dir_all(&work).map_err(|e| KernelError::io(&work, e))?;
            }
            std::fs::create_dir_all(&work).map_err(|e| KernelError::io(&work, e))?;
            let tree = prepare_tree(configs_dir, desc, sb, k, cache_root, &work, &log, progress)?;
            let stamp = work.join(CONFIGURED_STAMP);
            std::fs::write(&stamp, tree.as_os_str().as_encoded_bytes())
                .map_err(|e| KernelError::io(&stamp, e))?;
            tree
        }
    };

    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    progress(&format!(
        "building bzImage with {jobs} jobs (log: {})",
        log.display()
    ));
    let mut kb = run::KbuildProgress::new(progress);
    run::run(
        make(&[&format!("-j{jobs}"), "bzImage"])
            .env("KBUILD_BUILD_USER", "testbed")
            // Shows in /proc/version: ties a booted kernel to its cache key.
            .env("KBUILD_BUILD_HOST", &k.key[..16]),
        &tree,
        &log,
        &mut |l| kb.line(l),
    )?;

    let staging = Staging::new(cache_root, &k.key)?;
    collect::collect(&tree, &staging.dir, &log, progress)?;
    let release_file = tree.join("include/config/kernel.release");
    let release = std::fs::read_to_string(&release_file)
        .map_err(|e| KernelError::io(&release_file, e))?
        .trim()
        .to_string();
    let config_sha256 = Some(sha256_file(&staging.dir.join("config"))?);
    let patch_names: Vec<String> = k.patches.iter().map(|p| file_name(p)).collect();
    let seconds = started.elapsed().as_secs();
    let mut description = format!(
        "{} {} ({}) + {}",
        sb.source.package,
        sb.source.version,
        sb.base,
        sb.fragments.join(" + ")
    );
    if let Some(series) = &sb.patch_series {
        description.push_str(&format!(", patches {series} ({})", patch_names.len()));
    }
    let inputs = [
        ("source_package", sb.source.package.clone()),
        ("source_version", sb.source.version.clone()),
        ("source_sha256", sb.source.sha256.clone()),
        ("base", sb.base.clone()),
        ("fragments", sb.fragments.join(",")),
        ("patch_series", sb.patch_series.clone().unwrap_or_default()),
        ("gcc", k.gcc.clone()),
        ("pahole", k.pahole.clone()),
        ("build_seconds", seconds.to_string()),
        ("kbuild_steps", kb.steps().to_string()),
    ];
    let meta = Meta {
        name: desc.name.clone(),
        key: k.key.clone(),
        kind: KIND_SOURCE_BUILD.into(),
        release,
        description,
        config_sha256,
        patches: patch_names,
        has_modules: false,
        modules: desc.modules.clone(),
        inputs: inputs
            .into_iter()
            .map(|(a, b)| (a.to_string(), serde_json::Value::String(b)))
            .collect(),
        created_unix: cache::now_unix(),
    };
    meta.write(&staging.dir)?;
    let _ = std::fs::copy(&log, staging.dir.join("build.log"));
    let dir = staging.commit()?;
    progress(&format!(
        "built kernel {} in {seconds} s, cached at {}",
        desc.name,
        dir.display()
    ));
    // The tree is large and fully captured by the key; failed builds keep theirs.
    if let Err(e) = std::fs::remove_dir_all(&work) {
        progress(&format!("could not remove {}: {e}", work.display()));
    }
    cache::load_entry(cache_root, &k.key)?.ok_or_else(|| KernelError::CacheDamaged {
        dir,
        message: "entry vanished right after it was written".into(),
    })
}

/// The configured tree of an earlier attempt at this key, if complete.
fn resumable_tree(work: &Path) -> Option<PathBuf> {
    let stamp = std::fs::read(work.join(CONFIGURED_STAMP)).ok()?;
    let tree = PathBuf::from(String::from_utf8(stamp).ok()?);
    (tree.starts_with(work) && tree.join(".config").is_file()).then_some(tree)
}

/// Unpack, patch and configure a fresh tree in `work`.
#[allow(clippy::too_many_arguments)]
fn prepare_tree(
    configs_dir: &Path,
    desc: &Descriptor,
    sb: &SourceBuild,
    k: &BuildKey,
    cache_root: &Path,
    work: &Path,
    log: &Path,
    progress: &dyn Fn(&str),
) -> Result<PathBuf, KernelError> {
    let tarball = source::tarball(cache_root, desc, &sb.source, progress)?;
    progress(&format!("unpacking {}", tarball.display()));
    let tree = source::unpack(&tarball, work, log)?;
    for p in &k.patches {
        progress(&format!("applying {}", p.display()));
        patches::apply(&tree, p)?;
    }
    let requests = configure::requests(&k.fragments)?;
    configure::configure(
        &tree,
        &sb.base,
        &requests,
        configs_dir,
        &desc.path,
        log,
        progress,
    )?;
    Ok(tree)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(PathBuf::from)
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}
