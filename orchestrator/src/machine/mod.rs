//! Layer machine: the machine under test: QEMU's command line and process, the
//! host's description, noise, a point's cost to the host, and calibration.
//! See the layer table in `src/lib.rs`.

pub mod calibrate;
pub mod hostcost;
pub mod hostinfo;
pub mod noise;
pub mod qemu;
