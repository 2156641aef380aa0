//! Build a kernel from source, the pinned Debian source package or the
//! user's own tree: unpack (or take the tree), patch, configure, check the
//! config, `make bzImage`, and store the outputs in the cache.

mod ccache;
mod check;
mod collect;
mod configfile;
mod configure;
mod kconfig;
mod key;
mod patches;
mod run;
mod source;
mod tree;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub use key::BuildKey;

use super::cache::{self, Meta, Staging};
use super::descriptor::{Descriptor, Source, SourceBuild, TreePin};
use super::hashing::sha256_file;
use super::{KernelArtifact, KernelError};

/// Kbuild's architecture names for x86-64 guests.
const ARCH: &str = "x86_64";
pub const SRCARCH: &str = "x86";

/// A tree to build: kbuild reads the sources in `src` and writes `.config`
/// and every output to `obj`, which is `src` itself unless the build is
/// out of tree (`make O=obj`, for a user's tree that must stay untouched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KTree {
    pub src: PathBuf,
    pub obj: PathBuf,
}

impl KTree {
    fn in_place(src: PathBuf) -> Self {
        KTree {
            obj: src.clone(),
            src,
        }
    }

    /// `make ARCH=x86_64 [O=<obj>] <args>`, to be run in `src`.
    fn make(&self, args: &[&str]) -> Command {
        let mut c = Command::new("make");
        c.arg(format!("ARCH={ARCH}"));
        if self.obj != self.src {
            c.arg(format!("O={}", self.obj.display()));
        }
        c.args(args);
        c
    }
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
    Ok(crate::host::failures::recall(&subject(&desc.name, &k.key)))
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
    if let Some(reason) = crate::host::failures::recall(&subject) {
        return Err(KernelError::FailedEarlier {
            name: desc.name.clone(),
            reason,
        });
    }
    let result = crate::host::phases::time("kernels", || {
        preflight(&sb.source)?;
        build_uncached(configs_dir, desc, sb, &k, cache_root, progress)
    });
    if let Err(e) = &result {
        crate::host::failures::remember(&subject, &e.to_string());
    }
    result
}

/// Every tool a kernel build needs must be present; a local tree needs no
/// Debian kernel source package.
fn preflight(source: &Source) -> Result<(), KernelError> {
    preflight_with(source, &|t| crate::host::hosttools::locate(t).is_ok())
}

fn preflight_with(source: &Source, present: &dyn Fn(&str) -> bool) -> Result<(), KernelError> {
    let missing = |e: &dyn std::fmt::Display| KernelError::ToolsMissing(e.to_string());
    let mut table = crate::host::hosttools::table().map_err(|e| missing(&e))?;
    if matches!(source, Source::Tree(_)) {
        table.retain(|t| !t.package.starts_with("linux-source-"));
    }
    crate::host::hosttools::check_with(&table, &["kernel-build"], present).map_err(|e| missing(&e))
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
                tree.obj.display()
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
            let mut text = tree.obj.as_os_str().as_encoded_bytes().to_vec();
            if tree.src != tree.obj {
                text.push(b'\n');
                text.extend_from_slice(tree.src.as_os_str().as_encoded_bytes());
            }
            std::fs::write(&stamp, text).map_err(|e| KernelError::io(&stamp, e))?;
            tree
        }
    };

    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    progress(&format!(
        "building bzImage with {jobs} jobs (log: {})",
        log.display()
    ));
    let mut kb = run::KbuildProgress::new(progress);
    let mut make = tree.make(&[&format!("-j{jobs}"), "bzImage"]);
    let stats_log = work.join("ccache-stats.log");
    // A resumed make appends to the log of its earlier attempt.
    let _ = std::fs::remove_file(&stats_log);
    let compiler_cache = ccache::apply(&mut make, cache_root, &work_root, &stats_log);
    run::run(
        make.env("KBUILD_BUILD_USER", "testbed")
            // Shows in /proc/version: ties a booted kernel to its cache key.
            .env("KBUILD_BUILD_HOST", &k.key[..16]),
        &tree.src,
        &log,
        &mut |l| kb.line(l),
    )?;

    let staging = Staging::new(cache_root, &k.key)?;
    collect::collect(&tree, &staging.dir, &log, progress)?;
    let release_file = tree.obj.join("include/config/kernel.release");
    let release = std::fs::read_to_string(&release_file)
        .map_err(|e| KernelError::io(&release_file, e))?
        .trim()
        .to_string();
    let config_sha256 = Some(sha256_file(&staging.dir.join("config"))?);
    let patch_names: Vec<String> = k.patches.iter().map(|p| file_name(p)).collect();
    // Kept with the kernel, so that a packed run (`testbed pack`) carries
    // the patches that produced it.
    if !k.patches.is_empty() {
        let kept = staging.dir.join("patches");
        crate::host::fsutil::create_dir(&kept).map_err(|e| KernelError::io(&kept, e))?;
        for (p, name) in k.patches.iter().zip(&patch_names) {
            std::fs::copy(p, kept.join(name)).map_err(|e| KernelError::io(p, e))?;
        }
    }
    let seconds = started.elapsed().as_secs();
    let cache_hits = ccache::Hits::read(&stats_log);
    if let Some(h) = cache_hits {
        progress(&format!("ccache: {}", h.text()));
    }
    let (origin, mut inputs) = match (&sb.source, &k.tree) {
        (Source::Tree(_), Some(id)) => (format!("local tree {}", id.describe()), id.inputs()),
        (Source::Package(pin), _) => (
            format!("{} {}", pin.package, pin.version),
            vec![
                ("source_package", pin.package.clone()),
                ("source_version", pin.version.clone()),
                ("source_sha256", pin.sha256.clone()),
            ],
        ),
        (Source::Tree(pin), None) => (format!("local tree {}", pin.path.display()), vec![]),
    };
    let mut description = format!("{origin} ({}) + {}", sb.base, sb.fragments.join(" + "));
    if let Some(series) = &sb.patch_series {
        description.push_str(&format!(", patches {series} ({})", patch_names.len()));
    }
    inputs.extend([
        ("base", sb.base.clone()),
        ("fragments", sb.fragments.join(",")),
        ("patch_series", sb.patch_series.clone().unwrap_or_default()),
        ("gcc", k.gcc.clone()),
        ("compiler_cache", compiler_cache),
        (
            "compiler_cache_hits",
            cache_hits.map(|h| h.text()).unwrap_or_default(),
        ),
        ("pahole", k.pahole.clone()),
        ("build_seconds", seconds.to_string()),
        ("kbuild_steps", kb.steps().to_string()),
    ]);
    let meta = Meta {
        name: desc.name.clone(),
        key: k.key.clone(),
        kind: sb.source.kind().into(),
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

/// The configured tree of an earlier attempt at this key, if complete. The
/// stamp holds the output directory, then the source tree if that differs.
fn resumable_tree(work: &Path) -> Option<KTree> {
    let stamp = String::from_utf8(std::fs::read(work.join(CONFIGURED_STAMP)).ok()?).ok()?;
    let mut lines = stamp.lines();
    let obj = PathBuf::from(lines.next()?);
    let src = lines.next().map_or_else(|| obj.clone(), PathBuf::from);
    (obj.starts_with(work) && obj.join(".config").is_file() && src.join("Makefile").is_file())
        .then_some(KTree { src, obj })
}

/// Unpack (or take the user's tree), patch and configure a fresh tree in `work`.
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
) -> Result<KTree, KernelError> {
    let tree = match &sb.source {
        Source::Package(pin) => {
            let tarball = source::tarball(cache_root, desc, pin, progress)?;
            progress(&format!("unpacking {}", tarball.display()));
            KTree::in_place(source::unpack(&tarball, work, log)?)
        }
        Source::Tree(pin) => local_tree(pin, k, work, log, progress)?,
    };
    for p in &k.patches {
        progress(&format!("applying {}", p.display()));
        patches::apply(&tree.src, p)?;
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

/// How a user's tree is built. Out of tree (`make O=` into `work/obj`)
/// whenever kbuild allows it: the user's tree is not written to and
/// nothing is copied. A copy (rsync into `work/src`, without `.git`) only
/// when the descriptor has patches, which must not land in the user's
/// tree, or when the tree holds an in-tree build, which kbuild refuses to
/// combine with `O=`; the copy is then cleaned with `make mrproper`.
fn local_tree(
    pin: &TreePin,
    k: &BuildKey,
    work: &Path,
    log: &Path,
    progress: &dyn Fn(&str),
) -> Result<KTree, KernelError> {
    let built_in_place = tree::in_tree_build_state(&pin.path);
    let why_copy = if !k.patches.is_empty() {
        Some("the patch series must not be applied to your tree".to_string())
    } else {
        built_in_place.map(|p| {
            format!("it holds an in-tree build ({p}), and kbuild builds such a tree only in place")
        })
    };
    let Some(why) = why_copy else {
        let obj = work.join("obj");
        std::fs::create_dir_all(&obj).map_err(|e| KernelError::io(&obj, e))?;
        progress(&format!(
            "building {} out of tree into {} (make O=; the tree is not written to)",
            pin.path.display(),
            obj.display()
        ));
        return Ok(KTree {
            src: pin.path.clone(),
            obj,
        });
    };
    let copy = work.join("src");
    progress(&format!(
        "copying {} to {}: {why}",
        pin.path.display(),
        copy.display()
    ));
    let mut from = pin.path.clone().into_os_string();
    from.push("/");
    run::run(
        Command::new("rsync")
            .args(["-a", "--exclude=/.git"])
            .arg(from)
            .arg(&copy),
        work,
        log,
        &mut |_| {},
    )?;
    let tree = KTree::in_place(copy);
    if built_in_place.is_some() {
        progress("removing the copied in-tree build (make mrproper)");
        run::run(&mut tree.make(&["mrproper"]), &tree.src, log, &mut |_| {})?;
    }
    Ok(tree)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(PathBuf::from)
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_with(patches: Vec<PathBuf>) -> BuildKey {
        BuildKey {
            key: "k".repeat(64),
            fragments: vec![],
            patches,
            gcc: String::new(),
            pahole: String::new(),
            tree: None,
        }
    }

    fn user_tree(root: &Path) -> TreePin {
        let src = root.join("linux");
        std::fs::create_dir_all(src.join(".git")).unwrap();
        std::fs::create_dir_all(src.join("init")).unwrap();
        std::fs::write(src.join("Makefile"), "VERSION = 6\nPATCHLEVEL = 1\n").unwrap();
        std::fs::write(src.join("init/main.c"), "int x;\n").unwrap();
        std::fs::write(src.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        TreePin {
            path: src,
            written: "linux".into(),
        }
    }

    #[test]
    fn a_clean_tree_without_patches_is_built_out_of_tree() {
        let t = tempfile::tempdir().unwrap();
        let pin = user_tree(t.path());
        let work = t.path().join("work");
        let tree = local_tree(&pin, &key_with(vec![]), &work, &work.join("log"), &|_| {}).unwrap();
        assert_eq!(tree.src, pin.path);
        assert_eq!(tree.obj, work.join("obj"));
        let args: Vec<String> = tree
            .make(&["bzImage"])
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            vec![
                "ARCH=x86_64".to_string(),
                format!("O={}", work.join("obj").display()),
                "bzImage".into()
            ]
        );
        // An in-place tree gets no O=.
        let args = KTree::in_place(pin.path.clone()).make(&["bzImage"]);
        assert_eq!(args.get_args().count(), 2);
    }

    #[test]
    fn patches_make_a_copy_and_leave_the_users_tree_alone() {
        let t = tempfile::tempdir().unwrap();
        let pin = user_tree(t.path());
        let work = t.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let k = key_with(vec![t.path().join("0001-x.patch")]);
        let seen = std::cell::RefCell::new(Vec::new());
        let tree = local_tree(&pin, &k, &work, &work.join("log"), &|m: &str| {
            seen.borrow_mut().push(m.to_string())
        })
        .unwrap();
        assert_eq!(tree, KTree::in_place(work.join("src")));
        assert_eq!(
            std::fs::read_to_string(work.join("src/init/main.c")).unwrap(),
            "int x;\n"
        );
        assert!(!work.join("src/.git").exists(), "the copy has no .git");
        assert!(
            seen.borrow()
                .iter()
                .any(|m| m.contains("must not be applied to your tree")),
            "{:?}",
            seen.borrow()
        );
    }

    #[test]
    fn a_local_tree_needs_no_debian_source_package() {
        let no_source = |t: &str| !t.starts_with("/usr/src/linux-source");
        let tree = Source::Tree(TreePin {
            path: PathBuf::from("/l"),
            written: "/l".into(),
        });
        assert!(preflight_with(&tree, &no_source).is_ok());
        let package = Source::Package(crate::inputs::kernel::descriptor::SourcePin {
            package: "linux-source-6.1".into(),
            version: "1".into(),
            deb_sha256: String::new(),
            tarball: "/usr/src/linux-source-6.1.tar.xz".into(),
            sha256: String::new(),
        });
        let err = preflight_with(&package, &no_source)
            .unwrap_err()
            .to_string();
        assert!(err.contains("linux-source-6.1"), "{err}");
        // Other tools stay checked for a local tree.
        let err = preflight_with(&tree, &|t| t != "pahole")
            .unwrap_err()
            .to_string();
        assert!(err.contains("pahole") && err.contains("dwarves"), "{err}");
    }

    #[test]
    fn the_stamp_names_both_trees_of_an_out_of_tree_build() {
        let t = tempfile::tempdir().unwrap();
        let pin = user_tree(t.path());
        let work = t.path().join("work");
        let obj = work.join("obj");
        std::fs::create_dir_all(&obj).unwrap();
        let stamp = work.join(CONFIGURED_STAMP);
        std::fs::write(&stamp, format!("{}\n{}", obj.display(), pin.path.display())).unwrap();
        assert_eq!(resumable_tree(&work), None, "not configured yet");
        std::fs::write(obj.join(".config"), "CONFIG_X=y\n").unwrap();
        assert_eq!(
            resumable_tree(&work),
            Some(KTree {
                src: pin.path.clone(),
                obj: obj.clone()
            })
        );
        // An in-place tree's stamp (one line), as before.
        let src = work.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("Makefile"), "VERSION = 6\n").unwrap();
        std::fs::write(src.join(".config"), "").unwrap();
        std::fs::write(&stamp, src.display().to_string()).unwrap();
        assert_eq!(resumable_tree(&work), Some(KTree::in_place(src)));
    }
}
