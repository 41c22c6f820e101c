//! Turning the user's `path` option into the ordered list of files to read.

use std::path::{Path, PathBuf};

use glob::MatchOptions;

use super::share::FileShare;
use crate::error::{ConnectorError, Result};

/// Characters that make `path` a glob pattern rather than a literal path.
const GLOB_CHARS: [char; 3] = ['*', '?', '['];

/// The files a reader reads, in order, with their partition keys when the
/// reader reads a share (see [`FileShare`]).
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    pub files: Vec<PathBuf>,
    /// `keys[i]` is the partition key of `files[i]`; empty when the reader
    /// reads every file (no share).
    pub keys: Vec<String>,
}

/// Resolve `path` (a file or a glob, relative to `base_dir` if given) into
/// the sorted list of files to read; with a `share`, only the files it
/// holds (possibly none: another node reads them).
///
/// Sorting makes the read order — and therefore [`crate::SourcePosition`]'s
/// `file_index` — deterministic across runs. Hidden files are never matched
/// by a wildcard, which keeps the sink's in-progress temp files
/// (`.name.tmp-<pid>`) out of a source watching the same directory.
pub(crate) fn resolve_files(
    path: &str,
    base_dir: Option<&Path>,
    share: Option<&FileShare>,
) -> Result<Resolved> {
    let Some(share) = share else {
        return Ok(Resolved {
            files: resolve_all(path, base_dir)?,
            keys: Vec::new(),
        });
    };
    let keyed = keyed_files(path, base_dir)?;
    let all = keyed.len();
    let (files, keys) = keyed
        .into_iter()
        .filter(|(_, key)| share.holds(key))
        .unzip();
    let resolved = Resolved { files, keys };
    tracing::debug!(
        path,
        share = share.describe(),
        all,
        held = resolved.files.len(),
        "this node's share of the files"
    );
    Ok(resolved)
}

/// Every file `path` matches, sorted, with its partition key.
pub(crate) fn keyed_files(path: &str, base_dir: Option<&Path>) -> Result<Vec<(PathBuf, String)>> {
    let root = super::share::literal_root(path, base_dir, &GLOB_CHARS);
    resolve_all(path, base_dir)?
        .into_iter()
        .map(|f| {
            // Every match of the pattern is below its literal directory;
            // a file that is not would get a key that depends on how the
            // script was started, so it is refused rather than guessed.
            let key = super::share::partition_key(&root, &f).ok_or_else(|| {
                ConnectorError::invalid_option(
                    "path",
                    format!(
                        "'{}' matched '{}', which is not below the pattern's directory '{}', so it has no partition key for this node's share",
                        crate::quote::bounded(path),
                        f.display(),
                        root.display()
                    ),
                )
            })?;
            Ok((f, key))
        })
        .collect()
}

fn resolve_all(path: &str, base_dir: Option<&Path>) -> Result<Vec<PathBuf>> {
    if path.is_empty() {
        return Err(ConnectorError::invalid_option(
            "path",
            "path must not be empty",
        ));
    }
    let relative = Path::new(path).is_relative();
    if !path.contains(GLOB_CHARS) {
        let resolved = match base_dir {
            Some(base) if relative => base.join(path),
            _ => PathBuf::from(path),
        };
        return Ok(vec![resolved]);
    }

    let pattern = match base_dir {
        Some(base) if relative => {
            let base = base.to_str().ok_or_else(|| {
                ConnectorError::invalid_option(
                    "base_dir",
                    format!("'{}' is not valid UTF-8", base.display()),
                )
            })?;
            // The base directory is literal even if it contains glob
            // metacharacters.
            let escaped = glob::Pattern::escape(base);
            let sep = if escaped.ends_with('/') { "" } else { "/" };
            format!("{escaped}{sep}{path}")
        }
        _ => path.to_string(),
    };
    let options = MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: true,
    };
    let entries = glob::glob_with(&pattern, options).map_err(|e| {
        ConnectorError::invalid_option(
            "path",
            format!(
                "invalid glob pattern '{}': {e}",
                crate::quote::bounded(&pattern)
            ),
        )
    })?;
    let mut files = Vec::new();
    for entry in entries {
        match entry {
            Ok(p) if p.is_file() => files.push(p),
            Ok(_) => {}
            Err(e) => {
                let path = e.path().to_path_buf();
                return Err(ConnectorError::io(path, e.into()));
            }
        }
    }
    if files.is_empty() {
        return Err(ConnectorError::NoFiles { pattern });
    }
    files.sort();
    tracing::debug!(pattern = %pattern, files = files.len(), "resolved file source glob");
    Ok(files)
}
