//! Guest image recipes: `images/<name>.toml`, data that says which Debian
//! packages a root filesystem holds. Loading one checks every field; an
//! error names the file, the line and the field.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use toml::Spanned;

/// The Debian release recipes may name: package versions are resolved
/// with this host's apt (Debian 12), so another suite would get keys that
/// say nothing about what was installed.
pub const SUITE: &str = "bookworm";

/// Debian's archive, used when a recipe names no mirror.
pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

/// A recipe error located in its file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{}: {}{message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default(), field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct RecipeError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub field: Option<String>,
    pub message: String,
}

/// mmdebstrap's `--variant`: both are small; `apt` adds apt itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// Only the Essential:yes packages, then the recipe's packages.
    #[default]
    Essential,
    /// Essential plus apt.
    Apt,
}

impl Variant {
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Essential => "essential",
            Variant::Apt => "apt",
        }
    }
}

/// A checked recipe.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipe {
    /// The file name without `.toml`.
    pub name: String,
    pub path: PathBuf,
    pub description: String,
    pub suite: String,
    pub variant: Variant,
    pub mirror: String,
    /// The packages the image is for; their versions make the cache key.
    pub packages: Vec<String>,
    /// What a usable root needs besides (procps, util-linux, ...).
    pub extra: Vec<String>,
    /// Shell commands the agent runs after switching to this root; a boot
    /// whose check fails stops with the command's output.
    pub check: Vec<String>,
    source: String,
    package_spans: Vec<(String, Range<usize>)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    description: String,
    suite: Spanned<String>,
    #[serde(default)]
    variant: Variant,
    #[serde(default)]
    mirror: Option<Spanned<String>>,
    packages: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    extra: Vec<Spanned<String>>,
    #[serde(default)]
    check: Vec<Spanned<String>>,
}

/// What of a recipe decides the image's content, in a fixed form: the
/// recipe hash is over this, so comments, order and `check` do not count.
#[derive(Serialize)]
struct Canonical<'a> {
    suite: &'a str,
    variant: Variant,
    mirror: &'a str,
    packages: BTreeSet<&'a str>,
    extra: BTreeSet<&'a str>,
}

impl Recipe {
    /// sha256 (hex) of the recipe's canonical content.
    pub fn sha256(&self) -> String {
        let c = Canonical {
            suite: &self.suite,
            variant: self.variant,
            mirror: &self.mirror,
            packages: self.packages.iter().map(String::as_str).collect(),
            extra: self.extra.iter().map(String::as_str).collect(),
        };
        let json = serde_json::to_vec(&c).unwrap_or_default();
        hex::encode(Sha256::digest(&json))
    }

    /// Every package to install: the named ones, then the extra ones.
    pub fn all_packages(&self) -> Vec<String> {
        self.packages
            .iter()
            .chain(self.extra.iter())
            .cloned()
            .collect()
    }

    /// An error about one package, at the line that names it.
    pub fn package_error(&self, package: &str, message: impl Into<String>) -> RecipeError {
        let at = self
            .package_spans
            .iter()
            .position(|(p, _)| p == package)
            .map(|i| (i, &self.package_spans[i].1));
        let (field, line) = match at {
            Some((i, span)) => {
                let named = self.packages.len();
                let field = if i < named {
                    format!("packages[{i}]")
                } else {
                    format!("extra[{}]", i - named)
                };
                (
                    Some(field),
                    Some(crate::host::fsutil::line_col(&self.source, span.start).0),
                )
            }
            None => (None, None),
        };
        RecipeError {
            file: self.path.clone(),
            line,
            field,
            message: message.into(),
        }
    }
}

/// `dir/<name>.toml`, loaded and checked.
pub fn load(dir: &Path, name: &str) -> Result<Recipe, RecipeError> {
    let path = dir.join(format!("{name}.toml"));
    let fail = |message: String| RecipeError {
        file: path.clone(),
        line: None,
        field: None,
        message,
    };
    if !valid_name(name) {
        return Err(fail(format!(
            "{name:?} is not a recipe name: use lower-case letters, digits and '-'"
        )));
    }
    let source = std::fs::read_to_string(&path).map_err(|e| {
        let known = list(dir).unwrap_or_default().join(", ");
        fail(format!("cannot read the recipe: {e} (recipes: {known})"))
    })?;
    parse(name, &path, &source)
}

/// The names of the recipes in `dir`, sorted.
pub fn list(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".toml").map(str::to_string)
        })
        .filter(|n| valid_name(n))
        .collect();
    names.sort();
    Ok(names)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A Debian package name: lower case, digits, `+ - .`, two or more
/// characters, starting alphanumeric (Debian policy 5.6.1).
fn valid_package(p: &str) -> bool {
    p.len() >= 2
        && p.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && p.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

pub fn parse(name: &str, path: &Path, source: &str) -> Result<Recipe, RecipeError> {
    let at = |span: &Range<usize>, field: String, message: String| RecipeError {
        file: path.to_path_buf(),
        line: Some(crate::host::fsutil::line_col(source, span.start).0),
        field: Some(field),
        message,
    };
    let raw: Raw = toml::from_str(source).map_err(|e| {
        let line = e
            .span()
            .map(|s| crate::host::fsutil::line_col(source, s.start).0);
        RecipeError {
            file: path.to_path_buf(),
            line,
            field: line.and_then(|l| key_on_line(source, l)),
            message: e.message().trim().to_string(),
        }
    })?;
    if raw.suite.get_ref() != SUITE {
        return Err(at(
            &raw.suite.span(),
            "suite".into(),
            format!(
                "{:?}: only {SUITE:?} (package versions are resolved with this host's apt)",
                raw.suite.get_ref()
            ),
        ));
    }
    let mirror = match &raw.mirror {
        Some(m) if !m.get_ref().starts_with("http://") && !m.get_ref().starts_with("https://") => {
            return Err(at(
                &m.span(),
                "mirror".into(),
                format!("{:?}: give an http:// or https:// URL", m.get_ref()),
            ));
        }
        Some(m) => m.get_ref().trim_end_matches('/').to_string(),
        None => DEFAULT_MIRROR.to_string(),
    };
    if raw.packages.get_ref().is_empty() {
        return Err(at(
            &raw.packages.span(),
            "packages".into(),
            "name at least one package".into(),
        ));
    }
    let mut seen = BTreeSet::new();
    let mut spans = Vec::new();
    let lists = [("packages", raw.packages.get_ref()), ("extra", &raw.extra)];
    for (field, list) in lists {
        for (i, p) in list.iter().enumerate() {
            let name = p.get_ref();
            if !valid_package(name) {
                return Err(at(
                    &p.span(),
                    format!("{field}[{i}]"),
                    format!("{name:?} is not a Debian package name"),
                ));
            }
            if !seen.insert(name.clone()) {
                return Err(at(
                    &p.span(),
                    format!("{field}[{i}]"),
                    format!("{name:?} is listed twice"),
                ));
            }
            spans.push((name.clone(), p.span()));
        }
    }
    for (i, c) in raw.check.iter().enumerate() {
        if c.get_ref().trim().is_empty() || c.get_ref().contains('\n') {
            return Err(at(
                &c.span(),
                format!("check[{i}]"),
                "give one command on one line".into(),
            ));
        }
    }
    let strings = |v: &[Spanned<String>]| v.iter().map(|s| s.get_ref().clone()).collect();
    Ok(Recipe {
        name: name.to_string(),
        path: path.to_path_buf(),
        description: raw.description,
        suite: raw.suite.into_inner(),
        variant: raw.variant,
        mirror,
        packages: strings(raw.packages.get_ref()),
        extra: strings(&raw.extra),
        check: strings(&raw.check),
        source: source.to_string(),
        package_spans: spans,
    })
}

/// The key written on line `line` (1-based), for errors the TOML parser
/// reports with a span only.
fn key_on_line(source: &str, line: usize) -> Option<String> {
    let text = source.lines().nth(line.checked_sub(1)?)?;
    let (key, _) = text.split_once('=')?;
    let key = key.trim();
    (!key.is_empty() && !key.starts_with('#')).then(|| key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"description = "a test"
suite = "bookworm"
variant = "essential"
packages = [
  "samtools",
  "e2fsprogs",
]
extra = ["procps"]
check = ["samtools --version"]
"#;

    fn err(src: &str) -> RecipeError {
        parse("t", Path::new("images/t.toml"), src).unwrap_err()
    }

    #[test]
    fn a_good_recipe_parses_and_its_hash_ignores_order_and_checks() {
        let r = parse("t", Path::new("images/t.toml"), GOOD).unwrap();
        assert_eq!(r.packages, ["samtools", "e2fsprogs"]);
        assert_eq!(r.extra, ["procps"]);
        assert_eq!(r.mirror, DEFAULT_MIRROR);
        assert_eq!(r.all_packages(), ["samtools", "e2fsprogs", "procps"]);
        let reordered = GOOD
            .replace(
                "\"samtools\",\n  \"e2fsprogs\"",
                "\"e2fsprogs\",\n  \"samtools\"",
            )
            .replace("samtools --version", "true");
        let r2 = parse("t", Path::new("images/t.toml"), &reordered).unwrap();
        assert_eq!(r.sha256(), r2.sha256());
        let more = GOOD.replace("[\"procps\"]", "[\"procps\", \"kmod\"]");
        let r3 = parse("t", Path::new("images/t.toml"), &more).unwrap();
        assert_ne!(r.sha256(), r3.sha256(), "a package more is another image");
    }

    #[test]
    fn an_unknown_field_names_file_line_and_field() {
        let e = err(&GOOD.replace("extra = [\"procps\"]", "extras = [\"procps\"]"));
        assert_eq!(e.line, Some(8), "{e}");
        assert_eq!(e.field.as_deref(), Some("extras"), "{e}");
        assert!(e.message.contains("unknown field `extras`"), "{e}");
        assert!(
            e.to_string().starts_with("images/t.toml:8: extras: "),
            "{e}"
        );
    }

    #[test]
    fn bad_values_point_at_their_line() {
        let e = err(&GOOD.replace("\"e2fsprogs\"", "\"E2fsprogs\""));
        assert_eq!((e.line, e.field.as_deref()), (Some(6), Some("packages[1]")));
        assert!(e.message.contains("not a Debian package name"), "{e}");

        let e = err(&GOOD.replace("[\"procps\"]", "[\"samtools\"]"));
        assert_eq!((e.line, e.field.as_deref()), (Some(8), Some("extra[0]")));
        assert!(e.message.contains("listed twice"), "{e}");

        let e = err(&GOOD.replace("\"bookworm\"", "\"trixie\""));
        assert_eq!((e.line, e.field.as_deref()), (Some(2), Some("suite")));

        let e = err(&GOOD.replace("\"essential\"", "\"minbase\""));
        assert_eq!(e.line, Some(3), "{e}");
        assert_eq!(e.field.as_deref(), Some("variant"), "{e}");

        let e = err(&GOOD.replace("suite = \"bookworm\"\n", ""));
        assert!(e.message.contains("missing field `suite`"), "{e}");
    }

    #[test]
    fn a_package_error_names_its_line() {
        let r = parse("t", Path::new("images/t.toml"), GOOD).unwrap();
        let e = r.package_error("procps", "no candidate");
        assert_eq!(e.to_string(), "images/t.toml:8: extra[0]: no candidate");
        let e = r.package_error("e2fsprogs", "x");
        assert_eq!((e.line, e.field.as_deref()), (Some(6), Some("packages[1]")));
    }

    #[test]
    fn the_recipes_in_images_load() {
        let dir = crate::host::paths::repo_root().join("images");
        let names = list(&dir).unwrap();
        assert!(names.contains(&"bookworm-asam".to_string()), "{names:?}");
        for n in names {
            load(&dir, &n).unwrap();
        }
        let e = load(&dir, "no-such-recipe").unwrap_err();
        assert!(
            e.message.contains("bookworm-asam"),
            "lists the recipes: {e}"
        );
    }
}
