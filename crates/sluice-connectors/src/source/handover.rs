//! Handing a source's files from one set of shares to another, when a
//! split pipeline's vnodes move between nodes.
//!
//! Each share reads its files in path order, so one share's position says
//! how far each of its files was read: the files before the position's
//! file are done, that file is read up to the position, and the files after
//! it are unread (or as far as [`SourcePosition::ahead`] says, when the
//! share itself took files over). [`handover`] gathers that per file from
//! the positions the previous shares left (a node's last checkpoint, or its
//! final position once it gave the files up) and starts the new share
//! where they stopped:
//!
//! ```text
//!   before:  share A  a1 ✓  a2 ✓  a3 ▸row 40   a4 ·        (✓ done, ▸ partly, · unread)
//!            share B  b1 ✓  b2 ▸row 7   b3 ·
//!   after:   share C = {a2, a3, b2, b3}, in path order a2 a3 b2 b3
//!            position: a3 at row 40, ahead = {b2: row 7}; a2 is skipped
//! ```
//!
//! So the rows the previous shares read are not read again, and the rows
//! they did not read are read once, by the new share: exactly once overall,
//! provided the previous positions are final (the node that held them reads
//! no further) and every file of the new share was held by exactly one
//! previous share (checked here). A file that appeared in the directory
//! since and sorts before a previous share's position counts as read, as it
//! does when a single node resumes (see [`FileSourceReader::open_at`]), and
//! so does every file of a share that had finished, whenever it appeared.
//! Files read already may be removed (archived): only the files left are
//! looked at.
//!
//! [`FileSourceReader::open_at`]: super::FileSourceReader::open_at

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::files;
use super::{share_identity, FileProgress, FileShare, FileSourceConfig, SourcePosition};
use crate::error::{ConnectorError, Result};

/// A share that held files before a handover, and how far it read them.
#[derive(Debug, Clone)]
pub struct PreviousShare {
    /// Which files it held (`None`: every file, a run that was not split).
    pub share: Option<FileShare>,
    /// Where it stopped: the offset of its last checkpoint, or its final
    /// position (`None`: it read nothing).
    pub position: Option<SourcePosition>,
    /// Whether it had read all its files.
    pub finished: bool,
}

/// Where a share starts after a [`handover`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoverStart {
    /// The position to open the reader at
    /// ([`FileSourceReader::open_at`](super::FileSourceReader::open_at)).
    pub position: SourcePosition,
    /// Every file of the share was read already: the source is finished
    /// and the reader need not be opened.
    pub finished: bool,
}

/// Where `config`'s share starts when its files were held by `previous`
/// (see the module docs). Every file of `config`'s share must be held by
/// exactly one previous share, and each previous position must have been
/// read under its share; otherwise the handover is refused with
/// [`ConnectorError::InvalidPosition`], naming the file.
pub fn handover(config: &FileSourceConfig, previous: &[PreviousShare]) -> Result<HandoverStart> {
    let keyed = files::keyed_files(&config.path, config.base_dir.as_deref())?;
    let mut read: BTreeMap<&str, FileProgress> = BTreeMap::new();
    for p in previous {
        for (key, progress) in progress_of(config, p, &keyed)? {
            read.insert(key, progress);
        }
    }
    let holds = |share: &Option<FileShare>, key: &str| share.as_ref().is_none_or(|s| s.holds(key));
    let mine: Vec<&(PathBuf, String)> = keyed
        .iter()
        .filter(|(_, key)| holds(&config.share, key))
        .collect();
    for (file, key) in &mine {
        let holders = previous.iter().filter(|p| holds(&p.share, key)).count();
        if holders != 1 {
            let was = if holders == 0 {
                "no previous share held it, so nothing says whether it was read".to_string()
            } else {
                format!("{holders} previous shares held it, so it may have been read twice")
            };
            return Err(ConnectorError::InvalidPosition {
                file: file.clone(),
                message: format!("cannot hand file '{key}' over to this share: {was}"),
            });
        }
    }
    let share = share_identity(config);
    let Some(first) = mine
        .iter()
        .position(|(_, key)| read.get(key.as_str()) != Some(&FileProgress::Done))
    else {
        // Every file was read (or the share holds none).
        let last = mine.last();
        return Ok(HandoverStart {
            position: SourcePosition {
                file_index: mine.len().saturating_sub(1),
                file: last.map(|(f, _)| f.clone()).unwrap_or_default(),
                rows_consumed: 0,
                byte_offset: None,
                share,
                key: last.map(|(_, k)| k.clone()),
                ahead: BTreeMap::new(),
                done: true,
            },
            finished: true,
        });
    };
    let (file, key) = mine[first];
    let (rows_consumed, byte_offset) = match read.get(key.as_str()) {
        Some(FileProgress::Partial {
            rows_consumed,
            byte_offset,
        }) => (*rows_consumed, *byte_offset),
        _ => (0, None),
    };
    let ahead = mine[first + 1..]
        .iter()
        .filter_map(|(_, k)| read.get(k.as_str()).map(|p| (k.clone(), *p)))
        .collect();
    Ok(HandoverStart {
        position: SourcePosition {
            file_index: first,
            file: file.clone(),
            rows_consumed,
            byte_offset,
            share,
            key: Some(key.clone()),
            ahead,
            done: false,
        },
        finished: false,
    })
}

/// How far `p` read each of its files, by key (files it did not read are
/// left out). `keyed` is every file of the source, sorted.
fn progress_of<'k>(
    config: &FileSourceConfig,
    p: &PreviousShare,
    keyed: &'k [(PathBuf, String)],
) -> Result<Vec<(&'k str, FileProgress)>> {
    let held: Vec<&'k (PathBuf, String)> = keyed
        .iter()
        .filter(|(_, key)| p.share.as_ref().is_none_or(|s| s.holds(key)))
        .collect();
    let Some(pos) = &p.position else {
        // Finished without a position: its share held no file.
        return Ok(Vec::new());
    };
    let identity = p.share.as_ref().map(|s| s.identity().to_string());
    if pos.share != identity {
        let name = |s: &Option<String>| s.clone().unwrap_or_else(|| "every file".into());
        return Err(ConnectorError::InvalidPosition {
            file: pos.file.clone(),
            message: format!(
                "a previous share's position of '{}' was read under share '{}', not under '{}' as the handover says",
                crate::quote::bounded(&config.path),
                name(&pos.share),
                name(&identity)
            ),
        });
    }
    if p.finished || pos.done {
        return Ok(held
            .iter()
            .map(|(_, k)| (k.as_str(), FileProgress::Done))
            .collect());
    }
    if pos.file.as_os_str().is_empty() {
        // Its share held no file when it checkpointed.
        return Ok(Vec::new());
    }
    let Some(stopped_in) = &pos.key else {
        return progress_of_whole(config, pos, &held);
    };
    // By key, in the read order (paths compare by component): the previous
    // node's path to a file may differ from this node's, and files read
    // already may have been removed since (archived), which changes
    // nothing for the files left.
    let mut progress = Vec::new();
    for (_, key) in &held {
        let read = match Path::new(key).cmp(Path::new(stopped_in)) {
            Ordering::Less => Some(FileProgress::Done),
            Ordering::Equal => Some(FileProgress::Partial {
                rows_consumed: pos.rows_consumed,
                byte_offset: pos.byte_offset,
            }),
            Ordering::Greater => pos.ahead.get(key).copied(),
        };
        if let Some(read) = read {
            progress.push((key.as_str(), read));
        }
    }
    Ok(progress)
}

/// [`progress_of`] for a position of a run that was not split, which
/// names its file by path only (this node's, since it ran here).
fn progress_of_whole<'k>(
    config: &FileSourceConfig,
    pos: &SourcePosition,
    held: &[&'k (PathBuf, String)],
) -> Result<Vec<(&'k str, FileProgress)>> {
    let Some(at) = held.iter().position(|(f, _)| f == &pos.file) else {
        return Err(ConnectorError::InvalidPosition {
            file: pos.file.clone(),
            message: format!(
                "a previous share stopped in this file, which is not matched by '{}' any more",
                crate::quote::bounded(&config.path)
            ),
        });
    };
    let mut progress: Vec<(&'k str, FileProgress)> = held[..at]
        .iter()
        .map(|(_, k)| (k.as_str(), FileProgress::Done))
        .collect();
    progress.push((
        held[at].1.as_str(),
        FileProgress::Partial {
            rows_consumed: pos.rows_consumed,
            byte_offset: pos.byte_offset,
        },
    ));
    Ok(progress)
}
