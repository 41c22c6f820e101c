//! A node's share of a file source, when a pipeline's sources are split
//! across the nodes of a cluster.
//!
//! Every node resolves the same `path` to the same files; each reads only
//! those its share holds. The share is decided per file from the file's
//! *partition key*: its path below the pattern's literal directory (the
//! components before the first one with a wildcard, or a literal path's
//! parent), with `/` between components. The key does not depend on where
//! a host mounts the data or which directory the script was run from, only
//! on the layout below the pattern's root, so every node that sees the same
//! files computes the same keys. Which keys a node holds is the caller's
//! (the engine maps a key to a vnode and asks its placement).

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// Which files of a source this node reads (see the module docs).
#[derive(Clone)]
pub struct FileShare {
    holds: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    identity: Arc<str>,
    describe: Arc<str>,
}

impl FileShare {
    /// A share holding the files whose partition key `holds` accepts.
    /// `identity` names exactly which keys it holds (two shares with one
    /// identity hold the same files): a reader's checkpointed position
    /// records it, and resuming under another share is refused, since a
    /// position in one share's file list means nothing in another's.
    /// `describe` names the share for people (for example "node n1: 85 of
    /// 256 vnodes").
    pub fn new(
        identity: impl Into<Arc<str>>,
        describe: impl Into<Arc<str>>,
        holds: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            holds: Arc::new(holds),
            identity: identity.into(),
            describe: describe.into(),
        }
    }

    /// Whether this share holds the file with partition key `key`.
    pub fn holds(&self, key: &str) -> bool {
        (self.holds)(key)
    }

    /// Which keys the share holds, exactly (see [`FileShare::new`]).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The share's description.
    pub fn describe(&self) -> &str {
        &self.describe
    }
}

impl std::fmt::Debug for FileShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("FileShare").field(&self.describe).finish()
    }
}

/// The directory a pattern's partition keys are relative to: `path`'s
/// components before the first one with a wildcard (a literal path's
/// parent), below `base_dir` when `path` is relative.
pub(crate) fn literal_root(path: &str, base_dir: Option<&Path>, wildcards: &[char]) -> PathBuf {
    let pattern = Path::new(path);
    let mut root = PathBuf::new();
    let mut literal = true;
    for c in pattern.components() {
        if c.as_os_str().to_string_lossy().contains(wildcards) {
            literal = false;
            break;
        }
        root.push(c);
    }
    if literal {
        root.pop();
    }
    match base_dir {
        Some(base) if pattern.is_relative() => base.join(root),
        _ => root,
    }
}

/// `path` without `.` components (glob drops a leading `./` from what it
/// matches, so a root of `./in` must compare as `in`).
fn without_cur_dir(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// The partition key of `file` below `root` (see the module docs); `None`
/// when the file is not below it.
pub(crate) fn partition_key(root: &Path, file: &Path) -> Option<String> {
    let file = without_cur_dir(file);
    let below = file.strip_prefix(without_cur_dir(root)).ok()?;
    let parts: Vec<String> = below
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WILD: [char; 3] = ['*', '?', '['];

    #[test]
    fn keys_are_relative_to_the_patterns_literal_directory() {
        let cases = [
            ("/data/in/*.csv", None, "/data/in/a.csv", "a.csv"),
            (
                "/data/in/*/x.csv",
                None,
                "/data/in/2024/x.csv",
                "2024/x.csv",
            ),
            ("/data/in/a.csv", None, "/data/in/a.csv", "a.csv"),
            ("in/*.csv", Some("/srv/job"), "/srv/job/in/b.csv", "b.csv"),
            (
                "./in/*.csv",
                Some("/srv/job"),
                "/srv/job/./in/b.csv",
                "b.csv",
            ),
            ("*.csv", Some("/srv/job"), "/srv/job/c.csv", "c.csv"),
            ("in/f?.csv", None, "in/f1.csv", "f1.csv"),
            // The mount point does not matter, only the layout below the root.
            ("/mnt/other/in/*.csv", None, "/mnt/other/in/a.csv", "a.csv"),
            // Nor the directory the script was run from: glob drops the
            // `./` of a base of `.` from what it matches.
            ("in/*.csv", Some("."), "in/a.csv", "a.csv"),
            ("../data/*.csv", Some("."), "../data/a.csv", "a.csv"),
            (
                "../data/*.csv",
                Some("/srv/job"),
                "/srv/job/../data/a.csv",
                "a.csv",
            ),
            ("in/**/*.csv", Some("."), "in/2024/a.csv", "2024/a.csv"),
        ];
        let root = literal_root("in/*.csv", Some(Path::new("/a")), &WILD);
        assert_eq!(partition_key(&root, Path::new("/b/in/x.csv")), None);
        for (path, base, file, key) in cases {
            let root = literal_root(path, base.map(Path::new), &WILD);
            assert_eq!(
                partition_key(&root, Path::new(file)).as_deref(),
                Some(key),
                "{path} {file}"
            );
        }
    }

    #[test]
    fn a_share_answers_through_its_predicate() {
        let share = FileShare::new("a*", "keys starting with a", |k| k.starts_with('a'));
        assert!(share.holds("a.csv"));
        assert!(!share.holds("b.csv"));
        assert_eq!(format!("{share:?}"), "FileShare(\"keys starting with a\")");
    }
}
