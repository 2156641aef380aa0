//! A stock Debian binary kernel: download the pinned .deb, verify it, unpack
//! the image and modules into the cache.

use std::path::{Path, PathBuf};

use super::apt::{self, Pin};
use super::cache::{self, BZIMAGE, MODULES_DIR, Meta, Staging};
use super::deb::{self, Codec, Extract};
use super::descriptor::{Descriptor, KIND_DEBIAN_BINARY, PackagePin};
use super::hashing::{KeyHasher, sha256_file};
use super::{KernelArtifact, KernelError};

/// Bump when the unpacked layout changes, so old entries are not reused.
const LAYOUT: &str = "debian-binary-v1";

pub fn key(pin: &PackagePin) -> String {
    KeyHasher::default()
        .part("layout", LAYOUT.as_bytes())
        .part("package", pin.name.as_bytes())
        .part("version", pin.version.as_bytes())
        .part("sha256", pin.sha256.to_ascii_lowercase().as_bytes())
        .finish()
}

pub fn resolve(
    desc: &Descriptor,
    pin: &PackagePin,
    cache_root: &Path,
    progress: &dyn Fn(&str),
) -> Result<KernelArtifact, KernelError> {
    let key = key(pin);
    if let Some(a) = cache::load_entry(cache_root, &key)? {
        return Ok(a);
    }
    let _lock = cache::lock_entry(
        cache_root,
        &key,
        &format!("kernel {} in the cache", desc.name),
        progress,
    )?;
    // Another process may have installed it while we waited.
    if let Some(a) = cache::load_entry(cache_root, &key)? {
        return Ok(a);
    }
    let deb = apt::fetch(
        cache_root,
        &Pin {
            package: &pin.name,
            version: &pin.version,
            sha256: &pin.sha256,
            descriptor: &desc.path,
            sha_field: "package.sha256",
        },
        progress,
    )?;
    progress(&format!("unpacking {}", deb.display()));
    let staging = Staging::new(cache_root, &key)?;
    deb::unpack(&deb, &staging.dir, &select)?;
    let release = arrange_boot_files(&deb, &staging.dir)?;
    let release_dir = staging
        .dir
        .join(MODULES_DIR)
        .join("lib/modules")
        .join(&release);
    let has_modules = release_dir.is_dir();
    let config = staging.dir.join("config");
    let config_sha256 = if config.is_file() {
        Some(sha256_file(&config)?)
    } else {
        None
    };
    let meta = Meta {
        name: desc.name.clone(),
        key: key.clone(),
        kind: KIND_DEBIAN_BINARY.into(),
        release,
        description: format!("Debian {} {}", pin.name, pin.version),
        config_sha256,
        patches: Vec::new(),
        has_modules,
        modules: desc.modules.clone(),
        inputs: [
            ("package", pin.name.clone()),
            ("version", pin.version.clone()),
            ("deb_sha256", pin.sha256.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::String(v)))
        .collect(),
        created_unix: cache::now_unix(),
    };
    meta.write(&staging.dir)?;
    let dir = staging.commit()?;
    progress(&format!("cached kernel {} at {}", desc.name, dir.display()));
    cache::load_entry(cache_root, &key)?.ok_or_else(|| KernelError::CacheDamaged {
        dir,
        message: "entry vanished right after it was written".into(),
    })
}

/// Which members of the .deb to keep, and where.
fn select(path: &Path) -> Option<Extract> {
    let s = path.to_str()?;
    if let Some(file) = s.strip_prefix("boot/") {
        let keep = ["vmlinuz-", "config-", "System.map-"]
            .iter()
            .any(|p| file.starts_with(p));
        return keep.then(|| Extract {
            dest: PathBuf::from(s),
            decompress: None,
        });
    }
    let rest = s
        .strip_prefix("lib/modules/")
        .or_else(|| s.strip_prefix("usr/lib/modules/"))?;
    let base = Path::new(MODULES_DIR).join("lib/modules");
    // Compressed modules are stored plain: the guest uses finit_module on them.
    let (rest, decompress) = if let Some(r) = rest.strip_suffix(".ko.xz") {
        (format!("{r}.ko"), Some(Codec::Xz))
    } else if let Some(r) = rest.strip_suffix(".ko.zst") {
        (format!("{r}.ko"), Some(Codec::Zstd))
    } else {
        (rest.to_string(), None)
    };
    Some(Extract {
        dest: base.join(rest),
        decompress,
    })
}

/// Rename `boot/vmlinuz-<rel>` etc. to fixed names; returns `<rel>`.
fn arrange_boot_files(deb: &Path, dir: &Path) -> Result<String, KernelError> {
    let boot = dir.join("boot");
    let bad = |message: String| KernelError::Deb {
        path: deb.to_path_buf(),
        message,
    };
    let mut releases = Vec::new();
    if boot.is_dir() {
        for entry in std::fs::read_dir(&boot).map_err(|e| KernelError::io(&boot, e))? {
            let name = entry.map_err(|e| KernelError::io(&boot, e))?.file_name();
            if let Some(rel) = name.to_str().and_then(|n| n.strip_prefix("vmlinuz-")) {
                releases.push(rel.to_string());
            }
        }
    }
    let release = match releases.as_slice() {
        [one] => one.clone(),
        [] => return Err(bad("no boot/vmlinuz-* in the package".into())),
        many => return Err(bad(format!("several kernels in the package: {many:?}"))),
    };
    for (from, to) in [
        (format!("vmlinuz-{release}"), BZIMAGE),
        (format!("config-{release}"), "config"),
        (format!("System.map-{release}"), "System.map"),
    ] {
        let src = boot.join(from);
        if src.is_file() {
            let dst = dir.join(to);
            std::fs::rename(&src, &dst).map_err(|e| KernelError::io(&dst, e))?;
        }
    }
    std::fs::remove_dir_all(&boot).map_err(|e| KernelError::io(&boot, e))?;
    let modules = dir.join(MODULES_DIR).join("lib/modules");
    if modules.is_dir() {
        for entry in std::fs::read_dir(&modules).map_err(|e| KernelError::io(&modules, e))? {
            let name = entry.map_err(|e| KernelError::io(&modules, e))?.file_name();
            if name.to_str() != Some(release.as_str()) {
                return Err(bad(format!(
                    "modules for release {} do not match kernel {release}",
                    name.to_string_lossy()
                )));
            }
        }
    }
    Ok(release)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_maps_members() {
        let ko = select(Path::new("lib/modules/6.1/kernel/a.ko.xz")).unwrap();
        assert_eq!(
            ko.dest,
            PathBuf::from("modules/lib/modules/6.1/kernel/a.ko")
        );
        assert_eq!(ko.decompress, Some(Codec::Xz));
        let z = select(Path::new("usr/lib/modules/6.1/kernel/b.ko.zst")).unwrap();
        assert_eq!(z.decompress, Some(Codec::Zstd));
        assert!(select(Path::new("boot/vmlinuz-6.1")).is_some());
        assert!(select(Path::new("usr/share/doc/x/changelog.gz")).is_none());
    }

    /// A .deb as dpkg-deb lays it out, with an xz- and a zstd-compressed module.
    fn fake_deb(path: &Path, module: &[u8]) {
        use std::io::Write;
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 6);
        xz.write_all(module).unwrap();
        let ko_xz = xz.finish().unwrap();
        let ko_zst = zstd::encode_all(module, 3).unwrap();
        let mut tar = tar::Builder::new(Vec::new());
        for (name, data) in [
            ("./boot/vmlinuz-1.0-t", &b"kernel"[..]),
            ("./boot/config-1.0-t", b"CONFIG_X=y\n"),
            (
                "./lib/modules/1.0-t/modules.builtin",
                b"kernel/drivers/nvme/host/nvme.ko\n",
            ),
            ("./lib/modules/1.0-t/kernel/a.ko.xz", &ko_xz),
            ("./lib/modules/1.0-t/kernel/b-c.ko.zst", &ko_zst),
            ("./usr/share/doc/linux/changelog", b"skip me"),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, name, data).unwrap();
        }
        let data_tar = tar.into_inner().unwrap();
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 6);
        xz.write_all(&data_tar).unwrap();
        let data_xz = xz.finish().unwrap();
        let mut ar = ar::Builder::new(std::fs::File::create(path).unwrap());
        for (name, data) in [
            ("debian-binary", &b"2.0\n"[..]),
            ("control.tar.xz", b""),
            ("data.tar.xz", &data_xz),
        ] {
            let header = ar::Header::new(name.as_bytes().to_vec(), data.len() as u64);
            ar.append(&header, data).unwrap();
        }
    }

    #[test]
    fn unpacks_deb_and_decompresses_modules() {
        let dir = tempfile::tempdir().unwrap();
        let deb_path = dir.path().join("k.deb");
        let module = b"\x7fELF pretend module".repeat(50);
        fake_deb(&deb_path, &module);
        let out = dir.path().join("out");
        deb::unpack(&deb_path, &out, &select).unwrap();
        let release = arrange_boot_files(&deb_path, &out).unwrap();
        assert_eq!(release, "1.0-t");
        assert_eq!(std::fs::read(out.join(BZIMAGE)).unwrap(), b"kernel");
        assert!(out.join("config").is_file());
        assert!(!out.join("boot").exists());
        assert!(!out.join("usr").exists());
        let kdir = out.join("modules/lib/modules/1.0-t/kernel");
        assert_eq!(std::fs::read(kdir.join("a.ko")).unwrap(), module);
        assert_eq!(std::fs::read(kdir.join("b-c.ko")).unwrap(), module);
        assert!(!kdir.join("a.ko.xz").exists());
    }

    #[test]
    fn deb_without_data_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("empty.deb");
        let mut ar = ar::Builder::new(std::fs::File::create(&p).unwrap());
        ar.append(
            &ar::Header::new(b"debian-binary".to_vec(), 4),
            &b"2.0\n"[..],
        )
        .unwrap();
        drop(ar);
        let err = deb::unpack(&p, dir.path(), &select)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("empty.deb") && err.contains("no data.tar"),
            "{err}"
        );
    }

    #[test]
    fn a_second_process_waits_for_the_install_and_uses_it() {
        use std::cell::RefCell;
        use std::sync::mpsc;
        use std::time::Duration;

        let t = tempfile::tempdir().unwrap();
        let cache_root = t.path().to_path_buf();
        // The .deb is downloaded and verified already: no apt-get.
        let deb = cache::downloads_dir(&cache_root).join("linux-image-t_1.0.deb");
        std::fs::create_dir_all(deb.parent().unwrap()).unwrap();
        fake_deb(&deb, b"module");
        let pin = PackagePin {
            name: "linux-image-t".into(),
            version: "1.0".into(),
            sha256: sha256_file(&deb).unwrap(),
        };
        let desc = Descriptor {
            name: "t".into(),
            path: t.path().join("t.toml"),
            text: String::new(),
            modules: vec![],
            kind: super::super::descriptor::Kind::DebianBinary(pin.clone()),
        };
        let k = key(&pin);
        let holder = crate::host::lock::test_support::Holder::exclusive(
            &cache::kernels_dir(&cache_root).join(format!(".{k}.lock")),
        );
        let (tx, rx) = mpsc::channel();
        let root = cache_root.clone();
        let worker = std::thread::spawn(move || {
            let said = RefCell::new(Vec::new());
            let a = resolve(&desc, &pin, &root, &|m: &str| {
                said.borrow_mut().push(m.to_string())
            });
            tx.send(()).unwrap();
            (a.map(|a| a.description), said.into_inner())
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "waits for the other process"
        );
        // The other process installs the entry, then lets go.
        let entry = cache::entry_dir(&cache_root, &k);
        std::fs::create_dir_all(&entry).unwrap();
        std::fs::write(entry.join(BZIMAGE), b"theirs").unwrap();
        Meta {
            name: "t".into(),
            key: k.clone(),
            kind: KIND_DEBIAN_BINARY.into(),
            release: "1.0-t".into(),
            description: "installed by the other process".into(),
            config_sha256: None,
            patches: vec![],
            has_modules: false,
            modules: vec![],
            inputs: Default::default(),
            created_unix: 0,
        }
        .write(&entry)
        .unwrap();
        let pid = holder.pid();
        holder.release();
        let (description, said) = worker.join().unwrap();
        assert_eq!(description.unwrap(), "installed by the other process");
        assert_eq!(
            said,
            [format!(
                "waiting for kernel t in the cache: in use by pid {pid}"
            )]
        );
    }

    #[test]
    fn key_depends_on_every_pin_field() {
        let p = PackagePin {
            name: "a".into(),
            version: "1".into(),
            sha256: "00".repeat(32),
        };
        let mut q = p.clone();
        q.version = "2".into();
        assert_ne!(key(&p), key(&q));
        assert_eq!(key(&p), key(&p.clone()));
    }
}
