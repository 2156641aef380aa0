//! Copy a finished build's outputs into the staging directory: bzImage,
//! config, System.map, vmlinux (debug info stripped, BTF kept), vmlinux.h,
//! UAPI headers, modules.builtin.

use std::path::Path;
use std::process::Command;

use super::{KTree, run};
use crate::inputs::kernel::KernelError;
use crate::inputs::kernel::cache::{BUILTIN_LIST, BZIMAGE};

pub fn collect(
    tree: &KTree,
    out: &Path,
    log: &Path,
    progress: &dyn Fn(&str),
) -> Result<(), KernelError> {
    let built = &tree.obj;
    copy(&built.join("arch/x86/boot/bzImage"), &out.join(BZIMAGE))?;
    copy(&built.join(".config"), &out.join("config"))?;
    copy(&built.join("System.map"), &out.join("System.map"))?;
    for f in [BUILTIN_LIST, "modules.builtin.modinfo"] {
        if built.join(f).is_file() {
            copy(&built.join(f), &out.join(f))?;
        }
    }
    // DWARF is only needed to make BTF; symbols and .BTF stay in the copy.
    progress("storing vmlinux (debug info stripped, BTF kept)");
    run::run(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(built.join("vmlinux"))
            .arg(out.join("vmlinux")),
        built,
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
        &mut tree.make(&["headers_install", &arg]),
        &tree.src,
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
