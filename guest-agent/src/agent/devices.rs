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

/// Scans `<sys>/block` for disks with a serial, wherever their kind keeps
/// it ([`serial_of`]), so a new device kind on the host needs nothing here.
/// NVMe namespace N>1 of device "data" is called "data.nsN".
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
        let Some(serial) = serial_of(&base) else {
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

/// A disk's serial: an NVMe controller's (`device/serial`), a virtio-blk
/// disk's (`serial`), or a SCSI disk's unit serial number page (VPD 0x80,
/// `device/vpd_pg80`: a 4-byte header, then the serial).
fn serial_of(base: &Path) -> Option<String> {
    let plain = ["device/serial", "serial"]
        .iter()
        .find_map(|f| read_trim(&base.join(f)).filter(|s| !s.is_empty()));
    plain.or_else(|| {
        let page = std::fs::read(base.join("device/vpd_pg80")).ok()?;
        let len = usize::from(u16::from_be_bytes([*page.get(2)?, *page.get(3)?]));
        let body = page.get(4..(4 + len).min(page.len()))?;
        let s = String::from_utf8_lossy(body)
            .trim_matches(|c: char| c == '\0' || c.is_whitespace())
            .to_string();
        (page[1] == 0x80 && !s.is_empty()).then_some(s)
    })
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

    #[test]
    fn finds_a_scsi_disk_by_its_unit_serial_number_page() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let mut page = vec![0x00, 0x80, 0x00, 0x08];
        page.extend_from_slice(b"disk    ");
        let p = r.join("block/sda/device/vpd_pg80");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, &page).unwrap();
        put(r, "block/sda/size", "16\n");
        // A page of another code is not a serial.
        let p = r.join("block/sdb/device/vpd_pg80");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, [0x00, 0x83, 0x00, 0x02, b'x', b'y']).unwrap();
        let d = discover(r);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d["disk"].path, "/dev/sda");
        assert_eq!(d["disk"].size_bytes, 16 * 512);
    }
}
