//! Layer machine: the machine under test: QEMU's command line and process, the
//! host's description, noise and calibration.
//! See the layer table in `src/lib.rs`.

pub mod calibrate;
pub mod hostinfo;
pub mod noise;
pub mod qemu;
