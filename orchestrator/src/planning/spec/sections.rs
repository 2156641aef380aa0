//! The type errors of each section of a spec on its own, so `testbed
//! validate` names a mistake in `[vm]` and one in `[[devices]]` in one go
//! (serde stops at the first error of the whole document).
//!
//! Each section (each entry of an array of tables) is deserialized from
//! the whole document with every other key ignored: the errors keep the
//! spans of the file, and so its lines.

use std::marker::PhantomData;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::*;

/// The top-level keys a spec may have (the fields of [`Spec`]).
const SECTIONS: [&str; 12] = [
    "experiment",
    "vm",
    "kernel",
    "image",
    "devices",
    "workload",
    "sweep",
    "sweep_skip",
    "timeouts",
    "limits",
    "topology",
    "slurm",
];

/// The first error of each section (of each entry of `[[devices]]` and
/// `[[sweep_skip]]`), and each unknown top-level key. Nothing when the
/// file is not TOML at all: the parser's error is the one to read.
pub(super) fn errors(path: &Path, source: &str) -> Vec<SpecError> {
    let Ok(doc) = source.parse::<toml::Table>() else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    let mut check = |r: Result<(), toml::de::Error>| {
        if let Err(e) = r {
            errors.push(toml_error(path, source, &e));
        }
    };
    let entries = |key: &str| doc.get(key).and_then(|v| v.as_array()).map_or(0, Vec::len);
    check(section::<Experiment>(source, "experiment", None, true));
    check(section::<VmSection>(source, "vm", None, false));
    check(section::<KernelSection>(source, "kernel", None, false));
    check(section::<ImageSection>(source, "image", None, false));
    check(section::<Vec<IgnoredAny>>(source, "devices", None, false));
    for i in 0..entries("devices") {
        check(section::<DeviceSpec>(source, "devices", Some(i), false));
    }
    check(section::<toml::Table>(source, "workload", None, true));
    check(section::<BTreeMap<String, Vec<toml::Value>>>(
        source, "sweep", None, false,
    ));
    check(section::<Vec<IgnoredAny>>(
        source,
        "sweep_skip",
        None,
        false,
    ));
    for i in 0..entries("sweep_skip") {
        check(section::<BTreeMap<String, toml::Value>>(
            source,
            "sweep_skip",
            Some(i),
            false,
        ));
    }
    check(section::<Timeouts>(source, "timeouts", None, false));
    check(section::<Limits>(source, "limits", None, false));
    check(section::<Topology>(source, "topology", None, false));
    check(section::<SlurmSection>(source, "slurm", None, false));
    for key in doc.keys().filter(|k| !SECTIONS.contains(&k.as_str())) {
        let at = locate(source, &[PathSeg::Key(key)]).map(|o| line_col(source, o));
        errors.push(SpecError {
            file: path.to_path_buf(),
            line: at.map(|(l, _)| l),
            column: at.map(|(_, c)| c),
            field: Some(key.clone()),
            message: format!(
                "unknown field `{key}`, expected one of {}",
                SECTIONS.map(|s| format!("`{s}`")).join(", ")
            ),
        });
    }
    errors
}

/// Deserializes `key` of the document as `T` (with `index`, only that
/// entry of the array at `key`), ignoring every other key.
fn section<T: serde::de::DeserializeOwned>(
    source: &str,
    key: &'static str,
    index: Option<usize>,
    required: bool,
) -> Result<(), toml::de::Error> {
    let de = toml::Deserializer::parse(source)?;
    let found = OneKey::<T> {
        key,
        index,
        _t: PhantomData,
    }
    .deserialize(de)?;
    if required && !found {
        return Err(serde::de::Error::missing_field(key));
    }
    Ok(())
}

/// A document visitor that deserializes one key and ignores the rest;
/// its value says whether the key was there.
struct OneKey<T> {
    key: &'static str,
    index: Option<usize>,
    _t: PhantomData<T>,
}

impl<'de, T: serde::de::DeserializeOwned> DeserializeSeed<'de> for OneKey<T> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: serde::de::DeserializeOwned> Visitor<'de> for OneKey<T> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a table")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut found = false;
        while let Some(k) = map.next_key::<String>()? {
            if k != self.key {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            found = true;
            match self.index {
                None => {
                    map.next_value::<T>()?;
                }
                Some(i) => map.next_value_seed(Entry::<T> {
                    index: i,
                    _t: PhantomData,
                })?,
            }
        }
        Ok(found)
    }
}

/// An array visitor that deserializes entry `index` as `T`.
struct Entry<T> {
    index: usize,
    _t: PhantomData<T>,
}

impl<'de, T: serde::de::DeserializeOwned> DeserializeSeed<'de> for Entry<T> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: serde::de::DeserializeOwned> Visitor<'de> for Entry<T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let more = if i == self.index {
                seq.next_element::<T>()?.is_some()
            } else {
                seq.next_element::<IgnoredAny>()?.is_some()
            };
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"[experiment]
name = "many"
seed = "seven"

[vm]
memroy = "1G"

[[devices]]
name = "a"
kind = "nvme"
size = "64M"

[[devices]]
name = "b"
kind = "nvme"
size = "12QB"

[workload]
kind = "randread"
device = "a"

[timeouts]
boot = 3
"#;

    #[test]
    fn each_section_reports_its_own_error_at_its_line() {
        let errors = errors(Path::new("m.toml"), SPEC);
        let got: Vec<(Option<usize>, Option<&str>)> = errors
            .iter()
            .map(|e| (e.line, e.field.as_deref()))
            .collect();
        for want in [
            (Some(3), Some("experiment.seed")),
            (Some(6), Some("vm.memroy")),
            (Some(16), Some("devices[1].size")),
        ] {
            assert!(got.contains(&want), "{want:?} not in {errors:#?}");
        }
        // The first device is fine.
        assert!(
            !got.iter()
                .any(|(_, f)| f.is_some_and(|f| f.starts_with("devices[0]"))),
            "{errors:#?}"
        );
    }

    #[test]
    fn an_unknown_section_and_a_missing_one_are_both_named() {
        let src = "[experimnt]\nname = \"x\"\n\n[workload]\nkind = \"randread\"\n";
        let errors = errors(Path::new("m.toml"), src);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|t| t.starts_with("m.toml:1:1: experimnt: unknown field `experimnt`")),
            "{text:#?}"
        );
        assert!(
            text.iter()
                .any(|t| t.contains("missing field `experiment`")),
            "{text:#?}"
        );
    }
}
