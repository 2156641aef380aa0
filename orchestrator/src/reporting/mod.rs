//! Layer reporting: what a user reads: show, reproduce, doctor.
//! See the layer table in `src/lib.rs`.

pub mod doctor;
pub mod reproduce;
pub mod show;
