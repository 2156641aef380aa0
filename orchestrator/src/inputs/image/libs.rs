//! Finding a host program and the shared libraries it loads, to copy both
//! into a guest image.
//!
//! The libraries are read from the ELF headers (PT_INTERP, DT_NEEDED,
//! DT_RUNPATH/DT_RPATH) and resolved the way the dynamic loader does,
//! never with `ldd`: ldd may run the program it inspects.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::{Endianness, FileKind};

#[derive(Debug, thiserror::Error)]
pub enum LibError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not an ELF file ({kind}): image.include takes ELF programs", path.display())]
    NotElf { path: PathBuf, kind: String },
    #[error("{}: malformed ELF: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    #[error("{} needs {name}, found in none of: {}", path.display(), searched.join(", "))]
    Missing {
        path: PathBuf,
        name: String,
        searched: Vec<String>,
    },
}

/// What the dynamic loader reads from one ELF file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ElfDeps {
    /// PT_INTERP: the dynamic loader's path, if the file names one.
    pub interp: Option<String>,
    /// DT_NEEDED, in order.
    pub needed: Vec<String>,
    pub soname: Option<String>,
    /// DT_RUNPATH and DT_RPATH, split at ':'.
    pub runpath: Vec<String>,
    pub rpath: Vec<String>,
    /// ELFCLASS64, and e_machine: a library must match the program in both.
    pub is_64: bool,
    pub machine: u16,
}

impl ElfDeps {
    /// A static executable (static-pie too): no loader, no libraries.
    pub fn is_static(&self) -> bool {
        self.interp.is_none() && self.needed.is_empty()
    }
}

/// Reads the dynamic-loading facts of the ELF file at `path`; refuses a
/// file that is not ELF.
pub fn elf_deps(path: &Path) -> Result<ElfDeps, LibError> {
    let data = std::fs::read(path).map_err(|source| LibError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_deps(path, &data)
}

fn parse_deps(path: &Path, data: &[u8]) -> Result<ElfDeps, LibError> {
    let kind = FileKind::parse(data).map_err(|e| LibError::NotElf {
        path: path.to_path_buf(),
        kind: e.to_string(),
    })?;
    match kind {
        FileKind::Elf64 => parse_elf::<elf::FileHeader64<Endianness>>(path, data, true),
        FileKind::Elf32 => parse_elf::<elf::FileHeader32<Endianness>>(path, data, false),
        other => Err(LibError::NotElf {
            path: path.to_path_buf(),
            kind: format!("{other:?}"),
        }),
    }
}

/// From the program headers alone, as the loader sees the file: section
/// headers may be stripped.
fn parse_elf<Elf: FileHeader<Endian = Endianness>>(
    path: &Path,
    data: &[u8],
    is_64: bool,
) -> Result<ElfDeps, LibError> {
    let bad = |reason: String| LibError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    let header = Elf::parse(data).map_err(|e| bad(e.to_string()))?;
    let endian = header.endian().map_err(|e| bad(e.to_string()))?;
    let segments = header
        .program_headers(endian, data)
        .map_err(|e| bad(e.to_string()))?;
    let mut deps = ElfDeps {
        is_64,
        machine: header.e_machine(endian).0,
        ..ElfDeps::default()
    };
    let mut dynamic = None;
    for seg in segments {
        if let Some(interp) = seg
            .interpreter(endian, data)
            .map_err(|e| bad(e.to_string()))?
        {
            deps.interp = Some(String::from_utf8_lossy(interp).into_owned());
        }
        if let Some(d) = seg.dynamic(endian, data).map_err(|e| bad(e.to_string()))? {
            dynamic = Some(d);
        }
    }
    let Some(dynamic) = dynamic else {
        return Ok(deps);
    };
    let mut strtab = None;
    let mut strsz = None;
    let mut entries = Vec::new();
    for d in dynamic {
        let val: u64 = d.d_val(endian).into();
        match d.d_tag(endian) {
            elf::DT_NULL => break,
            elf::DT_STRTAB => strtab = Some(val),
            elf::DT_STRSZ => strsz = Some(val),
            t @ (elf::DT_NEEDED | elf::DT_SONAME | elf::DT_RUNPATH | elf::DT_RPATH) => {
                entries.push((t, val))
            }
            _ => {}
        }
    }
    if entries.is_empty() {
        return Ok(deps);
    }
    let (Some(addr), Some(size)) = (strtab, strsz) else {
        return Err(bad("dynamic section without DT_STRTAB/DT_STRSZ".into()));
    };
    // DT_STRTAB is an address: find the loaded segment that holds it.
    let strings = segments
        .iter()
        .filter(|s| s.p_type(endian) == elf::PT_LOAD)
        .find_map(|s| s.data_range(endian, data, addr, size).ok().flatten())
        .ok_or_else(|| bad(format!("DT_STRTAB {addr:#x} is in no loaded segment")))?;
    let string = |off: u64| -> Result<String, LibError> {
        let tail = usize::try_from(off)
            .ok()
            .and_then(|o| strings.get(o..))
            .ok_or_else(|| bad(format!("string offset {off} outside DT_STRTAB")))?;
        let end = tail
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| bad(format!("unterminated string at offset {off}")))?;
        Ok(String::from_utf8_lossy(&tail[..end]).into_owned())
    };
    for (tag, val) in entries {
        let s = string(val)?;
        match tag {
            elf::DT_NEEDED => deps.needed.push(s),
            elf::DT_SONAME => deps.soname = Some(s),
            elf::DT_RUNPATH => deps.runpath.extend(split_path(&s)),
            _ => deps.rpath.extend(split_path(&s)),
        }
    }
    Ok(deps)
}

fn split_path(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(':').filter(|p| !p.is_empty()).map(str::to_string)
}

/// The multiarch directory name of an ELF machine, as Debian lays out
/// /lib/<triplet> and /usr/lib/<triplet>.
fn multiarch(machine: u16, is_64: bool) -> Option<&'static str> {
    match (elf::Machine(machine), is_64) {
        (elf::EM_X86_64, true) => Some("x86_64-linux-gnu"),
        (elf::EM_386, false) => Some("i386-linux-gnu"),
        (elf::EM_AARCH64, true) => Some("aarch64-linux-gnu"),
        _ => None,
    }
}

/// The loader's default directories for libraries of this machine, after
/// RPATH and RUNPATH (Debian's ld.so.cache covers the same directories).
fn default_dirs(machine: u16, is_64: bool) -> Vec<String> {
    let mut dirs = Vec::new();
    if let Some(triplet) = multiarch(machine, is_64) {
        dirs.push(format!("/lib/{triplet}"));
        dirs.push(format!("/usr/lib/{triplet}"));
    }
    if is_64 {
        dirs.push("/lib64".into());
        dirs.push("/usr/lib64".into());
    }
    dirs.extend(["/lib", "/usr/lib"].map(String::from));
    dirs
}

/// `$ORIGIN` (and `${ORIGIN}`) is the directory of the object naming the
/// path.
fn expand_origin(dir: &str, object: &Path) -> String {
    let origin = object
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.replace("${ORIGIN}", &origin)
        .replace("$ORIGIN", &origin)
}

/// Every library `program` loads, the dynamic loader first, then the
/// libraries breadth-first as the loader finds them; empty for a static
/// program. The file is read, never run.
pub fn resolve_closure(program: &Path) -> Result<Vec<PathBuf>, LibError> {
    let root = elf_deps(program)?;
    if root.is_static() {
        return Ok(Vec::new());
    }
    // $ORIGIN of the program is where its real file is.
    let program_real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let mut out: Vec<PathBuf> = Vec::new();
    // Names (as written in DT_NEEDED, and SONAMEs) already loaded: the
    // loader maps a library once.
    let mut loaded: BTreeSet<String> = BTreeSet::new();
    if let Some(interp) = &root.interp {
        let path = PathBuf::from(interp);
        let deps = elf_deps(&path).map_err(|e| match e {
            LibError::Read { .. } => LibError::Missing {
                path: program.to_path_buf(),
                name: interp.clone(),
                searched: vec!["PT_INTERP".into()],
            },
            other => other,
        })?;
        if let Some(base) = path.file_name() {
            loaded.insert(base.to_string_lossy().into_owned());
        }
        loaded.extend(deps.soname);
        out.push(path);
    }
    // The executable's RPATH applies to every library unless it has a
    // RUNPATH (then its own RUNPATH applies only to its own needs).
    let inherited: Vec<String> = if root.runpath.is_empty() {
        root.rpath
            .iter()
            .map(|d| expand_origin(d, &program_real))
            .collect()
    } else {
        Vec::new()
    };
    let defaults = default_dirs(root.machine, root.is_64);
    let mut queue: VecDeque<(PathBuf, ElfDeps)> = VecDeque::new();
    queue.push_back((program_real.clone(), root.clone()));
    while let Some((object, deps)) = queue.pop_front() {
        let mut dirs: Vec<String> = Vec::new();
        if deps.runpath.is_empty() {
            dirs.extend(deps.rpath.iter().map(|d| expand_origin(d, &object)));
            dirs.extend(inherited.iter().cloned());
        }
        dirs.extend(deps.runpath.iter().map(|d| expand_origin(d, &object)));
        dirs.extend(defaults.iter().cloned());
        for name in &deps.needed {
            if loaded.contains(name) {
                continue;
            }
            let (path, lib) =
                find_library(name, &dirs, &root).ok_or_else(|| LibError::Missing {
                    path: object.clone(),
                    name: name.clone(),
                    searched: if name.contains('/') {
                        vec![name.clone()]
                    } else {
                        dirs.clone()
                    },
                })?;
            loaded.insert(name.clone());
            if let Some(so) = &lib.soname {
                loaded.insert(so.clone());
            }
            out.push(path.clone());
            queue.push_back((path, lib));
        }
    }
    Ok(out)
}

/// The first file named `name` in `dirs` that is an ELF object for the
/// program's class and machine (the loader skips others); a name with a
/// '/' is a path.
fn find_library(name: &str, dirs: &[String], program: &ElfDeps) -> Option<(PathBuf, ElfDeps)> {
    let candidates: Vec<PathBuf> = if name.contains('/') {
        vec![PathBuf::from(name)]
    } else {
        dirs.iter().map(|d| Path::new(d).join(name)).collect()
    };
    candidates.into_iter().find_map(|p| {
        let deps = elf_deps(&p).ok()?;
        (deps.is_64 == program.is_64 && deps.machine == program.machine).then_some((p, deps))
    })
}

/// Absolute paths of every library the program loads, the dynamic loader
/// included; empty for a static program. The error names the file.
pub fn library_closure(program: &Path) -> Result<Vec<String>, LibError> {
    let mut libs: Vec<String> = resolve_closure(program)?
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    libs.sort();
    libs.dedup();
    Ok(libs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The libraries in `ldd` output (the test may run ldd; the testbed
    /// may not). Without cargo's LD_LIBRARY_PATH, which the image ignores.
    fn ldd(program: &Path) -> BTreeSet<String> {
        let out = std::process::Command::new("ldd")
            .arg(program)
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap();
        assert!(out.status.success(), "ldd {}", program.display());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut libs = BTreeSet::new();
        for line in text.lines().map(str::trim) {
            assert!(!line.contains("not found"), "{line}");
            let path = match line.split_once("=>") {
                Some((_, rhs)) => rhs.split_whitespace().next(),
                None => line.split_whitespace().next(),
            };
            if let Some(p) = path.filter(|p| p.starts_with('/')) {
                libs.insert(p.to_string());
            }
        }
        libs
    }

    #[test]
    fn libraries_of_ls_match_ldd() {
        let ls = Path::new("/bin/ls");
        let ours: BTreeSet<String> = library_closure(ls).unwrap().into_iter().collect();
        assert!(ours.len() >= 2, "{ours:?}");
        assert_eq!(ours, ldd(ls));
    }

    /// Programs with deeper trees of libraries, where installed: each
    /// library's own needs are followed.
    #[test]
    fn libraries_of_larger_programs_match_ldd() {
        let mut checked = 0;
        for name in [
            "/usr/bin/qemu-system-x86_64",
            "/usr/bin/fio",
            "/usr/bin/git",
            "/usr/bin/python3",
            "/usr/bin/ssh",
        ] {
            let Some(p) = crate::host::hosttools::find_program(name) else {
                continue;
            };
            let ours: BTreeSet<String> = library_closure(&p).unwrap().into_iter().collect();
            assert_eq!(ours, ldd(&p), "{}", p.display());
            checked += 1;
        }
        assert!(checked > 0, "none of the programs is installed");
    }

    /// rustc finds librustc_driver through RUNPATH `$ORIGIN/../lib`, and
    /// that library finds LLVM through its own.
    #[test]
    fn runpath_with_origin_is_followed_like_the_loader() {
        let out = std::process::Command::new("rustc")
            .args(["--print", "sysroot"])
            .output()
            .unwrap();
        let sysroot = String::from_utf8(out.stdout).unwrap();
        let rustc = std::fs::canonicalize(Path::new(sysroot.trim()).join("bin/rustc")).unwrap();
        assert!(!elf_deps(&rustc).unwrap().runpath.is_empty());
        let ours: BTreeSet<String> = library_closure(&rustc).unwrap().into_iter().collect();
        assert!(
            ours.iter().any(|l| l.contains("librustc_driver")),
            "{ours:?}"
        );
        assert_eq!(ours, ldd(&rustc));
    }

    #[test]
    fn a_file_that_is_not_elf_is_refused_and_never_run() {
        let t = tempfile::tempdir().unwrap();
        let marker = t.path().join("ran");
        let script = t.path().join("tool.sh");
        std::fs::write(&script, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = library_closure(&script).unwrap_err().to_string();
        assert!(e.contains(&script.display().to_string()), "{e}");
        assert!(e.contains("is not an ELF file"), "{e}");
        assert!(!marker.exists(), "the file was executed");
    }

    #[test]
    fn a_static_program_needs_nothing() {
        let busybox = crate::host::paths::busybox().expect("busybox-static is a host tool");
        assert!(elf_deps(&busybox).unwrap().is_static());
        assert_eq!(library_closure(&busybox).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_missing_library_is_named_with_the_file_that_needs_it() {
        // /bin/ls with one DT_NEEDED renamed in its string table (same
        // length, so the ELF stays valid) to a library no host has.
        let mut bytes = std::fs::read("/bin/ls").unwrap();
        let (from, to) = (b"libselinux.so.1\0", b"libselinuX.so.1\0");
        let at = bytes
            .windows(from.len())
            .position(|w| w == from)
            .expect("/bin/ls needs libselinux");
        bytes[at..at + to.len()].copy_from_slice(to);
        let t = tempfile::tempdir().unwrap();
        let patched = t.path().join("ls");
        std::fs::write(&patched, bytes).unwrap();
        let e = library_closure(&patched).unwrap_err().to_string();
        assert!(e.contains(&patched.display().to_string()), "{e}");
        assert!(e.contains("needs libselinuX.so.1"), "{e}");
        assert!(
            e.contains("/lib/x86_64-linux-gnu"),
            "names where it looked: {e}"
        );
    }

    #[test]
    fn origin_is_the_directory_of_the_object() {
        assert_eq!(
            expand_origin("$ORIGIN/../lib:${ORIGIN}", Path::new("/opt/x/bin/tool")),
            "/opt/x/bin/../lib:/opt/x/bin"
        );
    }
}
