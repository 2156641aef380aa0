//! BPF_PROG_LOAD through the raw bpf(2) syscall, with the verifier's log
//! returned on rejection.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use super::BpfError;
use super::elf::Object;

const BPF_PROG_LOAD: libc::c_long = 5;
/// Verifier log size on a retry after a rejection.
const LOG_BYTES: usize = 4 << 20;
/// Keep the end of a long log: the reason for a rejection comes last.
const LOG_TAIL_BYTES: usize = 8 << 10;

/// The BPF_PROG_LOAD part of `union bpf_attr` up to expected_attach_type;
/// the kernel zero-fills the rest.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// A loaded program; closed on drop.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
    pub name: String,
    pub insns: usize,
}

impl Program {
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Loads section `section` of the object at `path` as a program of
    /// `prog_type`.
    pub fn load_file(path: &Path, section: &str, prog_type: u32) -> Result<Self, BpfError> {
        let bytes = std::fs::read(path).map_err(|source| BpfError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let obj = Object::parse(&bytes).map_err(|e| BpfError::Elf {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let insns = obj.section(section).ok_or_else(|| BpfError::NoSection {
            path: path.to_path_buf(),
            section: section.to_string(),
            known: obj.section_names().join(", "),
        })?;
        if obj.has_relocations(section) {
            return Err(BpfError::Relocations {
                path: path.to_path_buf(),
                section: section.to_string(),
            });
        }
        let license = obj.section("license").unwrap_or(b"GPL\0");
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("prog");
        let name = format!("{stem}:{section}");
        load(&name, prog_type, insns, license)
    }
}

/// Loads `insns` (raw 8-byte BPF instructions); on rejection loads again
/// with a verifier log and returns it.
pub fn load(name: &str, prog_type: u32, insns: &[u8], license: &[u8]) -> Result<Program, BpfError> {
    let mut lic = license.to_vec();
    if lic.last() != Some(&0) {
        lic.push(0);
    }
    // Aligned copy: the kernel reads the instructions as u64s.
    let words: Vec<u64> = insns
        .chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect();
    match sys_load(name, prog_type, &words, &lic, None) {
        Ok(fd) => Ok(Program {
            fd,
            name: name.to_string(),
            insns: words.len(),
        }),
        Err(first) => {
            let mut log = vec![0u8; LOG_BYTES];
            let second = sys_load(name, prog_type, &words, &lic, Some(&mut log));
            let text = log_text(&log);
            match second {
                // Loaded with a log but not without: report the first error.
                Ok(_) => Err(BpfError::Rejected {
                    name: name.to_string(),
                    source: first,
                    log: text,
                }),
                Err(source) => Err(BpfError::Rejected {
                    name: name.to_string(),
                    source,
                    log: text,
                }),
            }
        }
    }
}

fn log_text(log: &[u8]) -> String {
    let len = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..len]);
    let text = text.trim_end();
    if text.len() <= LOG_TAIL_BYTES {
        return text.to_string();
    }
    let mut cut = text.len() - LOG_TAIL_BYTES;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    format!("[... {cut} bytes ...]\n{}", &text[cut..])
}

fn sys_load(
    name: &str,
    prog_type: u32,
    words: &[u64],
    license: &[u8],
    log: Option<&mut [u8]>,
) -> Result<OwnedFd, std::io::Error> {
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: words.len() as u32,
        insns: words.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    // Object names: [A-Za-z0-9_.], at most 15 bytes.
    for (d, s) in attr.prog_name.iter_mut().zip(
        name.bytes()
            .map(|b| if b.is_ascii_alphanumeric() { b } else { b'_' })
            .take(15),
    ) {
        *d = s;
    }
    if let Some(buf) = log {
        attr.log_level = 1;
        attr.log_size = buf.len() as u32;
        attr.log_buf = buf.as_mut_ptr() as u64;
    }
    let fd = retry_on_eagain(LOAD_ATTEMPTS, || {
        // SAFETY: attr and every buffer it points to outlive the call; the
        // kernel writes only into the log buffer, within log_size.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_LOAD,
                &mut attr as *mut ProgLoadAttr,
                std::mem::size_of::<ProgLoadAttr>(),
            )
        };
        if fd < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(fd)
        }
    })?;
    // SAFETY: the kernel returned a new file descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// As libbpf: the verifier gives up with EAGAIN when a signal is pending
/// (6.1's do_check), which under TCG's slow verification happens now and
/// then; the load is simply tried again.
const LOAD_ATTEMPTS: u32 = 5;

fn retry_on_eagain<T>(
    attempts: u32,
    mut call: impl FnMut() -> Result<T, std::io::Error>,
) -> Result<T, std::io::Error> {
    let mut left = attempts.max(1);
    loop {
        match call() {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && left > 1 => left -= 1,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

    /// `r0 = imm; exit`.
    fn ret(imm: i32) -> Vec<u8> {
        let mut v = vec![0xb7, 0x00, 0, 0];
        v.extend_from_slice(&imm.to_le_bytes());
        v.extend_from_slice(&[0x95, 0, 0, 0, 0, 0, 0, 0]);
        v
    }

    #[test]
    fn a_load_that_meets_a_pending_signal_is_tried_again() {
        let eagain = || std::io::Error::from_raw_os_error(libc::EAGAIN);
        let mut calls = 0;
        let r = retry_on_eagain(5, || {
            calls += 1;
            if calls < 3 { Err(eagain()) } else { Ok(7) }
        });
        assert_eq!((r.unwrap(), calls), (7, 3));
        // It gives up after the attempts, and never retries other errors.
        let mut calls = 0;
        let r: Result<(), _> = retry_on_eagain(5, || {
            calls += 1;
            Err(eagain())
        });
        assert_eq!(
            (r.unwrap_err().raw_os_error(), calls),
            (Some(libc::EAGAIN), 5)
        );
        let mut calls = 0;
        let r: Result<(), _> = retry_on_eagain(5, || {
            calls += 1;
            Err(std::io::Error::from_raw_os_error(libc::EACCES))
        });
        assert_eq!(
            (r.unwrap_err().raw_os_error(), calls),
            (Some(libc::EACCES), 1)
        );
    }

    /// Runs on this host's kernel with a stock program type: needs root
    /// (or CAP_BPF), which the testbed's hosts and guests have.
    #[test]
    fn loads_a_program_and_shows_the_log_of_a_rejected_one() {
        let p = load("ok", BPF_PROG_TYPE_SOCKET_FILTER, &ret(0), b"GPL").unwrap();
        assert!(p.fd() >= 0);
        assert_eq!(p.insns, 2);
        // Reads r2, which was never written: the verifier must say so.
        let mut bad = vec![0xbf, 0x20, 0, 0, 0, 0, 0, 0]; // r0 = r2
        bad.extend_from_slice(&[0x95, 0, 0, 0, 0, 0, 0, 0]);
        let e = load("bad", BPF_PROG_TYPE_SOCKET_FILTER, &bad, b"GPL").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("R2 !read_ok"), "{text}");
        assert!(text.contains("verifier log"), "{text}");
    }
}
