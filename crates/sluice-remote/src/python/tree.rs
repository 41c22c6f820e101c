//! A package directory's identity: the SHA-256 of every file, by path
//! relative to the package root, in sorted order.
//!
//! Relative paths (never the absolute installation path) make an identical
//! package keep its identity when it moves. Bytecode caches are skipped:
//! Python writes them itself, and they say nothing the sources do not.
//! Budgets on the number of files and their total size stop a mistaken
//! `path = '/'` from hashing the whole disk.

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::RemoteError;

/// Most files a package may have.
pub const MAX_FILES: usize = 10_000;
/// Most bytes a package's files may hold in all.
pub const MAX_BYTES: u64 = 256 * 1024 * 1024;

fn skipped(name: &str) -> bool {
    name == "__pycache__" || name.ends_with(".pyc") || name == ".git"
}

/// Relative path (with `/` separators) to hex SHA-256, for every regular
/// file under `root`. Symbolic links are refused: inside the sandbox they
/// could point anywhere.
pub fn digest_tree(root: &Path) -> Result<BTreeMap<String, String>, RemoteError> {
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| RemoteError::io(&dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RemoteError::io(&dir, e))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if skipped(&name) {
                continue;
            }
            let kind = entry.file_type().map_err(|e| RemoteError::io(&path, e))?;
            let relative = path
                .strip_prefix(root)
                .map_err(|_| RemoteError::package(root, "a file is outside the package root"))?
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            if kind.is_symlink() {
                return Err(RemoteError::package(
                    root,
                    format!(
                        "'{relative}' is a symbolic link; a package must hold its files itself"
                    ),
                ));
            }
            if kind.is_dir() {
                pending.push(path);
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            if files.len() >= MAX_FILES {
                return Err(RemoteError::package(
                    root,
                    format!("it holds more than {MAX_FILES} files"),
                ));
            }
            let bytes = std::fs::read(&path).map_err(|e| RemoteError::io(&path, e))?;
            total += bytes.len() as u64;
            if total > MAX_BYTES {
                return Err(RemoteError::package(
                    root,
                    format!("its files hold more than {MAX_BYTES} bytes"),
                ));
            }
            let digest: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            files.insert(relative, digest);
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(p, text).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn moving_keeps_the_digest_and_changing_a_file_changes_it() {
        let a = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let b = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for root in [a.path(), b.path()] {
            write(root, "fraud.py", "class D: pass\n");
            write(root, "lib/util.py", "X = 1\n");
            write(root, "__pycache__/fraud.cpython-311.pyc", "junk");
        }
        write(
            b.path(),
            "lib/__pycache__/util.cpython-311.pyc",
            "other junk",
        );
        let da = digest_tree(a.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(da.keys().collect::<Vec<_>>(), ["fraud.py", "lib/util.py"]);
        assert_eq!(da, digest_tree(b.path()).unwrap_or_else(|e| panic!("{e}")));
        write(b.path(), "lib/util.py", "X = 2\n");
        let db = digest_tree(b.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(da.get("lib/util.py"), db.get("lib/util.py"));
        assert_eq!(da.get("fraud.py"), db.get("fraud.py"));
    }

    #[test]
    fn a_symbolic_link_is_refused_by_name() {
        let a = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        write(a.path(), "fraud.py", "");
        std::os::unix::fs::symlink("/etc/passwd", a.path().join("secret"))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = digest_tree(a.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("'secret' is a symbolic link"), "{e}");
    }
}
