//! Copy a finished build's outputs into the staging directory: bzImage,
//! config, System.map, vmlinux (debug info stripped, BTF kept), vmlinux.h,
//! UAPI headers, modules.builtin.

use std::path::Path;
use std::process::Command;

use super::{make, run};
use crate::kernel::KernelError;
use crate::kernel::cache::{BUILTIN_LIST, BZIMAGE};

pub fn collect(
    tree: &Path,
    out: &Path,
    log: &Path,
    progress: &dyn Fn(&str),
) -> Result<(), KernelError> {
    copy(&tree.join("arch/x86/boot/bzImage"), &out.join(BZIMAGE))?;
    copy(&tree.join(".config"), &out.join("config"))?;
    copy(&tree.join("System.map"), &out.join("System.map"))?;
    for f in [BUILTIN_LIST, "modules.builtin.modinfo"] {
        if tree.join(f).is_file() {
            copy(&tree.join(f), &out.join(f))?;
        }
    }
    // DWARF is only needed to make BTF; symbols and .BTF stay in the copy.
    progress("storing vmlinux (debug info stripped, BTF kept)");
    run::run(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(tree.join("vmlinux"))
            .arg(out.join("vmlinux")),
        tree,
        log,
        &mut |_| {},
    )?;
    progress("generating vmlinux.h with bpftool");
    let header = run::capture(
        Command::new("bpftool")
            .args(["btf", "dump", "file"])
            .arg(out.join("vmlinux"))
            .args(["format", "c"]),
    )?;
    let vmlinux_h = out.join("vmlinux.h");
    std::fs::write(&vmlinux_h, header).map_err(|e| KernelError::io(&vmlinux_h, e))?;
    progress("installing UAPI headers");
    let hdr = out.join("headers");
    let arg = format!("INSTALL_HDR_PATH={}", hdr.display());
    run::run(
        &mut make(&["headers_install", &arg]),
        tree,
        log,
        &mut |_| {},
    )?;
    Ok(())
}

fn copy(from: &Path, to: &Path) -> Result<(), KernelError> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| KernelError::io(from, e))
}
