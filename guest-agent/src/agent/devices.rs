//! Finds the block devices the host attached, by serial number: the host
//! sets each device's serial to its spec name.

use std::collections::BTreeMap;
use std::path::Path;

/// One block device as seen in the guest.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundDevice {
    pub path: String,
    pub size_bytes: u64,
    pub logical_block_size: u32,
}

/// Scans `<sys>/block` for NVMe namespaces and virtio disks. NVMe namespace
/// N>1 of device "data" is called "data.nsN".
pub fn discover(sys: &Path) -> BTreeMap<String, FoundDevice> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(sys.join("block")) else {
        return out;
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for dev in names {
        let base = sys.join("block").join(&dev);
        let serial = if dev.starts_with("nvme") {
            read_trim(&base.join("device/serial"))
        } else if dev.starts_with("vd") {
            read_trim(&base.join("serial"))
        } else {
            None
        };
        let Some(serial) = serial.filter(|s| !s.is_empty()) else {
            continue;
        };
        let nsid = dev
            .rsplit_once('n')
            .and_then(|(_, n)| n.parse::<u32>().ok())
            .filter(|_| dev.starts_with("nvme"))
            .unwrap_or(1);
        let name = if nsid > 1 {
            format!("{serial}.ns{nsid}")
        } else {
            serial
        };
        let sectors: u64 = read_trim(&base.join("size"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let lbs: u32 = read_trim(&base.join("queue/logical_block_size"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(512);
        out.insert(
            name,
            FoundDevice {
                path: format!("/dev/{dev}"),
                size_bytes: sectors * 512,
                logical_block_size: lbs,
            },
        );
    }
    out
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn finds_nvme_namespaces_and_virtio_disks_by_serial() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        put(r, "block/nvme0n1/device/serial", "data    \n");
        put(r, "block/nvme0n1/size", "131072\n");
        put(r, "block/nvme0n1/queue/logical_block_size", "4096\n");
        put(r, "block/nvme0n2/device/serial", "data\n");
        put(r, "block/nvme0n2/size", "2048\n");
        put(r, "block/vda/serial", "cmp\n");
        put(r, "block/vda/size", "8\n");
        put(r, "block/loop0/size", "8\n");
        let d = discover(r);
        assert_eq!(d.len(), 3, "{d:?}");
        assert_eq!(d["data"].path, "/dev/nvme0n1");
        assert_eq!(d["data"].size_bytes, 64 << 20);
        assert_eq!(d["data"].logical_block_size, 4096);
        assert_eq!(d["data.ns2"].path, "/dev/nvme0n2");
        assert_eq!(d["cmp"].path, "/dev/vda");
    }
}
