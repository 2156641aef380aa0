//! Just enough ELF64 (little-endian) to take one BPF program out of a
//! clang-built object: the bytes of a section, its name, and whether any
//! relocation section applies to it.

const SHT_REL: u32 = 9;
const SHT_RELA: u32 = 4;
const EHDR_LEN: usize = 64;
const SHDR_LEN: usize = 64;
const EM_BPF: u16 = 247;

#[derive(Debug, Clone, Copy)]
struct Section {
    name: u32,
    kind: u32,
    offset: u64,
    size: u64,
    info: u32,
}

/// A parsed object; borrows the file's bytes.
pub struct Object<'a> {
    bytes: &'a [u8],
    sections: Vec<Section>,
    names: Section,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl<'a> Object<'a> {
    /// Parses the headers; the error says what is wrong.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        if bytes.len() < EHDR_LEN || &bytes[..4] != b"\x7fELF" {
            return Err("no ELF magic".into());
        }
        if bytes[4] != 2 || bytes[5] != 1 {
            return Err("not a 64-bit little-endian ELF".into());
        }
        if u16_at(bytes, 18) != Some(EM_BPF) {
            return Err("machine is not BPF (compile with clang -target bpf)".into());
        }
        let bad = || "truncated section headers".to_string();
        let shoff = u64_at(bytes, 0x28).ok_or_else(bad)? as usize;
        let shentsize = u16_at(bytes, 0x3a).ok_or_else(bad)? as usize;
        let shnum = u16_at(bytes, 0x3c).ok_or_else(bad)? as usize;
        let shstrndx = u16_at(bytes, 0x3e).ok_or_else(bad)? as usize;
        if shentsize != SHDR_LEN {
            return Err(format!(
                "section header size {shentsize}, expected {SHDR_LEN}"
            ));
        }
        let mut sections = Vec::with_capacity(shnum);
        for i in 0..shnum {
            let at = shoff + i * SHDR_LEN;
            let s = Section {
                name: u32_at(bytes, at).ok_or_else(bad)?,
                kind: u32_at(bytes, at + 4).ok_or_else(bad)?,
                offset: u64_at(bytes, at + 24).ok_or_else(bad)?,
                size: u64_at(bytes, at + 32).ok_or_else(bad)?,
                info: u32_at(bytes, at + 44).ok_or_else(bad)?,
            };
            let end = s.offset.checked_add(s.size).ok_or_else(bad)?;
            if s.kind != 8 && end > bytes.len() as u64 {
                // SHT_NOBITS (8) has no bytes in the file.
                return Err(format!("section {i} runs past the end of the file"));
            }
            sections.push(s);
        }
        let names = *sections
            .get(shstrndx)
            .ok_or_else(|| "no section-name table".to_string())?;
        Ok(Object {
            bytes,
            sections,
            names,
        })
    }

    fn name_of(&self, s: &Section) -> &'a str {
        let start = (self.names.offset + u64::from(s.name)) as usize;
        let table_end = (self.names.offset + self.names.size) as usize;
        let Some(rest) = self.bytes.get(start..table_end) else {
            return "";
        };
        let len = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..len]).unwrap_or("")
    }

    /// Names of all sections, in file order.
    pub fn section_names(&self) -> Vec<&'a str> {
        self.sections.iter().map(|s| self.name_of(s)).collect()
    }

    fn find(&self, name: &str) -> Option<(usize, &Section)> {
        self.sections
            .iter()
            .enumerate()
            .find(|(_, s)| self.name_of(s) == name)
    }

    /// The bytes of section `name`.
    pub fn section(&self, name: &str) -> Option<&'a [u8]> {
        let (_, s) = self.find(name)?;
        self.bytes
            .get(s.offset as usize..(s.offset + s.size) as usize)
    }

    /// Whether a REL/RELA section applies to section `name`.
    pub fn has_relocations(&self, name: &str) -> bool {
        let Some((index, _)) = self.find(name) else {
            return false;
        };
        self.sections.iter().any(|s| {
            (s.kind == SHT_REL || s.kind == SHT_RELA) && s.info as usize == index && s.size > 0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles C for BPF with the host's clang (a build dependency of the
    /// project), into a temp dir.
    fn compile(src: &str) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("p.c");
        let o = dir.path().join("p.o");
        std::fs::write(&c, src).unwrap();
        let out = std::process::Command::new("clang")
            .args(["-O2", "-target", "bpf", "-c"])
            .arg(&c)
            .arg("-o")
            .arg(&o)
            .output()
            .expect("clang runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(&o).unwrap()
    }

    const PROG: &str = r#"
        __attribute__((section("storage_chain"), used))
        int prog(unsigned long long *ctx) { return ctx[0] > 5 ? 1 : 0; }
        __attribute__((section("license"), used)) char lic[] = "GPL";
    "#;

    #[test]
    fn finds_a_program_and_its_license() {
        let bytes = compile(PROG);
        let obj = Object::parse(&bytes).unwrap();
        let insns = obj.section("storage_chain").unwrap();
        assert!(
            !insns.is_empty() && insns.len().is_multiple_of(8),
            "{}",
            insns.len()
        );
        assert_eq!(obj.section("license").unwrap(), b"GPL\0");
        assert!(!obj.has_relocations("storage_chain"));
        assert!(obj.section("nope").is_none());
        assert!(obj.section_names().contains(&"storage_chain"));
    }

    #[test]
    fn global_data_shows_up_as_relocations() {
        let src = r#"
            unsigned long long counter;
            __attribute__((section("storage_chain"), used))
            int prog(void *ctx) { counter++; return 0; }
        "#;
        let bytes = compile(src);
        let obj = Object::parse(&bytes).unwrap();
        assert!(obj.has_relocations("storage_chain"));
    }

    #[test]
    fn non_bpf_and_truncated_files_are_refused() {
        assert!(Object::parse(b"not an elf").is_err());
        let bytes = compile(PROG);
        let e = Object::parse(&bytes[..100]).err().unwrap();
        assert!(e.contains("truncated") || e.contains("past the end"), "{e}");
        let mut x86 = bytes.clone();
        x86[18] = 62; // EM_X86_64
        assert!(Object::parse(&x86).err().unwrap().contains("not BPF"));
    }
}
