//! Whether the process that wrote a temporary file or holds a lease is
//! still alive (a leaf, shared by the local backend and the lease).

use std::path::Path;

/// Whether process `pid` may still be writing. This process counts as
/// alive: a second backend it opens on the same directory (listing
/// checkpoints while one is being written) must not remove its in-flight
/// files. Only Linux can tell about other processes (through `/proc`);
/// elsewhere every process counts as alive.
pub(crate) fn process_is_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    if cfg!(target_os = "linux") {
        Path::new("/proc").join(pid.to_string()).exists()
    } else {
        true
    }
}
