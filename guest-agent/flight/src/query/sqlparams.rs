//! Prepared statements of the Flight SQL server: their handles, SQL,
//! parameter types and bound parameter row, and Arrow parameter values
//! turned into values of the statement's parameter types: PostgreSQL
//! values for the PostgreSQL source, DataFusion scalars for DataFusion.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Float64Type, Int16Type, Int32Type, Int64Type, TimestampMicrosecondType,
};
use bytes::Bytes;
use datafusion::scalar::ScalarValue;
use tokio_postgres::types::{ToSql, Type};
use tonic::Status;

/// A value bound to a PostgreSQL statement parameter.
pub type PgParam = Box<dyn ToSql + Sync + Send>;

/// A statement's parameters ($1, $2, …) as its engine typed them.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamTypes {
    Postgres(Vec<Type>),
    /// DataFusion's; `Null` where the plan could not tell.
    Arrow(Vec<DataType>),
}

impl ParamTypes {
    pub fn len(&self) -> usize {
        match self {
            ParamTypes::Postgres(t) => t.len(),
            ParamTypes::Arrow(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Bound parameters, ready for the statement's engine.
pub enum Params {
    Postgres(Vec<PgParam>),
    Arrow(Vec<ScalarValue>),
}

impl Params {
    pub fn none() -> Params {
        Params::Arrow(Vec::new())
    }
}

pub struct Prepared {
    pub sql: String,
    pub param_types: ParamTypes,
    /// The row bound by the client's DoPut, if any.
    pub bound: Option<RecordBatch>,
}

/// The open prepared statements, by handle.
#[derive(Default)]
pub struct Store {
    next: AtomicU64,
    open: Mutex<HashMap<Bytes, Prepared>>,
}

fn unknown(handle: &[u8]) -> Status {
    Status::not_found(format!(
        "no open prepared statement {:?} (closed, or from another server)",
        String::from_utf8_lossy(handle)
    ))
}

impl Store {
    pub fn open(&self, p: Prepared) -> Bytes {
        let handle = Bytes::from(format!("ps-{}", self.next.fetch_add(1, Ordering::Relaxed)));
        self.lock().insert(handle.clone(), p);
        handle
    }

    /// The statement's SQL and its parameters (converted from the bound
    /// row); a statement with parameters and nothing bound is refused.
    pub fn sql_and_params(&self, handle: &[u8]) -> Result<(String, Params), Status> {
        let open = self.lock();
        let p = open.get(handle).ok_or_else(|| unknown(handle))?;
        let params = match &p.param_types {
            ParamTypes::Postgres(t) => Params::Postgres(pg_params(t, p.bound.as_ref())?),
            ParamTypes::Arrow(t) => Params::Arrow(scalar_params(t, p.bound.as_ref())?),
        };
        Ok((p.sql.clone(), params))
    }

    /// Binds `row` (checked against the parameter count now, converted at
    /// execution).
    pub fn bind(&self, handle: &[u8], row: RecordBatch) -> Result<(), Status> {
        let mut open = self.lock();
        let p = open.get_mut(handle).ok_or_else(|| unknown(handle))?;
        if row.num_columns() != p.param_types.len() {
            return Err(Status::invalid_argument(format!(
                "the statement has {} parameter(s); {} column(s) were bound",
                p.param_types.len(),
                row.num_columns()
            )));
        }
        if row.num_rows() != 1 {
            return Err(Status::invalid_argument(format!(
                "bind one parameter row per execution; {} rows were bound",
                row.num_rows()
            )));
        }
        p.bound = Some(row);
        Ok(())
    }

    pub fn close(&self, handle: &[u8]) -> Result<(), Status> {
        self.lock()
            .remove(handle)
            .map(|_| ())
            .ok_or_else(|| unknown(handle))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Bytes, Prepared>> {
        // A panic while holding the map leaves it consistent (whole inserts).
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Each parameter's value from the bound row (required when there are
/// parameters), converted by `convert`; a failure names the parameter.
fn convert_each<T, P>(
    types: &[T],
    bound: Option<&RecordBatch>,
    convert: impl Fn(&T, &ArrayRef) -> Result<P, String>,
) -> Result<Vec<P>, Status> {
    if types.is_empty() {
        return Ok(Vec::new());
    }
    let row = bound.ok_or_else(|| {
        Status::invalid_argument(format!(
            "the statement has {} parameter(s) and none were bound",
            types.len()
        ))
    })?;
    types
        .iter()
        .zip(row.columns())
        .enumerate()
        .map(|(i, (t, col))| {
            convert(t, col)
                .map_err(|e| Status::invalid_argument(format!("parameter ${}: {e}", i + 1)))
        })
        .collect()
}

/// Not `safe`: a value that does not convert is an error, never NULL.
fn strict_cast(col: &ArrayRef, to: &DataType) -> Result<ArrayRef, String> {
    let strict = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    arrow::compute::cast_with_options(col, to, &strict)
        .map_err(|e| format!("{} to {to}: {e}", col.data_type()))
}

/// The bound row's values as DataFusion scalars of the types its plan gave
/// the parameters (a client binds Python ints as int64 where the column is
/// int32: DataFusion checks the types exactly).
pub fn scalar_params(
    types: &[DataType],
    bound: Option<&RecordBatch>,
) -> Result<Vec<ScalarValue>, Status> {
    convert_each(types, bound, |t, col| {
        let c = match t {
            DataType::Null => col.clone(),
            t => strict_cast(col, t)?,
        };
        ScalarValue::try_from_array(&c, 0).map_err(|e| e.to_string())
    })
}

/// The bound row's values as the statement's parameter types.
pub fn pg_params(types: &[Type], bound: Option<&RecordBatch>) -> Result<Vec<PgParam>, Status> {
    convert_each(types, bound, value)
}

/// Row 0 of `col` cast to the Arrow type of `t`, as a PostgreSQL value.
fn value(t: &Type, col: &ArrayRef) -> Result<PgParam, String> {
    let target = super::sqlserver::arrow_type(t).map_err(|s| s.message().to_string())?;
    let c = strict_cast(col, &target)?;
    let some = c.is_valid(0);
    Ok(match target {
        DataType::Int16 => Box::new(some.then(|| c.as_primitive::<Int16Type>().value(0))),
        DataType::Int32 => Box::new(some.then(|| c.as_primitive::<Int32Type>().value(0))),
        DataType::Int64 => Box::new(some.then(|| c.as_primitive::<Int64Type>().value(0))),
        DataType::Float64 => Box::new(some.then(|| c.as_primitive::<Float64Type>().value(0))),
        DataType::Utf8 => Box::new(some.then(|| c.as_string::<i32>().value(0).to_string())),
        DataType::Timestamp(..) => {
            let us = some.then(|| c.as_primitive::<TimestampMicrosecondType>().value(0));
            Box::new(us.map(system_time))
        }
        other => return Err(format!("{other} parameters are not converted")),
    })
}

fn system_time(us: i64) -> SystemTime {
    let d = Duration::from_micros(us.unsigned_abs());
    if us >= 0 {
        SystemTime::UNIX_EPOCH + d
    } else {
        SystemTime::UNIX_EPOCH - d
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn row(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
        let fields: Vec<Field> = cols
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            cols.into_iter().map(|(_, a)| a).collect(),
        )
        .unwrap()
    }

    fn prepared(types: Vec<Type>) -> Prepared {
        Prepared {
            sql: "SELECT $1".into(),
            param_types: ParamTypes::Postgres(types),
            bound: None,
        }
    }

    #[test]
    fn a_bound_row_becomes_values_of_the_parameter_types() {
        let r = row(vec![
            ("a", Arc::new(Int64Array::from(vec![2]))),
            ("b", Arc::new(StringArray::from(vec!["7"]))),
            ("c", Arc::new(Int64Array::from(vec![None::<i64>]))),
        ]);
        let p = pg_params(&[Type::INT4, Type::INT8, Type::TEXT], Some(&r)).unwrap();
        assert_eq!(format!("{:?}", p[0]), "Some(2)");
        assert_eq!(format!("{:?}", p[1]), "Some(7)");
        assert_eq!(format!("{:?}", p[2]), "None");
        let bad = row(vec![("a", Arc::new(StringArray::from(vec!["x"])))]);
        let e = pg_params(&[Type::INT4], Some(&bad)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().starts_with("parameter $1: "), "{e:?}");
        let e = pg_params(&[Type::INT4], None).unwrap_err();
        assert!(e.message().contains("none were bound"), "{e:?}");
    }

    #[test]
    fn a_bound_row_becomes_datafusion_scalars_of_the_plans_types() {
        let r = row(vec![
            ("a", Arc::new(Int64Array::from(vec![2]))),
            ("b", Arc::new(StringArray::from(vec!["x"]))),
        ]);
        let v = scalar_params(&[DataType::Int32, DataType::Null], Some(&r)).unwrap();
        assert_eq!(v, [ScalarValue::Int32(Some(2)), ScalarValue::from("x")]);
        let big = row(vec![("a", Arc::new(Int64Array::from(vec![i64::MAX])))]);
        let e = scalar_params(&[DataType::Int32], Some(&big)).unwrap_err();
        assert!(e.message().starts_with("parameter $1: "), "{e:?}");
        let e = scalar_params(&[DataType::Int32], None).unwrap_err();
        assert!(e.message().contains("none were bound"), "{e:?}");
    }

    #[test]
    fn handles_bind_checked_rows_and_close_once() {
        let s = Store::default();
        let h = s.open(prepared(vec![Type::INT4]));
        let two = row(vec![("a", Arc::new(Int64Array::from(vec![1, 2])))]);
        let e = s.bind(&h, two).unwrap_err();
        assert!(e.message().contains("2 rows"), "{e:?}");
        let e = s
            .bind(
                &h,
                row(vec![
                    ("a", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
                    ("b", Arc::new(Int64Array::from(vec![1]))),
                ]),
            )
            .unwrap_err();
        assert!(e.message().contains("1 parameter(s); 2 column(s)"), "{e:?}");
        s.bind(&h, row(vec![("a", Arc::new(Int64Array::from(vec![5])))]))
            .unwrap();
        let (sql, params) = s.sql_and_params(&h).unwrap();
        let Params::Postgres(params) = params else {
            panic!("a PostgreSQL statement gets PostgreSQL values")
        };
        assert_eq!(
            (sql.as_str(), format!("{:?}", params[0])),
            ("SELECT $1", "Some(5)".into())
        );
        s.close(&h).unwrap();
        assert_eq!(s.close(&h).unwrap_err().code(), tonic::Code::NotFound);
        assert_eq!(
            s.sql_and_params(&h).err().map(|e| e.code()),
            Some(tonic::Code::NotFound)
        );
    }
}
