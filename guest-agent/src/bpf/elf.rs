//! Takes one BPF program out of a clang-built object (ELF64, little-endian,
//! EM_BPF) with the `object` crate: the bytes of a section, its name, and
//! whether any relocation section applies to it.

use object::elf::{EM_BPF, SHT_CREL, SHT_REL, SHT_RELA};
use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
use object::{FileKind, LittleEndian, Object as _, ObjectSection as _};

/// What is wrong with an object file; the caller names the file
/// (`BpfError::Elf`).
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF file: {0}")]
    NotElf(String),
    #[error("not a 64-bit little-endian ELF ({0})")]
    NotElf64Le(&'static str),
    #[error("machine is {0}, not BPF (247): compile with clang -target bpf")]
    NotBpf(u16),
    // object's errors are only in the messages: the caller keeps the text.
    #[error("truncated or malformed headers: {0}")]
    Headers(object::read::Error),
    #[error("section {index} ({name:?}): {error}")]
    Section {
        index: usize,
        name: String,
        error: object::read::Error,
    },
}

/// A parsed object; borrows the file's bytes. Every section's name and
/// bytes were checked by [`Object::parse`].
pub struct Object<'a> {
    file: ElfFile64<'a, LittleEndian>,
}

impl<'a> Object<'a> {
    /// Parses and checks the headers, and the name and extent of every
    /// section.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ElfError> {
        match FileKind::parse(bytes) {
            Ok(FileKind::Elf64) => {}
            Ok(FileKind::Elf32) => return Err(ElfError::NotElf64Le("32-bit")),
            Ok(other) => return Err(ElfError::NotElf(format!("{other:?} file"))),
            Err(e) => return Err(ElfError::NotElf(e.to_string())),
        }
        let header =
            object::elf::FileHeader64::<LittleEndian>::parse(bytes).map_err(ElfError::Headers)?;
        if !header.is_little_endian() {
            return Err(ElfError::NotElf64Le("big-endian"));
        }
        let machine = header.e_machine(LittleEndian);
        if machine != EM_BPF {
            return Err(ElfError::NotBpf(machine.0));
        }
        let file = ElfFile64::<LittleEndian>::parse(bytes).map_err(ElfError::Headers)?;
        for section in file.sections() {
            let index = section.index().0;
            let name = section.name().map_err(|error| ElfError::Section {
                index,
                name: String::from_utf8_lossy(section.name_bytes().unwrap_or(b"?")).into_owned(),
                error,
            })?;
            // SHT_NOBITS sections have no bytes in the file: empty data.
            section.data().map_err(|error| ElfError::Section {
                index,
                name: name.to_string(),
                error,
            })?;
        }
        Ok(Object { file })
    }

    /// Names of all sections but the null one, in file order.
    pub fn section_names(&self) -> Vec<&'a str> {
        // Parse checked every name.
        self.file
            .sections()
            .map(|s| s.name().unwrap_or(""))
            .collect()
    }

    /// The bytes of section `name`.
    pub fn section(&self, name: &str) -> Option<&'a [u8]> {
        self.file.section_by_name(name)?.data().ok()
    }

    /// Whether a REL/RELA/CREL section applies to section `name`. Read from
    /// the section table itself, so that no relocation section is missed
    /// (`ObjectSection::relocations` skips those that use another symbol
    /// table or cannot be read).
    pub fn has_relocations(&self, name: &str) -> bool {
        let Some(target) = self.file.section_by_name(name) else {
            return false;
        };
        let target = target.index();
        let endian = self.file.endian();
        self.file.elf_section_table().iter().any(|s| {
            matches!(s.sh_type(endian), SHT_REL | SHT_RELA | SHT_CREL)
                && s.info_link(endian) == target
                && s.sh_size(endian) > 0
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::time::Duration;

    use testbed_proc::{RunError, run_captured};

    use super::*;
    use crate::bpf::BpfError;
    use crate::bpf::prog::Program;

    /// Compiles C for BPF with the host's clang (a build dependency of the
    /// project), into a temp dir; None (and a note) when there is no clang.
    fn compile(src: &str) -> Option<Vec<u8>> {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("p.c");
        let o = dir.path().join("p.o");
        std::fs::write(&c, src).unwrap();
        let out = match run_captured(
            Command::new("clang")
                .args(["-O2", "-target", "bpf", "-c"])
                .arg(&c)
                .arg("-o")
                .arg(&o),
            Duration::from_secs(300),
        ) {
            Ok(out) => out,
            Err(RunError::Spawn { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                eprintln!("skipped: no clang on PATH to build a BPF object");
                return None;
            }
            Err(e) => panic!("clang: {e}"),
        };
        assert!(out.status.success(), "{}", out.stderr);
        Some(std::fs::read(&o).unwrap())
    }

    const PROG: &str = r#"
        __attribute__((section("storage_chain"), used))
        int prog(unsigned long long *ctx) { return ctx[0] > 5 ? 1 : 0; }
        __attribute__((section("license"), used)) char lic[] = "GPL";
    "#;

    fn is_insns(insns: &[u8]) -> bool {
        !insns.is_empty() && insns.len().is_multiple_of(8)
    }

    #[test]
    fn finds_a_program_and_its_license() {
        let Some(bytes) = compile(PROG) else { return };
        let obj = Object::parse(&bytes).unwrap();
        let insns = obj.section("storage_chain").unwrap();
        assert!(is_insns(insns), "{}", insns.len());
        assert_eq!(obj.section("license").unwrap(), b"GPL\0");
        assert!(!obj.has_relocations("storage_chain"));
        assert!(!obj.has_relocations("nope"));
        assert!(obj.section("nope").is_none());
        let names = obj.section_names();
        assert!(!names.contains(&""), "{names:?}");
        assert!(names.contains(&"storage_chain"), "{names:?}");
    }

    #[test]
    fn global_data_shows_up_as_relocations() {
        let src = r#"
            unsigned long long counter;
            __attribute__((section("storage_chain"), used))
            int prog(void *ctx) { counter++; return 0; }
        "#;
        let Some(bytes) = compile(src) else { return };
        let obj = Object::parse(&bytes).unwrap();
        assert!(obj.has_relocations("storage_chain"));
    }

    #[test]
    fn non_bpf_and_truncated_files_are_refused() {
        let e = Object::parse(b"not an elf").err().unwrap();
        assert!(matches!(e, ElfError::NotElf(_)), "{e}");
        let Some(bytes) = compile(PROG) else { return };
        let e = Object::parse(&bytes[..100]).err().unwrap();
        assert!(matches!(e, ElfError::Headers(_)), "{e}");
        assert!(e.to_string().contains("truncated"), "{e}");
        let mut x86 = bytes.clone();
        x86[18] = 62; // EM_X86_64
        let e = Object::parse(&x86).err().unwrap();
        assert!(matches!(e, ElfError::NotBpf(62)), "{e}");
        assert!(e.to_string().contains("not BPF"), "{e}");
        let mut big = bytes.clone();
        big[5] = 2; // ELFDATA2MSB
        let e = Object::parse(&big).err().unwrap();
        assert!(matches!(e, ElfError::NotElf64Le("big-endian")), "{e}");
        let mut elf32 = bytes.clone();
        elf32[4] = 1; // ELFCLASS32
        let e = Object::parse(&elf32).err().unwrap();
        assert!(matches!(e, ElfError::NotElf64Le("32-bit")), "{e}");
        // A section whose bytes run past the end of the file is named.
        let obj = Object::parse(&bytes).unwrap();
        let index = obj.file.section_by_name("storage_chain").unwrap().index().0;
        let shoff = obj.file.elf_header().e_shoff(LittleEndian) as usize;
        let sh = shoff + index * 64;
        let mut cut = bytes.clone();
        cut[sh + 32..sh + 40].copy_from_slice(&(1u64 << 40).to_le_bytes()); // sh_size
        let e = Object::parse(&cut).err().unwrap();
        assert!(
            matches!(&e, ElfError::Section { index: i, .. } if *i == index),
            "{e}"
        );
    }

    /// Through the loader: the error names the file and what is wrong,
    /// before any bpf(2) call.
    #[test]
    fn load_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.bpf.o");
        std::fs::write(&junk, b"#!/bin/sh\n").unwrap();
        let e = Program::load_file(&junk, "storage_chain", 0).unwrap_err();
        assert!(matches!(e, BpfError::Elf { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains(&*junk.to_string_lossy()), "{text}");
        assert!(text.contains("not an ELF file"), "{text}");

        let Some(bytes) = compile(PROG) else { return };
        let prog = dir.path().join("prog.bpf.o");
        std::fs::write(&prog, &bytes).unwrap();
        let e = Program::load_file(&prog, "storage_chain/none", 0).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, BpfError::NoSection { .. }), "{text}");
        assert!(text.contains(&*prog.to_string_lossy()), "{text}");
        assert!(text.contains("storage_chain, license"), "{text}");
    }

    /// A vmlinux.h of a hooks kernel in the testbed's cache
    /// ($TESTBED_CACHE, else ~/.cache/testbed), as `testbed kernel build
    /// vm-hooks` leaves it.
    fn hooks_vmlinux_h() -> Option<PathBuf> {
        let cache = std::env::var_os("TESTBED_CACHE")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/testbed"))
            })?;
        let mut headers: Vec<PathBuf> = std::fs::read_dir(cache.join("kernels"))
            .ok()?
            .flatten()
            .map(|e| e.path().join("vmlinux.h"))
            .collect();
        headers.sort();
        headers.into_iter().find(|h| {
            std::fs::read_to_string(h).is_ok_and(|t| t.contains("BPF_PROG_TYPE_STORAGE_CHAIN"))
        })
    }

    /// The project's own programs (ebpf-programs/), built here as
    /// `testbed run` builds them: every program section is found, holds
    /// whole instructions and has no relocations, and the license is GPL.
    #[test]
    #[ignore = "needs the hooks kernel's vmlinux.h (testbed kernel build vm-hooks), make and clang: ./x test builds them first and runs this"]
    fn reads_the_projects_programs() {
        let vmlinux_h = hooks_vmlinux_h().expect(
            "no hooks kernel's vmlinux.h in the testbed cache: testbed kernel build vm-hooks",
        );
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ebpf-programs");
        let out = tempfile::tempdir().unwrap();
        let make = run_captured(
            Command::new("make")
                .arg("-C")
                .arg(&src)
                .arg(format!("OUT={}", out.path().display()))
                .arg(format!("VMLINUX_H={}", vmlinux_h.display())),
            Duration::from_secs(600),
        );
        let make = make.unwrap_or_else(|e| panic!("cannot run make: {e}"));
        assert!(make.status.success(), "{}{}", make.stdout, make.stderr);
        let expect: [(&str, &[&str]); 3] = [
            ("btree_lookup.bpf.o", &["storage_chain"]),
            ("synthetic_chain.bpf.o", &["storage_chain"]),
            (
                "hook_attacks.bpf.o",
                &[
                    "storage_chain/jump",
                    "storage_chain/spin",
                    "storage_chain/write_block",
                    "storage_chain/read_past",
                    "storage_chain/scratch_oob",
                ],
            ),
        ];
        for (file, sections) in expect {
            let bytes = std::fs::read(out.path().join(file)).unwrap();
            let obj = Object::parse(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
            for &section in sections {
                let insns = obj
                    .section(section)
                    .unwrap_or_else(|| panic!("{file}: no {section} in {:?}", obj.section_names()));
                assert!(is_insns(insns), "{file}: {section}: {} bytes", insns.len());
                assert!(!obj.has_relocations(section), "{file}: {section}");
            }
            assert_eq!(obj.section("license"), Some(&b"GPL\0"[..]), "{file}");
        }
    }
}
