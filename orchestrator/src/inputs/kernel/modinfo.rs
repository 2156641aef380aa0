//! Read a kernel module's ELF `.modinfo` section (NUL-separated `key=value`).

use std::path::Path;

use object::{Object, ObjectSection};

use super::KernelError;

/// The fields we need from `.modinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModInfo {
    pub name: Option<String>,
    /// Hard dependencies (`depends=`), names normalised to underscores.
    pub depends: Vec<String>,
}

pub fn read(path: &Path) -> Result<ModInfo, KernelError> {
    let data = std::fs::read(path).map_err(|e| KernelError::io(path, e))?;
    let bad = |message: String| KernelError::ModInfo {
        path: path.to_path_buf(),
        message,
    };
    let file = object::File::parse(&*data).map_err(|e| bad(format!("not an ELF object: {e}")))?;
    let section = file
        .section_by_name(".modinfo")
        .ok_or_else(|| bad("no .modinfo section".into()))?;
    let bytes = section
        .data()
        .map_err(|e| bad(format!(".modinfo unreadable: {e}")))?;
    Ok(parse(bytes))
}

/// Parse raw `.modinfo` bytes.
pub fn parse(bytes: &[u8]) -> ModInfo {
    let mut info = ModInfo {
        name: None,
        depends: Vec::new(),
    };
    for field in bytes.split(|&b| b == 0) {
        let field = String::from_utf8_lossy(field);
        if let Some(v) = field.strip_prefix("name=") {
            info.name = Some(normalise_name(v));
        } else if let Some(v) = field.strip_prefix("depends=") {
            info.depends.extend(
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(normalise_name),
            );
        }
    }
    info
}

/// The kernel treats `-` and `_` in module names alike; we use `_`.
pub fn normalise_name(name: &str) -> String {
    name.trim().replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_depends_and_name() {
        let raw = b"license=GPL\0depends=virtio_ring,virtio-pci-x,\0name=virtio_pci\0\0";
        let info = parse(raw);
        assert_eq!(info.name.as_deref(), Some("virtio_pci"));
        assert_eq!(info.depends, vec!["virtio_ring", "virtio_pci_x"]);
    }

    #[test]
    fn empty_depends() {
        assert!(parse(b"depends=\0name=a\0").depends.is_empty());
    }
}
