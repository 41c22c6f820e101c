//! Changing the member list of a static split (`--split`): scaling it out
//! or in between runs.
//!
//! The list is recorded in etcd by generation (`sluice_cluster::
//! split_record`). A node started with the recorded list runs that
//! generation. A node started with another list waits until no member of
//! the recorded list is live (at most three leases), reads where each one's
//! last checkpoint stopped, and records the new list as the next
//! generation with those positions. Every node of the new list then starts
//! its file sources where the old holders of its vnodes stopped
//! (`DatabaseBuilder::split_handover`), and a node started again within a
//! generation resumes from its own checkpoints of it.
//!
//! A shuffled split (`--shuffle`) also records the generation's shuffle
//! list and the id of the old generation's last cut (its checkpoints are
//! cuts the leader committed for every node, read through
//! `CommittedCuts`). Each node's keyed operators start from the keys of
//! its vnodes in that cut ([`moved_state`]), and a dropped node runs once
//! without the shuffle (`split::publish_dropped`).
//!
//! The old members may also be asked to change while they run (`sluice
//! cluster rescale`, `sluice_cluster::split_rescale`): each stops once it
//! has a checkpoint of its generation (a shuffled split's node at once,
//! see [`may_stop_for_change`]) and starts again with the new list,
//! and a node started with it waits for them as long as the request
//! stands (instead of three leases).
//!
//! Refused, by name: a change while an old member stays live, and a
//! change from a generation one of whose members never checkpointed in it
//! (its vnodes' positions would be those of the generation before, which
//! the other members' positions of this one may overlap). A generation no
//! member checkpointed in changed nothing, and a change from it starts
//! from the generation before it. A member dropped
//! from the list should be stopped cleanly (SIGTERM: its last checkpoint's
//! epoch is published then); one killed right after a checkpoint leaves
//! that epoch's rows staged in its sink directory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::split::{MovedState, PreviousNode, SourceProgress, SplitHandover, VnodePlacement};
use sluice::CommitAuthority;
use sluice_cluster::split_record::{
    self, PreviousSplit, RecordedProgress, SplitCommitRecord, SplitRecord,
};
use sluice_cluster::split_rescale;
use sluice_cluster::status::{self, Client};
use sluice_cluster::vnodes::VnodeCount;
use sluice_cluster::{ClusterKeys, CommittedCuts};

use crate::error::CliError;
use crate::split_members::{node_store, share_of};

/// What a node runs in the split's current generation.
pub(crate) enum Part {
    /// Its share of the listed members' vnodes.
    Member,
    /// None: a node of the previous list that the current one dropped,
    /// started to publish what its last checkpoint committed (its sinks'
    /// last epoch, when it was killed before publishing it) and leave.
    Dropped,
}

/// [`settle`] for a listed node; for one that `members` does not list, the
/// current record if it dropped the node (else refused).
pub(crate) async fn settle_part(
    client: &Client,
    keys: &ClusterKeys,
    (list, members, node): (&str, &[String], &str),
    store: &str,
    (lease_ttl, shuffle): (Duration, Option<&str>),
) -> Result<(SplitRecord, i64, Part), CliError> {
    if members.iter().any(|m| m == node) {
        let (record, revision) = settle(client, keys, members, store, (lease_ttl, shuffle)).await?;
        return Ok((record, revision, Part::Member));
    }
    // Started with the new list while the split still has the old one:
    // the listed nodes record the new list once the old ones (this one
    // among them) stopped, which takes up to three leases.
    let waited = Instant::now();
    loop {
        let (record, revision) = split_record::read(client, keys).await?;
        match record {
            Some(r)
                if r.members == members
                    && r.previous
                        .as_ref()
                        .is_some_and(|p| p.members.iter().any(|m| m == node)) =>
            {
                return Ok((r, revision, Part::Dropped));
            }
            // (As long as it takes while a rescale to this list is asked
            // for: the old members stop as each has a checkpoint.)
            Some(r)
                if r.members.iter().any(|m| m == node)
                    && (waited.elapsed() < lease_ttl * 6
                        || requested(client, keys, &r, members).await?) =>
            {
                tracing::info!(
                    generation = r.generation,
                    "waiting for the split's new list"
                );
                tokio::time::sleep(ASK_AGAIN).await;
            }
            _ => return Err(crate::split_members::not_listed(list, node)),
        }
    }
}

/// `sluice cluster rescale`: ask the nodes of the split's current
/// generation to start again with `list` (and, for a shuffled split, the
/// shuffle addresses `shuffle`); what was asked, in a line.
pub(crate) async fn request_rescale(
    endpoints: &[String],
    cluster_id: &str,
    list: &str,
    shuffle: Option<&str>,
) -> Result<String, CliError> {
    let members = crate::split_members::parse_list(list)?;
    for member in &members {
        sluice_cluster::keys::NodeId::new(member)?;
    }
    let client = status::connect(endpoints).await?;
    let keys = ClusterKeys::new(cluster_id)?;
    let (current, split_revision) = split_record::read(&client, &keys).await?;
    let Some(current) = current else {
        return Err(CliError::usage(format!(
            "cluster '{cluster_id}' runs no split (--split): there is no member list to change"
        )));
    };
    if current.members == members {
        return Err(CliError::usage(format!(
            "--split {}: generation {} of the split already runs with this list",
            members.join(","),
            current.generation
        )));
    }
    let shuffle = match (&current.shuffle, shuffle) {
        (Some(_), Some(spec)) => Some(crate::split_shuffle::parse(spec, &members)?.canonical()),
        (Some(_), None) => {
            return Err(CliError::usage(format!(
                "the split of generation {} runs with --shuffle: give --shuffle with an address for each node of --split {}",
                current.generation,
                members.join(",")
            )))
        }
        (None, Some(_)) => {
            return Err(CliError::usage(format!(
                "--shuffle: the split of generation {} runs without one (option shuffle), and a rescale keeps that",
                current.generation
            )))
        }
        (None, None) => None,
    };
    let (asked, request_revision) = split_rescale::read_any(&client, &keys).await?;
    if let Some(asked) = asked.filter(|a| a.from_generation == current.generation) {
        return Err(CliError::usage(format!(
            "a change of generation {} ({}) to {} is already requested; its nodes carry it out \
             (a shuffled split's at once, a row-by-row split's once each has a checkpoint of the \
             generation; sluice cluster status shows it)",
            current.generation,
            current.members.join(","),
            asked.members.join(",")
        )));
    }
    let request = split_rescale::RescaleRequest {
        from_generation: current.generation,
        members: members.clone(),
        shuffle,
    };
    let revisions = (split_revision, request_revision);
    if !split_rescale::request(&client, &keys, &request, revisions).await? {
        return Err(CliError::usage(format!(
            "the split's list or its rescale request changed while --split {} was asked for; \
             see sluice cluster status, and ask again",
            members.join(",")
        )));
    }
    Ok(format!(
        "requested: the nodes of generation {} ({}) start again with {}",
        current.generation,
        current.members.join(","),
        members.join(",")
    ))
}

/// The rescale that changed the split from `members` to its current
/// list, if one did: a node started again with the list it was started
/// with before (by a supervisor, say) runs with the current one instead
/// of asking to change the list back.
pub(crate) async fn carried_out(
    client: &Client,
    keys: &ClusterKeys,
    members: &[String],
) -> Result<Option<split_rescale::RescaleRequest>, CliError> {
    let Some(current) = split_record::read(client, keys).await?.0 else {
        return Ok(None);
    };
    let from_mine = current
        .previous
        .as_ref()
        .is_some_and(|p| p.members == members);
    if current.members == members || !from_mine {
        return Ok(None);
    }
    let (asked, _) = split_rescale::read_any(client, keys).await?;
    Ok(asked
        .filter(|a| a.from_generation + 1 == current.generation && a.members == current.members))
}

/// `sluice cluster status`'s line on a split (`None` without one): its
/// generation and list, whether rows shuffle, and a pending request to
/// change the list.
pub(crate) async fn status_line(
    endpoints: &[String],
    cluster_id: &str,
) -> Result<Option<String>, CliError> {
    let client = status::connect(endpoints).await?;
    let keys = ClusterKeys::new(cluster_id)?;
    let Some(record) = split_record::read(&client, &keys).await?.0 else {
        return Ok(None);
    };
    let shuffled = if record.shuffle.is_some() {
        " (shuffled)"
    } else {
        ""
    };
    let asked = match split_rescale::read(&client, &keys, record.generation).await? {
        Some(q) => format!("; rescale to {} requested", q.members.join(",")),
        None => String::new(),
    };
    Ok(Some(format!(
        "split generation {}: {}{shuffled}{asked}",
        record.generation,
        record.members.join(",")
    )))
}

/// Whether a change of `record`'s generation to `members` is asked for.
async fn requested(
    client: &Client,
    keys: &ClusterKeys,
    record: &SplitRecord,
    members: &[String],
) -> Result<bool, CliError> {
    Ok(split_rescale::read(client, keys, record.generation)
        .await?
        .is_some_and(|q| q.members == members))
}

/// How often a node waiting for the old members to stop asks again.
const ASK_AGAIN: Duration = Duration::from_millis(500);

/// The split's record for `members`, and its etcd revision: the recorded
/// one when its list is `members`, else the next generation, recorded here
/// (see the module docs). `shuffle`: the canonical `--shuffle` list of a
/// split whose keyed rows cross between its nodes, whose checkpoints are
/// cuts its leader committed for every node, not each node's own; every
/// node of a generation must give the same.
pub(crate) async fn settle(
    client: &Client,
    keys: &ClusterKeys,
    members: &[String],
    store: &str,
    (lease_ttl, shuffle): (Duration, Option<&str>),
) -> Result<(SplitRecord, i64), CliError> {
    let shuffled = shuffle.is_some();
    let waited = Instant::now();
    loop {
        let (current, revision) = split_record::read(client, keys).await?;
        let (next, absent) = match current {
            Some(r) if r.members == members && r.shuffle.as_deref() != shuffle => {
                return Err(CliError::usage(format!(
                    "--shuffle '{}' differs from the list generation {} of this split runs with \
                     ('{}'): every node of a split is given the same shuffle list (option shuffle)",
                    shuffle.unwrap_or("off"),
                    r.generation,
                    r.shuffle.as_deref().unwrap_or("off")
                )));
            }
            Some(r) if r.members == members => return Ok((r, revision)),
            None => {
                let first = SplitRecord {
                    generation: 1,
                    members: members.to_vec(),
                    previous: None,
                    shuffle: shuffle.map(str::to_string),
                };
                (first, Vec::new())
            }
            Some(r) => {
                let live: Vec<String> = status::read(client, keys)
                    .await?
                    .members
                    .into_iter()
                    .map(|m| m.node)
                    .filter(|m| r.members.contains(m))
                    .collect();
                if !live.is_empty() {
                    // Asked to change to this list (`sluice cluster
                    // rescale`): the old members stop as each has a
                    // checkpoint of their generation, however long that
                    // takes.
                    if waited.elapsed() > lease_ttl * 3
                        && !requested(client, keys, &r, members).await?
                    {
                        let verb = if live.len() == 1 { "is" } else { "are" };
                        return Err(CliError::usage(format!(
                            "--split {} would change the split of generation {} ({}), but {} {verb} \
                             still running; stop every node of the split before starting it with \
                             another list, or ask them to change it (sluice cluster rescale)",
                            members.join(","),
                            r.generation,
                            r.members.join(","),
                            live.join(", ")
                        )));
                    }
                    tracing::warn!(?live, "waiting for the split's old members to stop");
                    tokio::time::sleep(ASK_AGAIN).await;
                    continue;
                }
                let previous = stopped_at(client, keys, &r, (store, shuffled)).await?;
                let next = SplitRecord {
                    generation: r.generation + 1,
                    members: members.to_vec(),
                    previous: Some(previous),
                    shuffle: shuffle.map(str::to_string),
                };
                (next, r.members)
            }
        };
        if let Some(revision) =
            split_record::replace(client, keys, &next, revision, &absent).await?
        {
            tracing::info!(
                generation = next.generation,
                members = %next.members.join(","),
                "recorded the split's member list"
            );
            return Ok((next, revision));
        }
        // Another node recorded first, or an old member came back: again.
    }
}

/// Where each member of `record` stopped: its last recorded checkpoint's
/// positions (a newer manifest that etcd refused to record, written by a
/// member cut off as the list changed, does not count).
async fn stopped_at(
    client: &Client,
    keys: &ClusterKeys,
    record: &SplitRecord,
    (store, shuffled): (&str, bool),
) -> Result<PreviousSplit, CliError> {
    let mut read = BTreeMap::new();
    for member in &record.members {
        let sources = recorded(client, keys, member, (store, shuffled)).await?;
        read.insert(member.clone(), sources);
    }
    // From generation 2 on, a member's vnodes were handed over to it:
    // without a checkpoint of its own generation, where they stood is in
    // the generation before. A generation no member ran in (its list was
    // recorded, then its nodes were refused or stopped at once) changed
    // nothing: the split changes from the generation before it.
    if record.generation > 1 {
        let ran = |sources: &BTreeMap<String, SourceProgress>| ran_in(record.generation, sources);
        if let (false, Some(previous)) = (read.values().any(ran), &record.previous) {
            return Ok(previous.clone());
        }
        if let Some((member, _)) = read.iter().find(|(_, sources)| !ran(sources)) {
            return Err(CliError::usage(format!(
                "node {member} of the split's generation {} ({}) has no checkpoint of that \
                 generation, so where its vnodes stood is not known; start the split with that \
                 list again until every node has run, then change it",
                record.generation,
                record.members.join(",")
            )));
        }
    }
    let mut progress = BTreeMap::new();
    for (member, sources) in read {
        if !sources.is_empty() {
            let recorded = sources
                .into_iter()
                .map(|(source, p)| {
                    let p = RecordedProgress {
                        offset: p.offset,
                        finished: p.finished,
                    };
                    (source, p)
                })
                .collect();
            progress.insert(member, recorded);
        }
    }
    // A shuffled split's keyed state is in its last cut, committed for all.
    let cut = if shuffled {
        CommittedCuts::new(client.clone(), keys.clone())
            .committed()
            .await
            .map_err(sluice::Error::from)?
            .and_then(|ids| ids.last().copied())
    } else {
        None
    };
    Ok(PreviousSplit {
        generation: record.generation,
        members: record.members.clone(),
        progress,
        cut,
    })
}

/// What `member`'s last checkpoint that counts (see [`commits_of`]) had
/// read, by source (empty: none).
async fn recorded(
    client: &Client,
    keys: &ClusterKeys,
    member: &str,
    (store, shuffled): (&str, bool),
) -> Result<BTreeMap<String, SourceProgress>, CliError> {
    let commits = commits_of(client, keys, member, shuffled)?;
    Ok(
        sluice::split::recorded_progress(&node_store(store, member), Some(commits))
            .await?
            .unwrap_or_default(),
    )
}

/// Whether a member whose last checkpoint had read `sources` ran in
/// `generation`: that checkpoint is of the generation (every source's
/// offset says so). In generation 1 any member counts as having run.
fn ran_in(generation: u64, sources: &BTreeMap<String, SourceProgress>) -> bool {
    generation == 1
        || (!sources.is_empty()
            && sources.values().all(|p| {
                p.offset
                    .as_deref()
                    .is_none_or(|o| sluice::split::offset_generation(o) == Some(generation))
            }))
}

/// Whether `member` can stop for a change of the list: it ran in
/// `generation` (a change from a generation one member has no checkpoint
/// of is refused, see [`stopped_at`]), so a node asked to change waits
/// for its first checkpoint of the generation.
///
/// A node of a shuffled split may always stop: its checkpoints are cuts
/// the leader commits for every member at once, so either every member
/// ran in the generation or none did, and a generation none ran in
/// changes from the one before it. Waiting would be wrong there: a
/// member that died before the generation's first cut (a second failure
/// right after a failover) leaves the others unable to commit one, and
/// so unable ever to stop for the change that drops it.
pub(crate) async fn may_stop_for_change(
    client: &Client,
    keys: &ClusterKeys,
    (member, generation): (&str, u64),
    (store, shuffled): (&str, bool),
) -> Result<bool, CliError> {
    if generation == 1 || shuffled {
        return Ok(true);
    }
    let sources = recorded(client, keys, member, (store, shuffled)).await?;
    Ok(ran_in(generation, &sources))
}

/// Which checkpoints of `member`'s store count: those its split record
/// holds, or in a shuffled split the cuts the leader committed for all.
fn commits_of(
    client: &Client,
    keys: &ClusterKeys,
    member: &str,
    shuffled: bool,
) -> Result<Arc<dyn CommitAuthority>, CliError> {
    Ok(if shuffled {
        Arc::new(CommittedCuts::new(client.clone(), keys.clone()))
    } else {
        Arc::new(SplitCommitRecord::reader(
            client.clone(),
            keys.clone(),
            member,
        )?)
    })
}

/// Whether `node` of a shuffled split recovers from a cut after `cut`
/// (the cut its generation's keyed state moved from): its own checkpoint
/// then holds the keys of its vnodes, and the moved state is not needed
/// (the engine would not apply it, see `MovedState::applies_after`; the
/// checkpoint is chosen as recovery chooses it, damaged ones skipped).
/// Asked before [`moved_state`] reads the old members' checkpoints of
/// `cut`, which their stores may have pruned since.
pub(crate) async fn checkpointed_since(
    client: &Client,
    keys: &ClusterKeys,
    (node, store): (&str, &str),
    cut: Option<u64>,
) -> Result<bool, CliError> {
    let Some(cut) = cut else {
        return Ok(false);
    };
    let commits = commits_of(client, keys, node, true)?;
    let newest = sluice::split::newest_recorded(&node_store(store, node), commits).await?;
    Ok(newest.is_some_and(|id| id > cut))
}

/// The keyed state a node of a shuffled split that now holds `mine`
/// takes over after `previous`: the checkpoints of the generation's last
/// cut (committed for all and recorded with the change) of the old
/// members that held one of its vnodes; it keeps the keys of its vnodes
/// out of them (see `sluice_engine::split::moved`). A node that holds no
/// vnode reads none and gives its state up. Without a cut, no member
/// checkpointed and none held state.
pub(crate) async fn moved_state(
    previous: &PreviousSplit,
    store: &str,
    (mine, count): (&VnodePlacement, VnodeCount),
) -> Result<MovedState, CliError> {
    let Some(cut) = previous.cut else {
        return Ok(MovedState::new(Vec::new())?);
    };
    let mut states = Vec::new();
    for member in &previous.members {
        let held = share_of(&previous.members, member, count)?;
        if !held.owned().iter().any(|v| mine.owns(*v)) {
            continue;
        }
        states
            .push(sluice::split::checkpoint_state(member, &node_store(store, member), cut).await?);
    }
    Ok(MovedState::at(cut, states)?)
}

/// What node `node` starts from after `previous`: its own vnodes of then
/// (its checkpoint has their positions) and every other old member's.
pub(crate) fn handover(
    previous: &PreviousSplit,
    node: &str,
    count: VnodeCount,
) -> Result<SplitHandover, CliError> {
    let own_before = if previous.members.iter().any(|m| m == node) {
        Some(share_of(&previous.members, node, count)?)
    } else {
        None
    };
    let mut others = Vec::new();
    for member in previous.members.iter().filter(|m| *m != node) {
        let sources = previous
            .progress
            .get(member)
            .map(|s| {
                s.iter()
                    .map(|(name, p)| {
                        let p = SourceProgress {
                            offset: p.offset.clone(),
                            finished: p.finished,
                        };
                        (name.clone(), p)
                    })
                    .collect()
            })
            .unwrap_or_default();
        others.push(PreviousNode {
            node: member.clone(),
            placement: share_of(&previous.members, member, count)?,
            sources,
        });
    }
    Ok(SplitHandover {
        own_before,
        others,
        generation: previous.generation,
    })
}
