//! Layer inputs: what a run boots and loads: kernels, images, guest binaries,
//! BPF objects.
//! See the layer table in `src/lib.rs`.

pub mod caches;
pub mod ebpf;
pub mod guestbin;
pub mod image;
pub mod kernel;
