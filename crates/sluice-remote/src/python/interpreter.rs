//! What a Python interpreter is, where it lives, and whether the worker SDK
//! is installed for it: asked of the interpreter itself, once, when a
//! function is declared.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::RemoteError;

/// An interpreter that can run the worker.
#[derive(Debug, Clone)]
pub struct Interpreter {
    /// The real executable (symbolic links and shims resolved).
    pub executable: PathBuf,
    /// How it names itself, e.g. `CPython 3.11.7` (part of the binding).
    pub description: String,
    /// The `sluice_worker` SDK version (part of the binding).
    pub sdk: String,
    /// Directories the interpreter reads (its prefixes and `sys.path`),
    /// mounted read-only into the sandbox.
    pub read_paths: Vec<PathBuf>,
}

const PROBE: &str = r#"
import os, platform, sys
print("executable=" + os.path.realpath(sys.executable))
print("description=" + platform.python_implementation() + " " + platform.python_version())
paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
paths |= {p for p in sys.path if p and os.path.isdir(p)}
for p in sorted(paths):
    print("path=" + os.path.realpath(p))
try:
    import grpc, pyarrow, sluice_worker
    print("sdk=" + sluice_worker.SDK_VERSION)
except Exception as e:
    print("missing=" + type(e).__name__ + ": " + str(e))
"#;

/// Ask `python` what it is. An interpreter that cannot run, or lacks the
/// SDK or its dependencies, is an error that says how to fix it.
pub fn probe(python: &Path) -> Result<Interpreter, RemoteError> {
    let bad = |reason: String| RemoteError::PythonEnvironment {
        path: python.display().to_string(),
        reason,
    };
    let out = Command::new(python)
        .args(["-I", "-c", PROBE])
        .current_dir("/")
        .output()
        .map_err(|e| bad(format!("cannot run the interpreter: {e}")))?;
    if !out.status.success() {
        return Err(bad(format!(
            "the interpreter failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut executable, mut description, mut sdk, mut read_paths) = (None, None, None, Vec::new());
    for line in text.lines() {
        match line.split_once('=') {
            Some(("executable", v)) => executable = Some(PathBuf::from(v)),
            Some(("description", v)) => description = Some(v.to_string()),
            Some(("path", v)) => read_paths.push(PathBuf::from(v)),
            Some(("sdk", v)) => sdk = Some(v.to_string()),
            Some(("missing", v)) => {
                return Err(bad(format!(
                    "the worker SDK cannot be imported ({v}); install it with `pip install ./python/sluice-worker` for this interpreter"
                )))
            }
            _ => {}
        }
    }
    let (Some(executable), Some(description), Some(sdk)) = (executable, description, sdk) else {
        return Err(bad(format!(
            "the interpreter did not describe itself: {text}"
        )));
    };
    if let Some(dir) = executable.parent() {
        read_paths.push(dir.to_path_buf());
    }
    read_paths.sort();
    read_paths.dedup();
    // Keep only the outermost of nested directories: one mount covers both.
    let mut outer: Vec<PathBuf> = Vec::new();
    for p in read_paths {
        if !outer.iter().any(|o| p.starts_with(o)) {
            outer.push(p);
        }
    }
    Ok(Interpreter {
        executable,
        description,
        sdk,
        read_paths: outer,
    })
}

/// The interpreter to use: `explicit`, else `SLUICE_PYTHON`, else `python3`
/// on the `PATH`.
pub fn choose(explicit: Option<&Path>) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SLUICE_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"))
}
