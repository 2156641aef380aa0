//! Text from a guest made safe to store and print: bounded, and with
//! control characters (terminal escape sequences) shown, not obeyed.

/// At most `max_chars` characters of `s` on one line: every control
/// character, newlines included, becomes `\u{..}`.
pub fn printable(s: &str, max_chars: usize) -> String {
    escape(s, max_chars, false)
}

/// At most `max_chars` characters of `s`, newlines and tabs kept, every other
/// control character shown as `\u{..}`; a cut is marked with how much was left.
pub fn printable_lines(s: &str, max_chars: usize) -> String {
    escape(s, max_chars, true)
}

fn escape(s: &str, max_chars: usize, keep_lines: bool) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars));
    for (taken, (i, c)) in s.char_indices().enumerate() {
        if taken == max_chars {
            out.push_str(&format!(" […{} more bytes]", s.len() - i));
            break;
        }
        match c {
            '\n' | '\t' if keep_lines => out.push(c),
            c if c.is_control() || is_bidi_override(c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// Characters that reorder what a terminal shows (the "Trojan source" ones).
fn is_bidi_override(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_shown_not_obeyed() {
        let s = "ok\x1b[2J\x1b]0;title\x07\r\nnext\u{202e}";
        assert_eq!(
            printable(s, 100),
            "ok\\u{1b}[2J\\u{1b}]0;title\\u{7}\\u{d}\\u{a}next\\u{202e}"
        );
        assert_eq!(
            printable_lines(s, 100),
            "ok\\u{1b}[2J\\u{1b}]0;title\\u{7}\\u{d}\nnext\\u{202e}"
        );
    }

    #[test]
    fn long_text_is_cut_and_says_how_much_is_left() {
        let s = "é".repeat(10);
        assert_eq!(printable(&s, 3), "ééé […14 more bytes]");
        assert_eq!(printable("short", 10), "short");
    }
}
