//! A node whose vnodes changed: its file and Nexmark sources start where
//! the nodes that held its vnodes before stopped.
//!
//! When vnodes move between the nodes of a split (a node joins or leaves),
//! a node's share of every file source changes. Its own checkpointed
//! positions describe its old share, and the files it gained were read, in
//! part, by other nodes. A [`SplitHandover`] says who held what before:
//! this node's old vnodes (its own checkpoint has their positions) and, for
//! every other node that held vnodes this node now holds, its vnodes and
//! the positions of its last committed checkpoint ([`SourceProgress`]). At
//! recovery, or at the start when this node has no checkpoint, each file
//! source starts from all of them (`sluice_connectors::handover`), and each
//! Nexmark source likewise from the blocks of rows they generated
//! (`sluice_connectors::nexmark_handover`): rows they read are not read
//! again, rows they did not read are read here.
//!
//! That is exactly once only if the positions are final: the nodes that
//! held the vnodes read no further (they stopped, or gave the vnodes up at
//! a checkpoint), and every vnode this node now holds had exactly one
//! previous owner, or none (a vnode nobody held was never read). Both are
//! the caller's to ensure (the cluster's assignment table, one owner per
//! generation); a file held by two previous shares, or by none when the
//! handover names no owner for its vnode, is refused.

use std::collections::BTreeMap;

use sluice_connectors::{
    handover, nexmark_handover, BatchReader, FileShare, FileSourceConfig, FileSourceReader,
    HandoverStart, NexmarkConfig, NexmarkReader, PreviousNexmarkShare, PreviousShare,
    SourcePosition,
};

use super::placement_share;
use crate::error::{EngineError, Result};
use crate::process::placement::VnodePlacement;

/// How far a node read one source, as its last committed checkpoint says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceProgress {
    /// The checkpointed offset (`None`: the source had not read a row).
    pub offset: Option<String>,
    /// Whether the source had read all its input.
    pub finished: bool,
}

/// Another node that held vnodes before a handover, and what it had read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousNode {
    /// Its name.
    pub node: String,
    /// The vnodes it held.
    pub placement: VnodePlacement,
    /// What it had read, by source name (a source left out had read
    /// nothing: the node never checkpointed it).
    pub sources: BTreeMap<String, SourceProgress>,
}

/// Who held this node's vnodes before they moved (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitHandover {
    /// The vnodes this node held in the previous assignment (its own
    /// checkpoint has their positions); `None` for a node that held none
    /// there (a new node, or one that was away): positions its own
    /// checkpoint may hold are of an older assignment and are ignored.
    pub own_before: Option<VnodePlacement>,
    /// The other nodes that held vnodes this node holds now.
    pub others: Vec<PreviousNode>,
    /// The generation of the previous assignment
    /// ([`SourceSplit::with_generation`](super::SourceSplit::with_generation);
    /// 0 where generations are not counted).
    pub generation: u64,
}

/// Which node a handover starts, and in which assignment generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitAt {
    /// The node's name.
    pub node: String,
    /// Its assignment generation (0: not counted).
    pub generation: u64,
}

impl SplitAt {
    /// Where `split` is.
    pub fn of(split: &super::SourceSplit) -> Self {
        Self {
            node: split.node().to_string(),
            generation: split.generation(),
        }
    }
}

impl SplitHandover {
    /// Where file source `source` (configured with this node's new share)
    /// starts, given this node's own checkpointed progress of it (`own`,
    /// `None` without a checkpoint).
    pub fn start(
        &self,
        at: &SplitAt,
        source: &str,
        config: &FileSourceConfig,
        own: Option<&SourceProgress>,
    ) -> Result<HandoverStart> {
        if let Some(start) = self.resumed(at, config, own)? {
            return Ok(start);
        }
        let previous = self
            .previous_shares(at, source, own)
            .into_iter()
            .map(|(share, progress)| {
                Ok(PreviousShare {
                    share: Some(share),
                    position: parse(progress.and_then(|p| p.offset.as_deref()))?,
                    finished: progress.is_some_and(|p| p.finished),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        handover(config, &previous)
            .map_err(|e| EngineError::from(e).context("handing its files over".to_string()))
    }

    /// Every share that held this node's vnodes in the previous
    /// assignment, with how far it read `source` (`None`: it read
    /// nothing): this node's own share of then, whose progress is `own`,
    /// and the other nodes'.
    fn previous_shares<'a>(
        &'a self,
        at: &SplitAt,
        source: &str,
        own: Option<&'a SourceProgress>,
    ) -> Vec<(FileShare, Option<&'a SourceProgress>)> {
        let mut previous = Vec::with_capacity(self.others.len() + 1);
        // A node that held no vnodes in the previous assignment has, at
        // most, positions of an older one: another node read on from them.
        if let Some(placement) = &self.own_before {
            previous.push((placement_share(&at.node, placement, self.generation), own));
        }
        for other in &self.others {
            let share = placement_share(&other.node, &other.placement, self.generation);
            previous.push((share, other.sources.get(source)));
        }
        previous
    }

    /// This node's own position, when it was checkpointed under its
    /// current share after the handover (the node took its vnodes over,
    /// then stopped, and is started again with the same handover): it
    /// resumes from there. Without generations (0), a share's identity
    /// names only its vnodes, so that holds only when the node held the
    /// same vnodes in the previous assignment too; with them, the identity
    /// names this assignment's generation.
    fn resumed(
        &self,
        at: &SplitAt,
        config: &FileSourceConfig,
        own: Option<&SourceProgress>,
    ) -> Result<Option<HandoverStart>> {
        let (Some(share), Some(own)) = (&config.share, own) else {
            return Ok(None);
        };
        let Some(position) = parse(own.offset.as_deref())? else {
            return Ok(None);
        };
        if !self.is_current(at, share, position.share.as_deref()) {
            return Ok(None);
        }
        Ok(Some(HandoverStart {
            position,
            finished: own.finished,
        }))
    }

    /// Whether a position of this node's, read under share `read_under`,
    /// is of its current `share` in this assignment (see
    /// [`Self::resumed`]).
    fn is_current(&self, at: &SplitAt, share: &FileShare, read_under: Option<&str>) -> bool {
        let current = share.identity();
        let same_before = self
            .own_before
            .as_ref()
            .is_some_and(|p| placement_share(&at.node, p, self.generation).identity() == current);
        read_under == Some(current) && (at.generation > 0 || same_before)
    }

    /// A reader of `config`'s share from [`SplitHandover::start`]: one
    /// that reads nothing, with the handover's offset, when every file was
    /// read already.
    ///
    /// Also says whether the reader resumes this node's own position of
    /// its current share (a restart within the assignment), where the
    /// source's checkpointed watermark still holds. After a handover it
    /// does not: the files this node gained may hold older rows than those
    /// it read before, and they would all be late.
    pub fn open(
        &self,
        at: &SplitAt,
        source: &str,
        config: &FileSourceConfig,
        own: Option<&SourceProgress>,
    ) -> Result<(Box<dyn BatchReader>, bool)> {
        let resumed = self.resumed(at, config, own)?.is_some();
        // A share whose files were all read starts at a `done` position,
        // where the reader reads nothing.
        let start = self.start(at, source, config, own)?;
        let reader = FileSourceReader::open_at(config.clone(), &start.position)?;
        Ok((Box::new(reader), resumed))
    }
}

impl SplitHandover {
    /// A reader of Nexmark source `source` under `config`'s share (this
    /// node's new one), as [`SplitHandover::open`] is for a file source:
    /// from this node's own offset when it is of its current share, else
    /// from where the previous holders of its blocks stopped
    /// (`sluice_connectors::nexmark_handover`). Also says whether it
    /// resumes this node's own offset.
    pub fn open_nexmark(
        &self,
        at: &SplitAt,
        source: &str,
        config: &NexmarkConfig,
        own: Option<&SourceProgress>,
    ) -> Result<(Box<dyn BatchReader>, bool)> {
        let own_offset = own.and_then(|o| o.offset.as_deref());
        if let (Some(share), Some(offset)) = (&config.share, own_offset) {
            let read_under = NexmarkReader::share_of_offset(config, offset)?;
            if self.is_current(at, share, read_under.as_deref()) {
                let reader = NexmarkReader::open_at_offset(config.clone(), offset)?;
                return Ok((Box::new(reader), true));
            }
        }
        let previous: Vec<PreviousNexmarkShare> = self
            .previous_shares(at, source, own)
            .into_iter()
            .map(|(share, progress)| PreviousNexmarkShare {
                share: Some(share),
                offset: progress.and_then(|p| p.offset.clone()),
                finished: progress.is_some_and(|p| p.finished),
            })
            .collect();
        let offset = nexmark_handover(config, &previous).map_err(|e| {
            EngineError::from(e).context("handing its blocks of rows over".to_string())
        })?;
        let reader = NexmarkReader::open_at_offset(config.clone(), &offset)?;
        Ok((Box::new(reader), false))
    }
}

fn parse(offset: Option<&str>) -> Result<Option<SourcePosition>> {
    offset
        .map(|o| SourcePosition::from_offset(o).map_err(EngineError::from))
        .transpose()
}
