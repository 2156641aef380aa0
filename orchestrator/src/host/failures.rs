//! What failed earlier in this invocation, so a failure is paid for once:
//! a kernel whose build failed is not rebuilt for the next spec that needs
//! it; that spec fails at once with the first attempt's reason.

use std::collections::BTreeMap;
use std::sync::Mutex;

static FAILED: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// Remembers that `subject` (e.g. `kernel vm-hooks (key 3fa2…)`) failed.
pub fn remember(subject: &str, reason: &str) {
    if let Ok(mut m) = FAILED.lock() {
        m.entry(subject.to_string())
            .or_insert_with(|| first_lines(reason));
    }
}

/// The reason `subject` failed earlier in this invocation, if it did.
pub fn recall(subject: &str) -> Option<String> {
    FAILED.lock().ok().and_then(|m| m.get(subject).cloned())
}

/// A reason short enough to repeat once per affected spec.
fn first_lines(reason: &str) -> String {
    let lines: Vec<&str> = reason.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() <= 3 {
        return lines.join("\n");
    }
    format!(
        "{}\n… ({} more lines)",
        lines[..3].join("\n"),
        lines.len() - 3
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_is_kept_and_shortened() {
        assert_eq!(recall("kernel t1"), None);
        remember("kernel t1", "a\nb\n\nc\nd\ne");
        remember("kernel t1", "a later, different failure");
        assert_eq!(recall("kernel t1").unwrap(), "a\nb\nc\n… (2 more lines)");
        assert_eq!(recall("kernel t2"), None);
    }
}
