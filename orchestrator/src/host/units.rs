//! Sizes ("512M", "4KiB") and durations ("30s", "500ms") as spec values.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// A byte count written as an integer or a string with a binary unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(pub u64);

impl Size {
    pub fn bytes(self) -> u64 {
        self.0
    }
    pub fn mib(self) -> u64 {
        self.0 >> 20
    }
}

/// "1.5G" as ("1.5", "G"): the leading number and the unit after it.
fn split_number(text: &str) -> (&str, &str) {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    t.split_at(split)
}

/// A size or duration that does not parse; the spec loader locates it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("invalid size {0:?}: expected a number followed by an optional unit (K, M, G, T)")]
    SizeNumber(String),
    #[error(
        "invalid size {text:?}: unknown unit {unit:?} (use K, M, G or T, optionally followed by B or iB)"
    )]
    SizeUnit { text: String, unit: String },
    #[error("invalid size {0:?}: not a whole number of bytes")]
    SizeNotWhole(String),
    #[error("invalid duration {0:?}: expected a number followed by ms, s, m or h")]
    DurationNumber(String),
    #[error("invalid duration {text:?}: unknown unit {unit:?} (use ms, s, m or h)")]
    DurationUnit { text: String, unit: String },
    #[error("invalid duration {0:?}: must be positive")]
    DurationNotPositive(String),
    #[error("invalid duration {0:?}: too long to represent")]
    DurationTooLong(String),
}

/// Parses "512", "4K", "4KiB", "4KB", "1.5G": units are powers of 1024.
pub fn parse_size(text: &str) -> Result<Size, UnitError> {
    let (num, unit) = split_number(text);
    let num: f64 = num
        .parse()
        .map_err(|_| UnitError::SizeNumber(text.to_string()))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => {
            return Err(UnitError::SizeUnit {
                text: text.to_string(),
                unit: other.to_string(),
            });
        }
    };
    let bytes = num * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
        return Err(UnitError::SizeNotWhole(text.to_string()));
    }
    Ok(Size(bytes as u64))
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
            if b >= 1 << shift && b.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", b >> shift);
            }
        }
        write!(f, "{b}")
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as 4096, \"512M\" or \"1G\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom(format!("invalid size {v}: negative")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// A duration written as seconds (number) or a string with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Duration);

pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let (num, unit) = split_number(text);
    let num: f64 = num
        .parse()
        .map_err(|_| UnitError::DurationNumber(text.to_string()))?;
    let secs = match unit.trim() {
        "ms" => num / 1000.0,
        "" | "s" => num,
        "m" | "min" => num * 60.0,
        "h" => num * 3600.0,
        other => {
            return Err(UnitError::DurationUnit {
                text: text.to_string(),
                unit: other.to_string(),
            });
        }
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(UnitError::DurationNotPositive(text.to_string()));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| UnitError::DurationTooLong(text.to_string()))
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Span;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 30, \"30s\", \"500ms\" or \"5m\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Span, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Span, E> {
                self.visit_f64(v as f64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Span, E> {
                parse_duration(&format!("{v}s"))
                    .map(Span)
                    .map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Span, E> {
                parse_duration(v).map(Span).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}s", self.0.as_secs_f64()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("512").unwrap().bytes(), 512);
        assert_eq!(parse_size("4K").unwrap().bytes(), 4096);
        assert_eq!(parse_size("4KiB").unwrap().bytes(), 4096);
        assert_eq!(parse_size("1.5G").unwrap().bytes(), 3 << 29);
        assert_eq!(parse_size("256M").unwrap().to_string(), "256M");
    }

    #[test]
    fn bad_sizes_say_why() {
        let e = parse_size("12QB").unwrap_err().to_string();
        assert!(e.contains("unknown unit \"QB\""), "{e}");
        assert!(
            parse_size("lots")
                .unwrap_err()
                .to_string()
                .contains("expected a number")
        );
        assert!(
            parse_size("0.3")
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("5 fortnights").is_err());
        assert!(parse_duration("0s").is_err());
    }
}
