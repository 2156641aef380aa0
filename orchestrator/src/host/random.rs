//! Random hex for names that must not collide: run ids, boot nonces.

/// `bytes` random bytes from /dev/urandom as hex (zeros if it cannot be read).
pub fn hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut buf);
    }
    ::hex::encode(buf)
}
