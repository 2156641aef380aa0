//! Finding a host program and the shared libraries it loads, to copy both
//! into a guest image.

use std::path::{Path, PathBuf};

pub fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Absolute paths of every library `ldd` says the program loads, the
/// dynamic loader included; empty for a static program.
pub fn library_closure(program: &Path) -> Result<Vec<String>, String> {
    let out = std::process::Command::new("ldd")
        .arg(program)
        .output()
        .map_err(|e| format!("cannot run ldd: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("not a dynamic executable")
        || String::from_utf8_lossy(&out.stderr).contains("not a dynamic")
    {
        return Ok(Vec::new());
    }
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    parse_ldd(&text)
}

fn parse_ldd(text: &str) -> Result<Vec<String>, String> {
    let mut libs = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.contains("=> not found") {
            return Err(format!("missing library: {line}"));
        }
        let path = match line.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => line
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/')),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(p.to_string());
        }
    }
    libs.sort();
    libs.dedup();
    Ok(libs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ldd_output() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x1)\n\t/lib64/ld-linux-x86-64.so.2 (0x2)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            [
                "/lib/x86_64-linux-gnu/libz.so.1",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert!(
            parse_ldd("\tlibfoo.so => not found\n")
                .unwrap_err()
                .contains("libfoo")
        );
    }
}
