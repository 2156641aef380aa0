//! Private scratch space: directories only we can enter (mkdtemp, mode
//! 0700) and files that must be new (O_EXCL, no symlink followed), so
//! nothing another user prepared in a shared /tmp is used or written
//! through.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::error::{FlightError, Result};

/// A fresh directory `<temp dir>/<prefix>XXXXXX`, mode 0700, removed when
/// the returned value is dropped.
pub fn tempdir(prefix: &str) -> Result<tempfile::TempDir> {
    // tempfile leaves the mode to the umask (often 0755).
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|e| FlightError::io(format!("create a private {prefix}* directory"), e))
}

/// Creates `path`, which must not exist yet (not even as a symlink), for
/// reading and writing by us only (mode 0600).
pub fn create_new(path: &Path) -> Result<File> {
    testbed_proc::create_private_file(path)
        .map_err(|e| FlightError::io(format!("create {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_is_refused_over_a_symlink_and_is_ours_only() {
        let d = tempdir("testbed-private-test-").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(d.path()), 0o700);
        let victim = d.path().join("victim");
        std::fs::write(&victim, "mine").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(create_new(&link).is_err());
        assert!(create_new(&victim).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
        let fresh = d.path().join("fresh");
        create_new(&fresh).unwrap();
        assert_eq!(mode(&fresh), 0o600);
    }
}
