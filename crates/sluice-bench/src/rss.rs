//! Resident memory of this process, from `/proc/self/status` (Linux).

use serde::Serialize;

/// Resident set size now and at its peak, in MiB (`None` off Linux).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss_mib: Option<f64>,
    /// `VmHWM`: the peak resident size of the process so far.
    pub peak_mib: Option<f64>,
}

/// Read the current and peak resident sizes.
pub fn read() -> Memory {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return Memory::default();
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map(|kib| kib / 1024.0)
    };
    Memory {
        rss_mib: field("VmRSS:"),
        peak_mib: field("VmHWM:"),
    }
}
