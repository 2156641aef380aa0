//! Errors located in the spec's text: `SpecError` (file, line, column,
//! dotted field), the path of a field (`PathSeg`), and the search through
//! the TOML document that turns one into the other.

use super::*;

/// A spec error located in its file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct SpecError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// Dotted path of the field, when known (`vm.memory`, `sweep.depth`).
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
            if let Some(c) = self.column {
                write!(f, ":{c}")?;
            }
        }
        write!(f, ": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

/// One step of a path into the spec document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathSeg<'a> {
    /// A key of a table.
    Key(&'a str),
    /// An element of an array (or array of tables, `[[devices]]`).
    Index(usize),
}

/// `devices[1].size` for [`Key("devices")`, `Index(1)`, `Key("size")`].
pub(super) fn field_name(path: &[PathSeg<'_>]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            PathSeg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            PathSeg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

pub(super) fn toml_error(path: &Path, source: &str, e: &toml::de::Error) -> SpecError {
    let span = e.span();
    let (line, column) = match &span {
        Some(span) => {
            let (l, c) = line_col(source, span.start);
            (Some(l), Some(c))
        }
        None => (None, None),
    };
    // The key or value at the error span names the field best.
    let field = span
        .and_then(|s| path_at(source, s.start))
        .map(|p| field_name(&p.iter().map(OwnedSeg::as_seg).collect::<Vec<_>>()));
    SpecError {
        file: path.to_path_buf(),
        line,
        column,
        field,
        message: e.message().trim().to_string(),
    }
}

// Moved to the host layer (crate::host::fsutil), where image recipes find it too.
pub use crate::host::fsutil::line_col;

/// Where `(key, value)` is written: the table header (`[vm]`, `[[devices]]`)
/// for a table opened by one, else the key.
fn entry_offset(key: &toml::Spanned<toml::de::DeString<'_>>, value: &SpannedValue<'_>) -> usize {
    key.span().start.min(value.span().start)
}

type SpannedValue<'i> = toml::Spanned<toml::de::DeValue<'i>>;

/// Byte offset of the deepest part of `path` written in `source`, from the
/// spans of the TOML parser. `None` when the source does not parse or not
/// even the first key is written.
pub(super) fn locate(source: &str, path: &[PathSeg<'_>]) -> Option<usize> {
    let doc = toml::de::DeTable::parse(source).ok()?;
    let mut table = Some(doc.get_ref());
    let mut array: Option<&[SpannedValue<'_>]> = None;
    let mut found = None;
    for seg in path {
        let value = match seg {
            PathSeg::Key(k) => {
                let Some((key, value)) = table.and_then(|t| t.get_key_value(*k)) else {
                    break;
                };
                found = Some(entry_offset(key, value));
                value
            }
            PathSeg::Index(i) => {
                let Some(value) = array.and_then(|a| a.get(*i)) else {
                    break;
                };
                found = Some(value.span().start);
                value
            }
        };
        table = value.get_ref().as_table();
        array = value.get_ref().as_array().map(|a| a.as_ref());
    }
    found
}

/// A [`PathSeg`] that owns its key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OwnedSeg {
    Key(String),
    Index(usize),
}

impl OwnedSeg {
    fn as_seg(&self) -> PathSeg<'_> {
        match self {
            OwnedSeg::Key(k) => PathSeg::Key(k),
            OwnedSeg::Index(i) => PathSeg::Index(*i),
        }
    }
}

/// The path of the innermost key or value written at `offset`.
fn path_at(source: &str, offset: usize) -> Option<Vec<OwnedSeg>> {
    let doc = toml::de::DeTable::parse(source).ok()?;
    let mut path = Vec::new();
    path_in_table(doc.get_ref(), offset, &mut path).then_some(path)
}

fn span_holds(span: &std::ops::Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || span.start == offset
}

/// Pushes onto `path` the entries of `table` down to the one at `offset`.
fn path_in_table(table: &toml::de::DeTable<'_>, offset: usize, path: &mut Vec<OwnedSeg>) -> bool {
    for (key, value) in table {
        path.push(OwnedSeg::Key(key.get_ref().to_string()));
        // A table or an array of tables may hold the offset anywhere below
        // its header (or its first header), so always look inside.
        if path_in_value(value.get_ref(), offset, path)
            || span_holds(&key.span(), offset)
            || span_holds(&value.span(), offset)
        {
            return true;
        }
        path.pop();
    }
    false
}

fn path_in_value(value: &toml::de::DeValue<'_>, offset: usize, path: &mut Vec<OwnedSeg>) -> bool {
    if let Some(t) = value.as_table() {
        return path_in_table(t, offset, path);
    }
    if let Some(a) = value.as_array() {
        for (i, el) in a.iter().enumerate() {
            path.push(OwnedSeg::Index(i));
            if path_in_value(el.get_ref(), offset, path) || span_holds(&el.span(), offset) {
                return true;
            }
            path.pop();
        }
    }
    false
}
