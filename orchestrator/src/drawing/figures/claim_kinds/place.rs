//! Where a claim about one x reads (`x = …` or `at = "smallest" |
//! "largest"`) and the bounds it holds a quantity to (`min` and/or
//! `max`): the keys `value_at`, `ratio_at` and `gain_remaining` share.

use serde::{Deserialize, Serialize};

use super::super::def::DefError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum At {
    Smallest,
    Largest,
}

/// The x a claim reads at: `x = …` or `at = "smallest" | "largest"`.
#[derive(Debug, Clone, PartialEq)]
pub enum Place {
    X(toml::Value),
    At(At),
}

/// `min` and/or `max`: at least one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bounds {
    Min(f64),
    Max(f64),
    Both(f64, f64),
}

impl Bounds {
    pub fn min(self) -> Option<f64> {
        match self {
            Bounds::Min(a) | Bounds::Both(a, _) => Some(a),
            Bounds::Max(_) => None,
        }
    }

    pub fn max(self) -> Option<f64> {
        match self {
            Bounds::Max(b) | Bounds::Both(_, b) => Some(b),
            Bounds::Min(_) => None,
        }
    }
}

/// The keys `x`, `at`, `min`, `max` as a kind's raw form holds them
/// (each kind lists them itself: serde's `flatten` would lose
/// `deny_unknown_fields`).
pub(super) type Keys = (Option<toml::Value>, Option<At>, Option<f64>, Option<f64>);

/// The place and bounds of `kind`'s claim from its keys.
pub(super) fn read(
    kind: &'static str,
    (x, at, min, max): Keys,
) -> Result<(Place, Bounds), DefError> {
    let place = match (x, at) {
        (Some(x), None) => Place::X(x),
        (None, Some(at)) => Place::At(at),
        (Some(_), Some(_)) => return Err(DefError::XAndAt(kind)),
        (None, None) => return Err(DefError::NoPlace(kind)),
    };
    let bounds = match (min, max) {
        (Some(a), Some(b)) => Bounds::Both(a, b),
        (Some(a), None) => Bounds::Min(a),
        (None, Some(b)) => Bounds::Max(b),
        (None, None) => return Err(DefError::NoBounds(kind)),
    };
    Ok((place, bounds))
}

/// The keys of a place and bounds.
pub(super) fn keys(place: Place, bounds: Bounds) -> Keys {
    let (x, at) = match place {
        Place::X(x) => (Some(x), None),
        Place::At(at) => (None, Some(at)),
    };
    (x, at, bounds.min(), bounds.max())
}
