//! The sandbox a Python worker runs in, made with bubblewrap (`bwrap`,
//! Debian's `bubblewrap` package): new user, mount, PID, IPC, UTS, cgroup
//! and network namespaces; an unprivileged user (65534) with every
//! capability dropped and no new privileges; a root filesystem that holds
//! only `/usr`, the interpreter's own directories and the package, all
//! read-only; a private, empty, writable `/tmp`; and one writable directory
//! holding the socket the engine connects to. There is no network at all:
//! the worker reaches nothing but that socket, and it reads nothing of the
//! host outside what is listed here.
//!
//! ```text
//!   /usr, /lib*, /bin      read-only (the system's libraries)
//!   <interpreter dirs>     read-only (prefix, site-packages)
//!   /sluice/package        read-only (the deployment)
//!   /sluice/run            read-write (worker.sock only; mode 0700 outside)
//!   /tmp                   private tmpfs (scratch)
//!   /dev, /proc            minimal, for this PID namespace
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::interpreter::Interpreter;
use crate::error::RemoteError;

/// Where the package appears inside the sandbox.
pub const PACKAGE_DIR: &str = "/sluice/package";
/// Where the socket directory appears inside the sandbox.
pub const RUN_DIR: &str = "/sluice/run";
/// The socket's file name.
pub const SOCKET: &str = "worker.sock";

/// A working bubblewrap.
#[derive(Debug, Clone)]
pub struct Sandbox {
    bwrap: PathBuf,
}

impl Sandbox {
    /// Find `bwrap` and check that it can build the sandbox here (user
    /// namespaces may be disabled); the error says what is missing.
    pub fn locate(interpreter: &Interpreter) -> Result<Self, RemoteError> {
        Self::locate_in(std::env::var_os("PATH"), interpreter)
    }

    /// [`Self::locate`], searching `path` (a `PATH`-style list) for `bwrap`.
    pub fn locate_in(
        path: Option<std::ffi::OsString>,
        interpreter: &Interpreter,
    ) -> Result<Self, RemoteError> {
        let bwrap = path
            .iter()
            .flat_map(std::env::split_paths)
            .map(|d| d.join("bwrap"))
            .find(|p| p.is_file())
            .ok_or_else(|| RemoteError::Sandbox {
                reason:
                    "bubblewrap (`bwrap`) is not installed; install Debian's `bubblewrap` package"
                        .into(),
            })?;
        let sandbox = Sandbox { bwrap };
        let scratch = tempfile::tempdir().map_err(|e| RemoteError::Sandbox {
            reason: format!("cannot make a scratch directory: {e}"),
        })?;
        let out = sandbox
            .command(interpreter, scratch.path(), scratch.path(), &[])
            .args([
                "-I",
                "-c",
                "import os; assert os.getuid() == 65534; print('sandboxed')",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| RemoteError::Sandbox {
                reason: format!("cannot run {}: {e}", sandbox.bwrap.display()),
            })?;
        if !out.status.success() || !String::from_utf8_lossy(&out.stdout).contains("sandboxed") {
            return Err(RemoteError::Sandbox {
                reason: format!(
                    "bubblewrap cannot build the sandbox on this host ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        Ok(sandbox)
    }

    /// `bwrap <sandbox> -- <interpreter>`; add the interpreter's arguments.
    /// `env` is the worker's whole environment besides `PATH`, `HOME` and
    /// Python's output settings (bubblewrap starts it empty).
    pub fn command(
        &self,
        interpreter: &Interpreter,
        package: &Path,
        run_dir: &Path,
        env: &[(String, String)],
    ) -> Command {
        let mut c = Command::new(&self.bwrap);
        c.args([
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
        ]);
        c.args(["--uid", "65534", "--gid", "65534"]);
        c.args(["--ro-bind", "/usr", "/usr"]);
        for top in ["/lib", "/lib64", "/lib32", "/bin", "/sbin"] {
            let p = Path::new(top);
            match std::fs::read_link(p) {
                Ok(target) => {
                    c.arg("--symlink").arg(target).arg(top);
                }
                Err(_) if p.is_dir() => {
                    c.args(["--ro-bind", top, top]);
                }
                Err(_) => {}
            }
        }
        for dir in &interpreter.read_paths {
            if !dir.starts_with("/usr") {
                c.arg("--ro-bind").arg(dir).arg(dir);
            }
        }
        c.arg("--ro-bind").arg(package).arg(PACKAGE_DIR);
        c.arg("--bind").arg(run_dir).arg(RUN_DIR);
        c.args([
            "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc", "--chdir", "/tmp",
        ]);
        // The root bubblewrap builds is a writable tmpfs: make it read-only
        // once everything is mounted (submounts keep their own modes).
        c.args(["--remount-ro", "/"]);
        c.args([
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/bin:/bin",
            "--setenv",
            "HOME",
            "/tmp",
        ]);
        c.args([
            "--setenv",
            "PYTHONDONTWRITEBYTECODE",
            "1",
            "--setenv",
            "PYTHONUNBUFFERED",
            "1",
        ]);
        for (k, v) in env {
            c.arg("--setenv").arg(k).arg(v);
        }
        c.arg("--").arg(&interpreter.executable);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interpreter() -> Interpreter {
        Interpreter {
            executable: "/usr/bin/python3".into(),
            description: "CPython 3".into(),
            sdk: "0.1.0".into(),
            read_paths: vec![],
        }
    }

    #[test]
    fn without_bubblewrap_declaring_fails_and_says_what_to_install() {
        let e = Sandbox::locate_in(Some("/nonexistent:/also/not".into()), &interpreter())
            .err()
            .unwrap_or_else(|| panic!("a sandbox without bwrap"));
        assert_eq!(e.code(), "SLC-RMT-016");
        assert_eq!(
            e.to_string(),
            "cannot sandbox the python worker: bubblewrap (`bwrap`) is not installed; install Debian's `bubblewrap` package"
        );
    }

    #[test]
    fn a_bubblewrap_that_cannot_build_the_sandbox_is_refused_with_its_output() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let fake = dir.path().join("bwrap");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = Sandbox::locate_in(Some(dir.path().into()), &interpreter())
            .err()
            .unwrap_or_else(|| panic!("a sandbox from a failing bwrap"));
        assert_eq!(e.code(), "SLC-RMT-016");
        let text = e.to_string();
        assert!(
            text.contains("bubblewrap cannot build the sandbox on this host")
                && text.contains("No permissions to create new namespace"),
            "{text}"
        );
    }
}
