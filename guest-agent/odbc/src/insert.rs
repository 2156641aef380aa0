//! `testbed-odbc insert`: psqlODBC array inserts. The rows come from a CSV
//! file read and parsed before the timer starts (the other ingest clients
//! also start from rows in memory); then, from connect to commit, one
//! prepared `INSERT … VALUES (?, …)` is executed with bound column arrays
//! of up to `batch_rows` rows (SQL_ATTR_PARAMSET_SIZE), in one transaction.

use odbc_api::ConnectionOptions;
use odbc_api::buffers::BufferDesc;
use odbc_api::sys::Timestamp;

use crate::{Result, env, odbc_err};

/// A column's type, as `--types` names it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Int,
    Float,
    Timestamp,
    Text,
}

impl Kind {
    pub fn parse_list(s: &str) -> Result<Vec<Kind>> {
        s.split(',')
            .map(|t| match t {
                "int" => Ok(Kind::Int),
                "float" => Ok(Kind::Float),
                "timestamp" => Ok(Kind::Timestamp),
                "text" => Ok(Kind::Text),
                other => {
                    anyhow::bail!("--types: unknown type {other:?} (int, float, timestamp, text)")
                }
            })
            .collect()
    }
}

/// One parsed value.
enum Value {
    Int(i32),
    Float(f64),
    Timestamp(Timestamp),
    Text(Vec<u8>),
}

/// `YYYY-MM-DD HH:MM:SS`, as the generator writes it.
fn timestamp(s: &str) -> Option<Timestamp> {
    let (date, time) = s.split_once(' ')?;
    let mut d = date.split('-').map(str::parse::<u32>);
    let mut t = time.split(':').map(str::parse::<u32>);
    let next = |it: &mut dyn Iterator<Item = std::result::Result<u32, _>>| it.next()?.ok();
    Some(Timestamp {
        year: i16::try_from(next(&mut d)?).ok()?,
        month: u16::try_from(next(&mut d)?).ok()?,
        day: u16::try_from(next(&mut d)?).ok()?,
        hour: u16::try_from(next(&mut t)?).ok()?,
        minute: u16::try_from(next(&mut t)?).ok()?,
        second: u16::try_from(next(&mut t)?).ok()?,
        fraction: 0,
    })
}

/// Every line of `csv` as values of `kinds`; errors name the line and
/// column.
fn parse(csv: &str, kinds: &[Kind], path: &str) -> Result<Vec<Vec<Value>>> {
    csv.lines()
        .enumerate()
        .map(|(i, line)| {
            let fields: Vec<&str> = line.split(',').collect();
            if fields.len() != kinds.len() {
                anyhow::bail!(
                    "{path}:{}: {} fields, --types names {}",
                    i + 1,
                    fields.len(),
                    kinds.len()
                );
            }
            fields
                .iter()
                .zip(kinds)
                .enumerate()
                .map(|(col, (f, k))| {
                    let bad = || {
                        anyhow::anyhow!("{path}:{}: column {}: {f:?} is not {k:?}", i + 1, col + 1)
                    };
                    Ok(match k {
                        Kind::Int => Value::Int(f.parse().map_err(|_| bad())?),
                        Kind::Float => Value::Float(f.parse().map_err(|_| bad())?),
                        Kind::Timestamp => Value::Timestamp(timestamp(f).ok_or_else(bad)?),
                        Kind::Text => Value::Text(f.as_bytes().to_vec()),
                    })
                })
                .collect()
        })
        .collect()
}

/// What `insert` did: rows, seconds from connect to commit, CPU seconds.
pub struct Inserted {
    pub rows: u64,
    pub seconds: f64,
    pub cpu_s: Option<f64>,
}

pub fn insert(
    conn_str: &str,
    table: &str,
    csv_path: &str,
    kinds: &[Kind],
    batch_rows: usize,
) -> Result<Inserted> {
    if table.is_empty() || !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        anyhow::bail!("--table {table:?}: only ASCII letters, digits and _");
    }
    let text =
        std::fs::read_to_string(csv_path).map_err(|e| anyhow::anyhow!("read {csv_path}: {e}"))?;
    let rows = parse(&text, kinds, csv_path)?;
    drop(text);
    let longest = rows
        .iter()
        .flatten()
        .map(|v| match v {
            Value::Text(b) => b.len(),
            _ => 0,
        })
        .max()
        .unwrap_or(0)
        .max(1);
    let descs: Vec<BufferDesc> = kinds
        .iter()
        .map(|k| match k {
            Kind::Int => BufferDesc::I32 { nullable: false },
            Kind::Float => BufferDesc::F64 { nullable: false },
            Kind::Timestamp => BufferDesc::Timestamp { nullable: false },
            Kind::Text => BufferDesc::Text {
                max_str_len: longest,
            },
        })
        .collect();
    let per = batch_rows.clamp(1, rows.len().max(1));
    let marks = vec!["?"; kinds.len()].join(",");
    let sql = format!("INSERT INTO {table} VALUES ({marks})");

    let started = std::time::Instant::now();
    let cpu_before = crate::process_cpu_s();
    let conn = env()?
        .connect_with_connection_string(conn_str, ConnectionOptions::default())
        .map_err(|e| odbc_err("connect", e))?;
    conn.set_autocommit(false)
        .map_err(|e| odbc_err("autocommit off", e))?;
    let prepared = conn.prepare(&sql).map_err(|e| odbc_err("prepare", e))?;
    let mut inserter = prepared
        .into_column_inserter(per, descs)
        .map_err(|e| odbc_err("bind parameter arrays", e))?;
    for chunk in rows.chunks(per) {
        inserter.set_num_rows(chunk.len());
        for (col, kind) in kinds.iter().enumerate() {
            let column = inserter.column_mut(col);
            let wrong = || anyhow::anyhow!("ODBC: column {} is not bound as {kind:?}", col + 1);
            match kind {
                Kind::Text => {
                    let mut view = column.as_text_view().ok_or_else(wrong)?;
                    for (r, row) in chunk.iter().enumerate() {
                        if let Value::Text(b) = &row[col] {
                            view.set_cell(r, Some(b));
                        }
                    }
                }
                Kind::Int => {
                    let slice = column.as_slice::<i32>().ok_or_else(wrong)?;
                    for (r, row) in chunk.iter().enumerate() {
                        if let Value::Int(v) = row[col] {
                            slice[r] = v;
                        }
                    }
                }
                Kind::Float => {
                    let slice = column.as_slice::<f64>().ok_or_else(wrong)?;
                    for (r, row) in chunk.iter().enumerate() {
                        if let Value::Float(v) = row[col] {
                            slice[r] = v;
                        }
                    }
                }
                Kind::Timestamp => {
                    let slice = column.as_slice::<Timestamp>().ok_or_else(wrong)?;
                    for (r, row) in chunk.iter().enumerate() {
                        if let Value::Timestamp(v) = &row[col] {
                            slice[r] = *v;
                        }
                    }
                }
            }
        }
        inserter.execute().map_err(|e| odbc_err("execute", e))?;
    }
    drop(inserter);
    conn.commit().map_err(|e| odbc_err("commit", e))?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(Inserted {
        rows: rows.len() as u64,
        seconds,
        cpu_s: cpu_before.zip(crate::process_cpu_s()).map(|(b, a)| a - b),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_lines_parse_by_type_and_errors_name_line_and_column() {
        let kinds = Kind::parse_list("int,timestamp,float,text").unwrap();
        let rows = parse("1,2015-01-02 03:04:05,2.50,Cash\n", &kinds, "f.csv").unwrap();
        match &rows[0][1] {
            Value::Timestamp(t) => assert_eq!((t.year, t.day, t.second), (2015, 2, 5)),
            _ => panic!(),
        }
        let e = parse("1,x,2.5,a\n", &kinds, "f.csv")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("f.csv:1: column 2"), "{e}");
        let e = parse("1,2\n", &kinds, "f.csv").err().unwrap().to_string();
        assert!(e.contains("f.csv:1: 2 fields"), "{e}");
        assert!(Kind::parse_list("int,blob").is_err());
    }
}
