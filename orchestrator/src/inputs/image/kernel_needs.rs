//! What a kernel must have to use a root image or a formatted device:
//! virtio-blk for the image's disk, ext4, and overlayfs for the writable
//! layer over the image. Read from the kernel's `.config` (kept in the
//! kernel cache as `config`): built in needs nothing, a module is loaded
//! from the initramfs, and an option that is off refuses the run before
//! any boot.

use std::collections::BTreeMap;

use crate::inputs::kernel::KernelArtifact;

/// A kernel option and the module that provides it when it is `=m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub option: &'static str,
    pub module: &'static str,
    pub why: &'static str,
}

const VIRTIO_BLK: Need = Need {
    option: "CONFIG_VIRTIO_BLK",
    module: "virtio_blk",
    why: "the root image's disk",
};
const EXT4: Need = Need {
    option: "CONFIG_EXT4_FS",
    module: "ext4",
    why: "ext4 file systems",
};
const OVERLAY: Need = Need {
    option: "CONFIG_OVERLAY_FS",
    module: "overlay",
    why: "the writable layer over the root image",
};

/// The needs of a run: a root image needs all three, a formatted device
/// needs ext4.
pub fn needs(root_image: bool, formatted_devices: bool) -> Vec<Need> {
    match (root_image, formatted_devices) {
        (true, _) => vec![VIRTIO_BLK, EXT4, OVERLAY],
        (false, true) => vec![EXT4],
        (false, false) => Vec::new(),
    }
}

/// A kernel that lacks what a run needs from it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelNeedError {
    /// An option is off (or a module where it must be built in).
    #[error("kernel {kernel} lacks {option}, needed for {why}: build a kernel with {option}={fix}")]
    Lacks {
        kernel: String,
        option: String,
        why: String,
        /// What to set it to: "y (or =m)", or "y (e.g. kernel.name = …)".
        fix: &'static str,
    },
    #[error("kernel {kernel} has no .config in its cache, so its options cannot be checked")]
    NoConfig { kernel: String },
}

/// `CONFIG_X=value` lines of a .config.
fn parse_config(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .collect()
}

/// The modules to load for `needs` on a kernel with this `.config`; an
/// option that is off is an error naming it and the kernel.
pub fn modules_for_config(
    kernel_name: &str,
    config: &str,
    needs: &[Need],
) -> Result<Vec<String>, KernelNeedError> {
    let cfg = parse_config(config);
    let mut modules = Vec::new();
    for n in needs {
        match cfg.get(n.option).copied() {
            Some("y") => {}
            Some("m") => modules.push(n.module.to_string()),
            _ => {
                return Err(KernelNeedError::Lacks {
                    kernel: kernel_name.to_string(),
                    option: n.option.to_string(),
                    why: n.why.to_string(),
                    fix: "y (or =m)",
                });
            }
        }
    }
    Ok(modules)
}

/// As [`modules_for_config`], reading the kernel's cached `.config`; a
/// kernel without one (never the case for the testbed's kernels) gets the
/// modules, and module resolution says what is missing.
pub fn modules_for(
    kernel: &KernelArtifact,
    needs: &[Need],
) -> Result<Vec<String>, KernelNeedError> {
    let config = kernel
        .dir()
        .map(|d| d.join("config"))
        .and_then(|p| std::fs::read_to_string(p).ok());
    match config {
        Some(text) => modules_for_config(&kernel.name, &text, needs),
        None => Ok(needs.iter().map(|n| n.module.to_string()).collect()),
    }
}

/// Options a workload needs built in (`=y`: probes and BPF cannot come
/// from a module loaded later); the first that is not is an error naming
/// it, what it is for, and the kernel.
pub fn check_built_in(
    kernel_name: &str,
    config: &str,
    options: &[(&str, &str)],
) -> Result<(), KernelNeedError> {
    let cfg = parse_config(config);
    match options
        .iter()
        .find(|(o, _)| cfg.get(o).copied() != Some("y"))
    {
        None => Ok(()),
        Some((option, why)) => Err(KernelNeedError::Lacks {
            kernel: kernel_name.to_string(),
            option: option.to_string(),
            why: why.to_string(),
            fix: "y (e.g. kernel.name = \"vm-hooks\")",
        }),
    }
}

/// As [`check_built_in`], on the kernel's cached `.config`; a kernel
/// without one is refused too, since nothing else says what it has.
pub fn check_built_in_for(
    kernel: &KernelArtifact,
    options: &[(&str, &str)],
) -> Result<(), KernelNeedError> {
    if options.is_empty() {
        return Ok(());
    }
    let config = kernel
        .dir()
        .map(|d| d.join("config"))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .ok_or_else(|| KernelNeedError::NoConfig {
            kernel: kernel.name.clone(),
        })?;
    check_built_in(&kernel.name, &config, options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_option_off_or_a_module_is_refused_naming_it() {
        let opts = [
            ("CONFIG_KPROBES", "the probes"),
            ("CONFIG_DEBUG_INFO_BTF", "BTF"),
        ];
        let cfg = "CONFIG_KPROBES=y\nCONFIG_DEBUG_INFO_BTF=y\n";
        check_built_in("k", cfg, &opts).unwrap();
        let e = check_built_in(
            "k",
            "CONFIG_KPROBES=y\n# CONFIG_DEBUG_INFO_BTF is not set\n",
            &opts,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("kernel k lacks CONFIG_DEBUG_INFO_BTF, needed for BTF"),
            "{e}"
        );
        let e = check_built_in("k", "CONFIG_KPROBES=m\nCONFIG_DEBUG_INFO_BTF=y\n", &opts)
            .unwrap_err()
            .to_string();
        assert!(e.contains("CONFIG_KPROBES"), "{e}");
    }

    #[test]
    fn built_in_needs_nothing_and_a_module_is_loaded() {
        let cfg = "CONFIG_VIRTIO_BLK=m\nCONFIG_EXT4_FS=y\nCONFIG_OVERLAY_FS=m\n";
        let m = modules_for_config("debian-cloud", cfg, &needs(true, false)).unwrap();
        assert_eq!(m, ["virtio_blk", "overlay"]);
        assert!(needs(false, false).is_empty());
        assert_eq!(needs(false, true), [EXT4]);
    }

    /// The vm-* kernels (fragments/vm-base.config) have ext4 and virtio-blk
    /// built in but no overlayfs: a root image is refused before boot.
    #[test]
    fn a_kernel_without_overlayfs_is_refused_naming_the_option() {
        let fragment = std::fs::read_to_string(
            crate::host::paths::kernel_configs().join("fragments/vm-base.config"),
        )
        .unwrap();
        let cfg = format!("{fragment}\n# CONFIG_OVERLAY_FS is not set\n");
        let e = modules_for_config("vm-base", &cfg, &needs(true, false))
            .unwrap_err()
            .to_string();
        assert!(e.contains("kernel vm-base lacks CONFIG_OVERLAY_FS"), "{e}");
        // A formatted device alone needs only ext4, which it has.
        assert_eq!(
            modules_for_config("vm-base", &cfg, &needs(false, true)).unwrap(),
            Vec::<String>::new()
        );
    }
}
