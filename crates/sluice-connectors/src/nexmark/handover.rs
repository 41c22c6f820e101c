//! Handing a Nexmark stream's partitions from one set of shares to
//! another, when a split pipeline's vnodes move between nodes.
//!
//! A share generates its partitions (blocks of [`PARTITION_ROWS`] rows) in
//! row order, so one share's position says how far each of its partitions
//! was emitted: those before the position's partition in full, that one up
//! to the position, and those after it not at all (or as far as
//! [`NexmarkPosition::ahead`] says, when the share itself took partitions
//! over). [`handover`] gathers that per partition from the positions the
//! previous shares left and starts the new share where they stopped:
//!
//! ```text
//!   before:  share A holds partitions 0 2 4 …, stopped at row 2·1024+40
//!            share B holds partitions 1 3 5 …, stopped at row 3·1024+7
//!   after:   share C = {2, 3, 6}
//!            position: row 2·1024+40, ahead = {3: 7 rows}; 6 is untouched
//! ```
//!
//! Rows the previous shares emitted are not emitted again, and rows they
//! did not are emitted once, by the new share, each with the contents and
//! event time it has on one node: exactly once overall, provided the
//! previous positions are final and every partition of the new share that
//! any of them reached was held by exactly one of them (checked here).

use super::reader::NexmarkPosition;
use super::{NexmarkConfig, PARTITION_ROWS};
use crate::error::{ConnectorError, Result};
use crate::FileShare;

/// A share that held a Nexmark stream's partitions before a handover, and
/// how far it emitted them.
#[derive(Debug, Clone)]
pub struct PreviousNexmarkShare {
    /// Which partitions it held (`None`: the whole stream).
    pub share: Option<FileShare>,
    /// Its checkpointed offset, or its final one (`None`: it emitted
    /// nothing).
    pub offset: Option<String>,
    /// Whether it had emitted all its rows (a bounded stream).
    pub finished: bool,
}

/// The offset `cfg`'s share opens at
/// ([`NexmarkReader::open_at_offset`](super::NexmarkReader::open_at_offset))
/// when its partitions were held by `previous` (see the module docs).
///
/// Refused when a previous offset is unreadable, of another stream or
/// seed, or was emitted under another share than the one it is given
/// with, and when a partition of the new share that a previous share
/// reached was held by none of them or by several (whether its rows were
/// emitted would be unknown, or they may have been emitted twice).
pub fn handover(cfg: &NexmarkConfig, previous: &[PreviousNexmarkShare]) -> Result<String> {
    let total = cfg.total_rows();
    let mut reached = Vec::with_capacity(previous.len());
    // Partitions at and beyond `end` were reached by no previous share.
    let mut end = 0u64;
    for p in previous {
        let Some(offset) = &p.offset else {
            reached.push(None);
            continue;
        };
        let mut pos = NexmarkPosition::parse(cfg, offset)?;
        let identity = p.share.as_ref().map(|s| s.identity().to_string());
        if pos.share != identity {
            let name = |s: &Option<String>| s.clone().unwrap_or_else(|| "the whole stream".into());
            return Err(ConnectorError::invalid_option(
                "offset",
                format!(
                    "a previous share's offset of the {} stream was emitted under share '{}', not under '{}' as the handover says",
                    cfg.stream,
                    name(&pos.share),
                    name(&identity)
                ),
            ));
        }
        if p.finished {
            // Every row of its partitions; its position may have stopped
            // short of the end when it held none of the last ones.
            pos.produced = total.unwrap_or(pos.produced).max(pos.produced);
            pos.ahead.clear();
        }
        let last_ahead = pos.ahead.keys().next_back().map_or(0, |b| b + 1);
        end = end
            .max(pos.produced.div_ceil(PARTITION_ROWS))
            .max(last_ahead);
        reached.push(Some(pos));
    }
    let holds = |share: &Option<FileShare>, row: u64| {
        share
            .as_ref()
            .is_none_or(|s| s.holds(&super::partition_key(cfg.stream, row)))
    };
    let rows_of = |block: u64| {
        let start = block.saturating_mul(PARTITION_ROWS);
        let stop = start.saturating_add(PARTITION_ROWS);
        total.map_or(stop, |t| stop.min(t)).saturating_sub(start)
    };
    // The new share's partitions that were reached, in row order, with
    // the rows of each emitted before.
    let mut emitted: Vec<(u64, u64)> = Vec::new();
    for block in 0..end {
        let row = block.saturating_mul(PARTITION_ROWS);
        if !holds(&cfg.share, row) {
            continue;
        }
        let holders: Vec<usize> = (0..previous.len())
            .filter(|i| holds(&previous[*i].share, row))
            .collect();
        let [holder] = holders[..] else {
            let was = if holders.is_empty() {
                "no previous share held it, so nothing says whether its rows were emitted"
                    .to_string()
            } else {
                format!(
                    "{} previous shares held it, so its rows may have been emitted twice",
                    holders.len()
                )
            };
            return Err(ConnectorError::invalid_option(
                "offset",
                format!(
                    "cannot hand partition '{}' of the {} stream over to this share: {was}",
                    super::partition_key(cfg.stream, row),
                    cfg.stream
                ),
            ));
        };
        let len = rows_of(block);
        let rows = reached[holder]
            .as_ref()
            .map_or(0, |pos| pos.emitted_of(block, len));
        emitted.push((block, rows));
    }
    // The first partition not emitted in full is where the share starts;
    // after every reached one, the first row no previous share reached.
    let first = emitted
        .iter()
        .position(|(block, rows)| *rows < rows_of(*block));
    let (produced, ahead) = match first {
        Some(i) => {
            let (block, rows) = emitted[i];
            let ahead = emitted[i + 1..]
                .iter()
                .filter(|(_, rows)| *rows > 0)
                .copied()
                .collect();
            (block.saturating_mul(PARTITION_ROWS) + rows, ahead)
        }
        None => {
            let past = end.saturating_mul(PARTITION_ROWS);
            (total.map_or(past, |t| past.min(t)), Default::default())
        }
    };
    let pos = NexmarkPosition {
        stream: cfg.stream.name().to_string(),
        seed: cfg.seed,
        produced,
        share: cfg.share.as_ref().map(|s| s.identity().to_string()),
        ahead,
    };
    serde_json::to_string(&pos).map_err(|e| {
        ConnectorError::invalid_option("offset", format!("encoding a Nexmark offset: {e}"))
    })
}
