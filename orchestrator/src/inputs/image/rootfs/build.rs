//! The build steps of a root filesystem image: mmdebstrap into a
//! directory, the installed package list, and an ext4 image made from the
//! directory with `mkfs.ext4 -d` (no loop mount).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::RootfsError;
use crate::host::wait::{Until, Waited, poll};
use crate::inputs::image::recipe::Recipe;
use crate::machine::qemu::process::{GroupProcess, tail_lines};

/// Files the guest never reads; leaving them out makes the image smaller.
const EXCLUDED: [&str; 4] = [
    "/usr/share/doc/*",
    "/usr/share/man/*",
    "/usr/share/info/*",
    "/usr/share/locale/*",
];

/// `mmdebstrap` of the recipe into `root` (which must not exist yet), its
/// output in `log`. It runs in a mount namespace of its own: the /proc,
/// /sys and /dev it mounts in the new root vanish with it however it ends,
/// so no host mount can be left below the build directory.
pub fn debootstrap(recipe: &Recipe, root: &Path, log: &Path) -> Result<(), RootfsError> {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "mmdebstrap"])
        .arg("--mode=root")
        .arg(format!("--variant={}", recipe.variant.as_str()))
        .arg("--aptopt=APT::Install-Recommends \"false\"")
        .arg(format!("--include={}", recipe.all_packages().join(",")));
    for path in EXCLUDED {
        cmd.arg(format!("--dpkgopt=path-exclude={path}"));
    }
    // update-alternatives (openjdk's postinst, ...) fails when the
    // directory of a man page link it manages is missing.
    cmd.arg("--setup-hook=mkdir -p \"$1\"/usr/share/man/man1 \"$1\"/usr/share/man/man7 \"$1\"/usr/share/man/man8");
    let (mirror, suite) = (&recipe.mirror, &recipe.suite);
    cmd.arg(suite).arg(root).args([
        format!("deb {mirror} {suite} main"),
        format!("deb {mirror} {suite}-updates main"),
        format!("deb {mirror}-security {suite}-security main"),
    ]);
    cmd.env("DEBIAN_FRONTEND", "noninteractive")
        .env("LC_ALL", "C.UTF-8");
    run_logged(&mut cmd, "mmdebstrap", log)
}

/// Every package installed in `root`: name -> version, read from its dpkg
/// database (no chroot).
pub fn installed_packages(root: &Path) -> Result<BTreeMap<String, String>, RootfsError> {
    let out = Command::new("dpkg-query")
        .arg(format!(
            "--admindir={}",
            root.join("var/lib/dpkg").display()
        ))
        .args(["-W", "-f=${Package}\t${Version}\n"])
        .output()
        .map_err(|e| tool("dpkg-query", e.to_string()))?;
    if !out.status.success() {
        return Err(tool(
            "dpkg-query",
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(p, v)| (p.to_string(), v.to_string()))
        .collect())
}

/// Writes an ext4 image of `root` to `image` (a new file) and returns its
/// size. Sized from the tree with room for the inodes and metadata; no
/// journal: the guest mounts it read-only.
pub fn make_ext4(root: &Path, image: &Path, label: &str, log: &Path) -> Result<u64, RootfsError> {
    let (bytes, inodes) = tree_size(root)?;
    let size = image_size(bytes, inodes);
    let io = |source| RootfsError::Io {
        path: image.to_path_buf(),
        source,
    };
    let f = std::fs::File::create_new(image).map_err(io)?;
    f.set_len(size).map_err(io)?;
    drop(f);
    let mut cmd = Command::new("mkfs.ext4");
    cmd.args(["-q", "-F", "-b", "4096", "-m", "0", "-O", "^has_journal"])
        .arg("-N")
        .arg((inodes + inodes / 5 + 4096).to_string())
        .arg("-L")
        .arg(label)
        .arg("-d")
        .arg(root)
        .arg(image);
    run_logged(&mut cmd, "mkfs.ext4", log)?;
    Ok(size)
}

/// Bytes the tree's files take in 4 KiB blocks, and its inode count.
fn tree_size(root: &Path) -> Result<(u64, u64), RootfsError> {
    let (mut bytes, mut inodes) = (0u64, 0u64);
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| RootfsError::Io {
            path: dir.clone(),
            source,
        })?;
        for e in entries.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            inodes += 1;
            bytes += m.size().div_ceil(4096) * 4096;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok((bytes, inodes))
}

/// The image's size: the files, 256 bytes per inode, a tenth more for
/// metadata and 64 MiB of slack, in whole MiB.
fn image_size(bytes: u64, inodes: u64) -> u64 {
    let raw = bytes + bytes / 10 + inodes * 256 + (64 << 20);
    raw.div_ceil(1 << 20) << 20
}

fn tool(program: &str, reason: String) -> RootfsError {
    RootfsError::Tool {
        program: program.into(),
        reason,
    }
}

/// Runs `cmd` in a process group that dies with us, output to `log`;
/// fails with the log's last lines.
fn run_logged(cmd: &mut Command, name: &str, log: &Path) -> Result<(), RootfsError> {
    let io = |source| RootfsError::Io {
        path: log.to_path_buf(),
        source,
    };
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io)?;
    let err = out.try_clone().map_err(io)?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let mut group = GroupProcess::spawn_command(cmd).map_err(|e| tool(name, e.to_string()))?;
    match poll(Until::interrupted(), Duration::from_millis(100), || {
        group.try_wait()
    }) {
        Waited::Done(status) if status.success() => Ok(()),
        Waited::Done(status) => Err(tool(
            name,
            format!("{status}; last lines:\n{}", tail_lines(log, 15)),
        )),
        Waited::TimedOut | Waited::Interrupted => {
            group.kill();
            Err(RootfsError::Interrupted)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_has_room_for_files_inodes_and_slack() {
        assert_eq!(image_size(0, 0), 64 << 20);
        let s = image_size(200 << 20, 10_000);
        assert!(s >= (220 << 20) + 10_000 * 256 + (64 << 20), "{s}");
        assert_eq!(s % (1 << 20), 0);
    }

    #[test]
    fn a_tree_becomes_an_ext4_image_with_its_files() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/debian_version"), "12.0\n").unwrap();
        let image = t.path().join("x.ext4");
        let log = t.path().join("log");
        let size = make_ext4(&root, &image, "testbed-root", &log).unwrap();
        assert_eq!(std::fs::metadata(&image).unwrap().len(), size);
        // debugfs reads the image without mounting it.
        let out = Command::new("debugfs")
            .args(["-R", "cat /etc/debian_version"])
            .arg(&image)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "12.0\n");
        // A second build into the same file is refused, not overwritten.
        assert!(make_ext4(&root, &image, "testbed-root", &log).is_err());
    }
}
