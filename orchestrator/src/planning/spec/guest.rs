//! `[kernel]` and `[image]`: what the guest boots and its root file system.

use super::*;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelSection {
    /// A descriptor in kernel-configs/ (`debian-cloud`, `vm-base`, ...).
    #[serde(default = "default_kernel")]
    pub name: String,
}

fn default_kernel() -> String {
    "debian-cloud".into()
}

impl Default for KernelSection {
    fn default() -> Self {
        KernelSection {
            name: default_kernel(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSection {
    /// A root filesystem image built from `images/<name>.toml`, attached
    /// read-only; the agent switches to it (with a tmpfs overlay) before
    /// any point. None: the initramfs alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Host programs copied into the initramfs with their shared libraries.
    #[serde(default)]
    pub include: Vec<String>,
    /// Extra kernel modules to load (dependencies are added).
    #[serde(default)]
    pub modules: Vec<String>,
}

/// `[image] name`: the recipe must exist and load.
pub(super) fn check_image_name(loaded: &LoadedSpec) -> Result<(), SpecError> {
    let Some(name) = &loaded.spec.image.name else {
        return Ok(());
    };
    crate::inputs::image::recipe::load(&crate::inputs::image::recipes_dir(), name)
        .map_err(|e| loaded.error_at("image", Some("name"), e.to_string()))?;
    let serial = crate::inputs::image::rootfs::SERIAL;
    if let Some(i) = loaded.spec.devices.iter().position(|d| d.name == serial) {
        return Err(loaded.error_at_path(
            &[
                PathSeg::Key("devices"),
                PathSeg::Index(i),
                PathSeg::Key("name"),
            ],
            format!("{serial:?} is the root image's disk: choose another name"),
        ));
    }
    Ok(())
}
