//! `.config` files and config fragments: `CONFIG_X=value` and
//! `# CONFIG_X is not set` lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::inputs::kernel::KernelError;

/// One requested setting and where it was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Symbol without the `CONFIG_` prefix.
    pub symbol: String,
    /// `y`, `m`, `n` (for "is not set"), a number or a quoted string.
    pub value: String,
    pub file: PathBuf,
    pub line: usize,
}

/// Parse one line; None for comments and blanks.
fn parse_line(line: &str) -> Option<(String, String)> {
    let line = line.trim();
    if let Some(rest) = line.strip_prefix("# CONFIG_") {
        let sym = rest.strip_suffix(" is not set")?;
        return Some((sym.to_string(), "n".to_string()));
    }
    let rest = line.strip_prefix("CONFIG_")?;
    let (sym, value) = rest.split_once('=')?;
    Some((sym.trim().to_string(), value.trim().to_string()))
}

/// Settings of a fragment, in file order; lines that are neither a setting
/// nor a comment are errors (a typo would otherwise be silently ignored).
pub fn parse_fragment(path: &Path, text: &str) -> Result<Vec<Request>, KernelError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if let Some((symbol, value)) = parse_line(trimmed) {
            if symbol.is_empty()
                || !symbol
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(bad_line(path, i + 1, raw));
            }
            out.push(Request {
                symbol,
                value,
                file: path.to_path_buf(),
                line: i + 1,
            });
        } else if !(trimmed.is_empty() || trimmed.starts_with('#')) {
            return Err(bad_line(path, i + 1, raw));
        }
    }
    Ok(out)
}

fn bad_line(path: &Path, line: usize, raw: &str) -> KernelError {
    KernelError::Descriptor {
        path: path.to_path_buf(),
        message: format!(
            "line {line}: `{raw}` is not `CONFIG_NAME=value` or `# CONFIG_NAME is not set`"
        ),
    }
}

/// A `.config` as a symbol -> value map (`n` for "is not set").
pub fn parse_config(text: &str) -> BTreeMap<String, String> {
    text.lines().filter_map(parse_line).collect()
}

/// Later requests win, as with the kernel's merge_config.sh.
pub fn effective(requests: &[Request]) -> Vec<Request> {
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, r) in requests.iter().enumerate() {
        last.insert(&r.symbol, i);
    }
    let mut keep: Vec<usize> = last.into_values().collect();
    keep.sort_unstable();
    keep.into_iter().map(|i| requests[i].clone()).collect()
}

/// Append the requests to a base `.config` text; Kconfig takes the last
/// assignment of a symbol, so this overrides the base.
pub fn merge(base: &str, requests: &[Request]) -> String {
    let mut out = base.to_string();
    if !out.ends_with('\n') && !out.is_empty() {
        out.push('\n');
    }
    out.push_str("# --- testbed fragments ---\n");
    for r in requests {
        if r.value == "n" {
            out.push_str(&format!("# CONFIG_{} is not set\n", r.symbol));
        } else {
            out.push_str(&format!("CONFIG_{}={}\n", r.symbol, r.value));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragment_lines() {
        let text = "# c\n\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_S=\"x y\"\n";
        let r = parse_fragment(Path::new("f.config"), text).unwrap();
        let got: Vec<(&str, &str, usize)> = r
            .iter()
            .map(|r| (r.symbol.as_str(), r.value.as_str(), r.line))
            .collect();
        assert_eq!(got, vec![("A", "y", 3), ("B", "n", 4), ("S", "\"x y\"", 5)]);
    }

    #[test]
    fn typo_is_an_error_naming_file_and_line() {
        let err = parse_fragment(Path::new("frag/x.config"), "CONFIG_A=y\nCONFG_B=y\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("frag/x.config") && err.contains("line 2"),
            "{err}"
        );
    }

    #[test]
    fn later_request_wins_and_merge_appends() {
        let a = parse_fragment(Path::new("a"), "CONFIG_X=y\nCONFIG_Y=y\n").unwrap();
        let b = parse_fragment(Path::new("b"), "# CONFIG_X is not set\n").unwrap();
        let all: Vec<Request> = a.into_iter().chain(b).collect();
        let eff = effective(&all);
        assert_eq!(eff.len(), 2);
        assert!(eff.iter().any(|r| r.symbol == "X" && r.value == "n"));
        let merged = merge("CONFIG_X=y", &eff);
        let cfg = parse_config(&merged);
        assert_eq!(cfg["X"], "n");
        assert_eq!(cfg["Y"], "y");
    }
}
