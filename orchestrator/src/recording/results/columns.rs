//! The `param_<name>` and `tag_<name>` columns both result tables share:
//! names without dots, types from the values (integers stay integers), and
//! nulls where a row has no value.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow::datatypes::{DataType, Field};

/// One parameter value of a point.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(String),
}

impl Scalar {
    pub fn from_json(v: &serde_json::Value) -> Option<Scalar> {
        Some(match v {
            serde_json::Value::Null => return None,
            serde_json::Value::Bool(b) => Scalar::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Scalar::Int(i),
                None => Scalar::Float(n.as_f64()?),
            },
            serde_json::Value::String(s) => Scalar::Text(s.clone()),
            // Lists and tables keep their JSON text: still one value per
            // point, so they group and filter.
            other => Scalar::Text(other.to_string()),
        })
    }

    pub fn from_toml(v: &toml::Value) -> Scalar {
        match v {
            toml::Value::Integer(i) => Scalar::Int(*i),
            toml::Value::Float(f) => Scalar::Float(*f),
            toml::Value::Boolean(b) => Scalar::Bool(*b),
            toml::Value::String(s) => Scalar::Text(s.clone()),
            other => {
                Scalar::Text(serde_json::to_string(other).unwrap_or_else(|_| other.to_string()))
            }
        }
    }

    fn data_type(&self) -> DataType {
        match self {
            Scalar::Int(_) => DataType::Int64,
            Scalar::Float(_) => DataType::Float64,
            Scalar::Bool(_) => DataType::Boolean,
            Scalar::Text(_) => DataType::Utf8,
        }
    }
}

/// `param_<name>` / `tag_<name>`: dots, dashes and spaces become `_`.
pub fn column_name(prefix: &str, name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{prefix}_{clean}")
}

/// Every parameter of a point: the resolved workload's fields (defaults
/// filled in; `kind` included), then the sweep axes, which win.
pub fn point_params(
    workload: &serde_json::Value,
    axes: &BTreeMap<String, toml::Value>,
) -> BTreeMap<String, Scalar> {
    let mut out = BTreeMap::new();
    if let Some(fields) = workload.as_object() {
        for (k, v) in fields {
            if let Some(s) = Scalar::from_json(v) {
                out.insert(k.clone(), s);
            }
        }
    }
    for (k, v) in axes {
        out.insert(k.clone(), Scalar::from_toml(v));
    }
    out
}

/// A column holding `value` on `rows` rows.
pub fn constant_column(name: &str, value: &Scalar, rows: usize) -> (Field, ArrayRef) {
    let field = Field::new(name, value.data_type(), true);
    let array: ArrayRef = match value {
        Scalar::Int(i) => {
            let mut b = Int64Builder::with_capacity(rows);
            b.append_slice(&vec![*i; rows]);
            Arc::new(b.finish())
        }
        Scalar::Float(f) => {
            let mut b = Float64Builder::with_capacity(rows);
            b.append_slice(&vec![*f; rows]);
            Arc::new(b.finish())
        }
        Scalar::Bool(x) => {
            let mut b = BooleanBuilder::with_capacity(rows);
            for _ in 0..rows {
                b.append_value(*x);
            }
            Arc::new(b.finish())
        }
        Scalar::Text(t) => {
            let mut b = StringBuilder::new();
            for _ in 0..rows {
                b.append_value(t);
            }
            Arc::new(b.finish())
        }
    };
    (field, array)
}

/// A tag column from per-row values: Int64 when every present value is an
/// integer (e.g. `hop`), else Utf8; null where a row has no such tag.
pub fn tag_column(name: &str, values: &[Option<&str>]) -> (Field, ArrayRef) {
    let int = values.iter().any(Option::is_some)
        && values.iter().flatten().all(|s| s.parse::<i64>().is_ok());
    tag_column_as(name, values, int)
}

/// A tag column of a type decided beforehand (every batch of one file must
/// agree): Int64 when `int`, which the caller checked every value allows.
pub fn tag_column_as(name: &str, values: &[Option<&str>], int: bool) -> (Field, ArrayRef) {
    match int {
        true => {
            let mut b = Int64Builder::with_capacity(values.len());
            for v in values {
                b.append_option(v.and_then(|s| s.parse::<i64>().ok()));
            }
            (
                Field::new(name, DataType::Int64, true),
                Arc::new(b.finish()),
            )
        }
        _ => {
            let mut b = StringBuilder::new();
            for v in values {
                b.append_option(*v);
            }
            (Field::new(name, DataType::Utf8, true), Arc::new(b.finish()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;

    #[test]
    fn names_lose_their_dots_and_axes_override_fields() {
        assert_eq!(column_name("param", "vm.vcpus"), "param_vm_vcpus");
        let w = serde_json::json!({"kind": "btree", "depth": 3, "engines": ["read"], "x": null});
        let axes = BTreeMap::from([("depth".to_string(), toml::Value::Integer(5))]);
        let p = point_params(&w, &axes);
        assert_eq!(p["depth"], Scalar::Int(5));
        assert_eq!(p["kind"], Scalar::Text("btree".into()));
        assert_eq!(p["engines"], Scalar::Text("[\"read\"]".into()));
        assert!(!p.contains_key("x"));
    }

    #[test]
    fn integer_tags_stay_integers_and_absent_ones_are_null() {
        let (f, a) = tag_column("tag_hop", &[Some("0"), None, Some("2")]);
        assert_eq!(*f.data_type(), DataType::Int64);
        assert_eq!(a.null_count(), 1);
        let (f, _) = tag_column("tag_engine", &[Some("read"), Some("1")]);
        assert_eq!(*f.data_type(), DataType::Utf8);
    }
}
