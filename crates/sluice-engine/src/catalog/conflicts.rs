//! Refusing, at `CREATE`, declarations that would destroy or mix data.
//!
//! A sink replaces its file atomically when it commits, so a second sink on
//! the same file silently discards the first one's output, and a sink on a
//! source's input file replaces the input. A `LATE DATA TO` stream that is
//! the source itself (or any existing relation) would mix late rows into
//! what its readers take for on-time rows. Each is refused with both names.
//!
//! Paths are compared after base-directory resolution, made absolute and
//! lexically normalized, with the longest existing ancestor canonicalized
//! (so `./out.csv`, `sub/../out.csv` and a symlinked folder all compare
//! equal to the file they end up writing). A source's glob pattern is
//! matched against the sink's path, so a sink cannot write a file that the
//! source would pick up, whether it exists yet or not.

use std::path::{Component, Path, PathBuf};

use glob::{MatchOptions, Pattern};

use super::{Catalog, SinkConnector, SourceConnector, SourceDef};
use crate::error::{EngineError, Result};

/// Characters that make a source `path` a glob (as the file source reads it).
const GLOB_CHARS: [char; 3] = ['*', '?', '['];

/// How the file source matches a glob (hidden files never match).
const MATCH: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: true,
};

/// The files one file source reads: a literal path or a glob pattern.
enum SourceFiles {
    Literal(PathBuf),
    Glob(Pattern, String),
}

impl SourceFiles {
    fn of(def: &SourceDef) -> Option<Self> {
        let SourceConnector::File(cfg) = &def.connector else {
            return None;
        };
        let path = Path::new(&cfg.path);
        let joined = match &cfg.base_dir {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_path_buf(),
        };
        if !cfg.path.contains(GLOB_CHARS) {
            return Some(Self::Literal(normalize(&joined)));
        }
        // Normalize the literal folders in front of the first wildcard, keep
        // the wildcard part as written.
        let mut prefix = PathBuf::new();
        let mut rest = Vec::new();
        for c in joined.components() {
            let text = c.as_os_str().to_string_lossy();
            if rest.is_empty() && !text.contains(GLOB_CHARS) {
                prefix.push(c);
            } else {
                rest.push(text.into_owned());
            }
        }
        let prefix = normalize(&prefix);
        let prefix = Pattern::escape(&prefix.to_string_lossy());
        let sep = if prefix.ends_with('/') { "" } else { "/" };
        let text = format!("{prefix}{sep}{}", rest.join("/"));
        // An invalid pattern was already refused when the source was created.
        Pattern::new(&text).ok().map(|p| Self::Glob(p, text))
    }

    fn covers(&self, file: &Path) -> bool {
        match self {
            Self::Literal(p) => p == file,
            Self::Glob(p, _) => p.matches_path_with(file, MATCH),
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Literal(p) => format!("reads '{}'", p.display()),
            Self::Glob(_, text) => format!("reads the files matching '{text}'"),
        }
    }
}

/// `path` made absolute, without `.` and `..`, with symlinks in its longest
/// existing ancestor resolved.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut lexical = PathBuf::new();
    for c in absolute.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                lexical.pop();
            }
            other => lexical.push(other),
        }
    }
    let mut existing = lexical.clone();
    let mut missing = Vec::new();
    loop {
        if let Ok(mut real) = existing.canonicalize() {
            for part in missing.iter().rev() {
                real.push(part);
            }
            return real;
        }
        match existing.file_name() {
            Some(name) => {
                missing.push(name.to_os_string());
                existing.pop();
            }
            None => return lexical,
        }
    }
}

impl Catalog {
    /// Refuse sink `sink` writing `path` (base-dir resolved) when another
    /// sink writes the same file or a source reads it.
    pub fn check_sink_path(&self, sink: &str, path: &Path) -> Result<()> {
        let target = normalize(path);
        for other in &self.sinks {
            let SinkConnector::File { path: p, .. } = &other.connector;
            if normalize(p) == target {
                return Err(EngineError::Conflict(format!(
                    "sink '{sink}' would write '{}', which sink '{}' already writes; each sink needs its own file",
                    target.display(),
                    other.name
                )));
            }
        }
        for source in &self.sources {
            if let Some(files) = SourceFiles::of(source) {
                if files.covers(&target) {
                    return Err(EngineError::Conflict(format!(
                        "sink '{sink}' would write '{}', which source '{}' {}; a sink must not replace a source's input",
                        target.display(),
                        source.name,
                        files.describe()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Refuse a new file source that reads a file an existing sink writes.
    pub fn check_source_files(&self, source: &SourceDef) -> Result<()> {
        let Some(files) = SourceFiles::of(source) else {
            return Ok(());
        };
        for sink in &self.sinks {
            let SinkConnector::File { path, .. } = &sink.connector;
            let target = normalize(path);
            if files.covers(&target) {
                return Err(EngineError::Conflict(format!(
                    "source '{}' {}, which includes '{}' that sink '{}' writes; a source must not read a file a sink replaces",
                    source.name,
                    files.describe(),
                    target.display(),
                    sink.name
                )));
            }
        }
        Ok(())
    }

    /// Refuse `LATE DATA TO late` on source `source` unless `late` is a new
    /// name: the source itself or an existing relation would mix late rows
    /// into rows its readers take for on-time ones.
    pub fn check_late_target(&self, source: &str, late: &str) -> Result<()> {
        if late == source {
            return Err(EngineError::Conflict(format!(
                "source '{source}': LATE DATA TO '{late}' names the source itself; it must name a new stream"
            )));
        }
        match self.kind_of(late) {
            Some(kind) => Err(EngineError::Conflict(format!(
                "source '{source}': LATE DATA TO '{late}' names an existing {kind}; it must name a new stream"
            ))),
            None => Ok(()),
        }
    }
}
