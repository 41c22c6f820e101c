//! `sluice run --cluster etcd=URL --node-id N --split N1,N2,... --state URL
//! FILE.sql`: one node of a static split, where every node runs at once.
//!
//! Every node executes the same script and seals it in etcd (a node with
//! another script is refused, naming what differs). The member list is
//! recorded by generation (`split_change`): a node started with the
//! recorded list runs its generation; one started with another list
//! changes the split once the old members stopped. The vnodes are placed
//! on the listed members by rendezvous hashing, live or not
//! (`Placement::Fixed`), and each node runs as that share of the pipeline
//! (`DatabaseBuilder::split`): its file sources read the files of its
//! vnodes, its sinks write files of its own (`out/x.csv` becomes
//! `out/N/x.csv`), and without `--shuffle` only row-by-row queries are
//! admitted (the others are refused by name). Each such node checkpoints its share on its own, in
//! `STATE/nodes/N` (exactly-once by default): rows of one share never meet
//! rows of another, so no checkpoint needs the other nodes, and a node
//! killed at any time is started again with the same arguments and resumes
//! its share from its last checkpoint. A node cut off past its lease
//! (paused, or away from etcd) stops and publishes nothing more: the same
//! node started again may be running its share, and the store's lease
//! fences what the old process would write.
//!
//! ```text
//!   prepare ─► member list by generation (etcd; a changed list waits for
//!   the old members to stop and records where they stopped) ─► split +
//!   handover + script ─► seal (etcd) ─► join ─► the generation is still
//!   current ─► start (wait out the store lease of this node's previous
//!   process; a handover checkpoints where the node starts) ─► run the
//!   share to its end ─► shutdown (publish) ─► record finished ─► leave
//! ```
//!
//! With `--shuffle`, keyed queries run too: each key's rows cross to its
//! vnode's owner and the nodes checkpoint as one cut under a designated
//! leader (`split_shuffle`). The list changes between runs, or while the
//! nodes run when `sluice cluster rescale` asks them to (each stops at
//! once and starts again in its process with the new list; see
//! `sluice_cluster::split_rescale`); a shuffled split's keyed state moves
//! with its vnodes. A down node's share waits for it to be started again,
//! or, with `--failover-after`, moves to the others once it has been away
//! that long (`split_failover`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::split::{SplitHandover, VnodePlacement};
use sluice::CommitAuthority;
use sluice_cluster::assignment::Placement;
use sluice_cluster::split_record::{self, SplitCommitRecord};
use sluice_cluster::split_rescale::{self, RescaleRequest};
use sluice_cluster::status::{self, Client, MemberFinished};
use sluice_cluster::vnodes::VnodeCount;
use sluice_cluster::{ClusterError, ClusterKeys, ClusterNode, CommittedCuts, NodeConfig};

use crate::cluster::{self, Prepared};
use crate::error::CliError;
use crate::interrupt::Resume;
use crate::progress::ProgressSlot;
use crate::run::{self, RunEnd};
use crate::signals::Signals;
use crate::split_change::{self, Part};
use crate::split_failover;
use crate::split_members::{node_store, parse_list, share_of};
use crate::split_shuffle::{self, Role, RoleAuthority, ShuffleList};
use crate::RunArgs;

/// How often a node whose id is still held by its previous process's
/// lease asks again.
const JOIN_RETRY: Duration = Duration::from_millis(500);

/// How many times a node of a shuffled split rejoins after another node
/// stopped mid-run, before it gives up.
const MAX_REJOINS: u32 = 10;

/// The code of a node that lost its etcd lease (it stops; see
/// [`lease_lost`]).
const LEASE_LOST: &str = "SLC-CLU-007";

/// `sluice run --cluster ... --split ...` (see the module docs). A node of
/// a shuffled split whose peer stopped mid-run (`SLC-SHF-005`: killed, or
/// its process ended) halts without recovering alone, then rejoins: it
/// opens its share again from the last checkpoint committed for every
/// node and waits (the channel patience) for the peer to be started
/// again. So only the node that died needs restarting.
///
/// A request to change the member list of the generation this node runs
/// (`sluice cluster rescale`, see `sluice_cluster::split_rescale`) stops
/// its run without another checkpoint once it may (see
/// `split_change::may_stop_for_change`), and starts it again with the new
/// list.
pub async fn run(
    mut args: RunArgs,
    progress: &ProgressSlot,
    list: &str,
) -> Result<RunEnd, CliError> {
    let signals = Signals::install(progress)?;
    let started = Instant::now();
    let mut rejoins = 0;
    let mut list = list.to_string();
    let away = std::sync::Mutex::new(split_failover::AwayClocks::default());
    let waits_for_failover = args.failover_after.is_some();
    loop {
        match run_node(&args, progress, &list, (&signals, &away), started).await {
            Ok(NodeEnd::Rescale(request)) => {
                // A new list: the peers lost under the old one do not count
                // against this one's rejoins.
                rejoins = 0;
                list = request.members.join(",");
                tracing::warn!(
                    generation = request.from_generation,
                    members = %list,
                    "the split's member list changes: starting again with the new list"
                );
                if request.shuffle.is_some() {
                    args.shuffle = request.shuffle;
                }
            }
            Ok(NodeEnd::Ended(end)) => return Ok(end),
            Err(e)
                if args.shuffle.is_some()
                    && rejoins_after(&e, waits_for_failover)
                    && rejoins < MAX_REJOINS =>
            {
                rejoins += 1;
                tracing::warn!(error = %e, rejoins, "another node of the split stopped; rejoining to resume from the last checkpoint committed for all");
            }
            Err(e) => return Err(e),
        }
    }
}

/// How one run of this node ended.
enum NodeEnd {
    /// The node's run is over.
    Ended(RunEnd),
    /// Its generation's list is to change: it stopped (or never started),
    /// and starts again with the request's list.
    Rescale(RescaleRequest),
}

/// How often a running node asks whether its generation's list is to
/// change.
const RESCALE_POLL: Duration = Duration::from_millis(250);

/// A request to start generation `generation` of `members` again with
/// another list, once this node `node` may stop for it: at once in a
/// shuffled split, else once it has a checkpoint of the generation
/// (`split_change::may_stop_for_change`).
async fn pending_rescale(
    (client, keys): (&Client, &ClusterKeys),
    (node, generation, members): (&str, u64, &[String]),
    (store, shuffled): (&str, bool),
) -> Result<Option<RescaleRequest>, CliError> {
    match split_rescale::read(client, keys, generation).await? {
        Some(request) if request.members != members => {
            let at = (node, generation);
            let may = split_change::may_stop_for_change(client, keys, at, (store, shuffled));
            Ok(may.await?.then_some(request))
        }
        _ => Ok(None),
    }
}

/// Resolves with a [`pending_rescale`] request; never otherwise. Only etcd
/// is asked until a request comes (the store only while one waits for
/// this node's first checkpoint of the generation). A failed read is
/// logged and asked again (the node's lease watch catches a lost etcd).
async fn rescaled(
    etcd: (&Client, &ClusterKeys),
    at: (&str, u64, &[String]),
    store: (&str, bool),
) -> RescaleRequest {
    let (client, keys) = etcd;
    loop {
        let asked = match split_rescale::read(client, keys, at.1).await {
            Ok(Some(request)) if request.members != at.2 => Some(request),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "reading the split's rescale request");
                None
            }
        };
        if asked.is_some() {
            match pending_rescale(etcd, at, store).await {
                Ok(Some(request)) => return request,
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "reading this node's checkpoints"),
            }
        }
        tokio::time::sleep(RESCALE_POLL).await;
    }
}

/// Whether a node of a shuffled split rejoins after `e`: another node
/// went away mid-run (a halt on a cut shuffle channel, `SLC-SHF-005`),
/// the leader stopped before it recorded the end (`SLC-CLI-004`), or the
/// leader's shutdown checkpoint was aborted (`SLC-STO-011`: a member went
/// away before it answered; the sinks keep the committed epochs, and the
/// run resumes from there with that member's new process). A peer that
/// never came (`SLC-SHF-001`) is rejoined only while `waits_for_failover`
/// (`--failover-after`: the away clock must reach its duration, longer
/// than the exchanges' connect patience); without it, as its own lease
/// lost, it ends the node.
fn rejoins_after(e: &CliError, waits_for_failover: bool) -> bool {
    let code = e.code();
    (waits_for_failover && code == "SLC-SHF-001")
        || code == "SLC-SHF-005"
        || code == crate::error::CODE_LEADER_GONE
        || code == sluice::StorageError::ABORTED_CODE
}

/// One run of this node: prepare, join, run its share to its end.
async fn run_node(
    args: &RunArgs,
    progress: &ProgressSlot,
    list: &str,
    (signals, away): (&Signals, &std::sync::Mutex<split_failover::AwayClocks>),
    started: Instant,
) -> Result<NodeEnd, CliError> {
    let failover = args
        .failover_after
        .as_deref()
        .map(split_failover::parse)
        .transpose()?;
    let p: Prepared = cluster::prepare(args).await?;
    let node_id = p.node_id;
    let members = parse_list(list)?;
    let shuffle = args
        .shuffle
        .as_deref()
        .map(|spec| split_shuffle::parse(spec, &members))
        .transpose()?;
    let count = VnodeCount::default();
    // The member list, by generation: a list that differs from the
    // recorded one changes the split once its old members stopped.
    let client = status::connect(&p.endpoints).await?;
    let keys = ClusterKeys::new(&args.cluster_id)?;
    // Nodes agree on where each shuffle listens through the split's record
    // (one list per generation, since a grown split has a longer one), and
    // on whether rows shuffle at all through the sealed catalog.
    // Started again with the list a rescale changed: run with the new one.
    if let Some(request) = split_change::carried_out(&client, &keys, &members).await? {
        tracing::warn!(
            members = %request.members.join(","),
            "the split's list was changed from this node's --split by sluice cluster rescale"
        );
        return Ok(NodeEnd::Rescale(request));
    }
    let canonical = shuffle.as_ref().map(ShuffleList::canonical);
    let (record, revision, part) = split_change::settle_part(
        &client,
        &keys,
        (list, &members, &node_id),
        &p.store,
        (p.lease_ttl, canonical.as_deref()),
    )
    .await?;
    let shuffled = shuffle.is_some();
    let rescale_at = (node_id.as_str(), record.generation, members.as_slice());
    // A shuffled split whose list changed: each node's keyed operators take
    // the keys of its vnodes from the old members' last cut. A node the new
    // list dropped holds none: it runs once more without the shuffle,
    // reading nothing and giving its keyed state up, to publish what its
    // last checkpoint committed.
    let moved = match (&shuffle, &record.previous) {
        (Some(_), Some(previous))
            if matches!(part, Part::Member)
                && split_change::checkpointed_since(
                    &client,
                    &keys,
                    (&node_id, &p.store),
                    previous.cut,
                )
                .await? =>
        {
            tracing::info!(
                cut = ?previous.cut,
                "this node checkpointed since its vnodes moved; its own checkpoint holds their state"
            );
            None
        }
        (Some(_), Some(previous)) => {
            let mine = match part {
                Part::Member => share_of(&members, &node_id, count)?,
                Part::Dropped => VnodePlacement::new(count.get(), []).map_err(CliError::usage)?,
            };
            Some(split_change::moved_state(previous, &p.store, (&mine, count)).await?)
        }
        _ => None,
    };
    let shuffle = shuffle.filter(|_| matches!(part, Part::Member));
    let (share, handover) = match (&part, &record.previous) {
        (Part::Member, previous) => {
            let handover = previous
                .as_ref()
                .map(|previous| split_change::handover(previous, &node_id, count))
                .transpose()?;
            (share_of(&members, &node_id, count)?, handover)
        }
        // Dropped: no vnodes, so its sources read nothing; its own
        // checkpoint's sinks are recovered and published.
        (Part::Dropped, previous) => {
            let none = VnodePlacement::new(count.get(), []).map_err(CliError::usage)?;
            let handover = SplitHandover {
                own_before: None,
                others: Vec::new(),
                generation: previous.as_ref().map_or(0, |p| p.generation),
            };
            (none, Some(handover))
        }
    };
    tracing::info!(
        node = %node_id,
        vnodes = share.owned().len(),
        of = count.get(),
        generation = record.generation,
        "this node's share of the split"
    );
    let mut builder = p
        .builder
        .set("checkpoint_store", &node_store(&p.store, &node_id))?
        .split(&node_id, share)?
        .split_generation(record.generation)?;
    let role = Arc::new(RoleAuthority::default());
    // A node that checkpoints on its own records its commits only while it
    // holds its member key (bound once it joined, below).
    let mut own_commits = None;
    builder = match &shuffle {
        // One cut for every node, under the leader's record or a
        // follower's, known once the node joined.
        Some(list) => {
            let setup = list
                .setup(
                    &args.cluster_id,
                    &node_id,
                    record.generation,
                    &members,
                    count,
                )
                .await?;
            builder
                .commit_authority(Arc::clone(&role) as Arc<dyn CommitAuthority>)
                .shuffle(setup)?
        }
        // Dropped from a shuffled split: it recovers from the leader's last
        // cut and takes no checkpoint (see `publish_dropped`).
        None if shuffled => {
            let cut = record.previous.as_ref().and_then(|p| p.cut);
            let cuts = CommittedCuts::new(client.clone(), keys.clone()).with_recorded_cut(cut);
            builder.commit_authority(Arc::new(cuts))
        }
        // Its checkpoints count once recorded in etcd, which it does only
        // while the split's list is the one it runs under.
        None => {
            let record = Arc::new(SplitCommitRecord::new(
                client.clone(),
                keys.clone(),
                &node_id,
                revision,
            )?);
            own_commits = Some(Arc::clone(&record));
            builder.commit_authority(record)
        }
    };
    if let Some(handover) = handover {
        builder = builder.split_handover(handover)?;
    }
    if let Some(moved) = moved {
        builder = builder.split_moved_state(moved)?;
    }
    let db = builder.cluster_info(Arc::new(p.info)).open().await?;
    crate::builtins::register(&db).await?;
    run::execute_script(&db, &p.text).await?;
    // Asked to change this generation's list (while this node was away, or
    // as it started): start again with the new one at once.
    if matches!(part, Part::Member) {
        let etcd = (&client, &keys);
        if let Some(request) = pending_rescale(etcd, rescale_at, (&p.store, shuffled)).await? {
            db.abort().await?;
            return Ok(NodeEnd::Rescale(request));
        }
    }
    // Sealed before a dropped node turns its checkpoints off below: at
    // least once, that would read as another delivery than the members'.
    let mut catalog = cluster::sealed_catalog(&db, &p.store).await;
    if shuffled && matches!(part, Part::Dropped) {
        // Not even a periodic one between its recovery and its stop: ids
        // of its store would be taken for the split's cuts if it ever
        // joined again. At least once, an interval is what keeps
        // checkpointing on (recovery needs it): one that never comes due
        // in the short run of a dropped node.
        let interval = match db.checkpoint_delivery().await {
            Some(sluice::Delivery::AtLeastOnce) => "1day",
            _ => "off",
        };
        db.execute(&format!("SET checkpoint_interval = '{interval}'"))
            .await?;
    }
    let exchange = if shuffled { "on" } else { "off" };
    catalog
        .objects
        .insert("option shuffle".into(), exchange.to_string());
    let mut config = NodeConfig::new(p.endpoints, &args.cluster_id, &node_id, catalog);
    config.lease_ttl = p.lease_ttl;
    config.placement = Placement::Fixed(members.clone());
    // A shuffled split's checkpoints are led by one designated member.
    config.campaigns = !shuffled || split_shuffle::designated_leader(&members) == node_id;
    let node = loop {
        let joined = tokio::select! {
            biased;
            signal = signals.first() => {
                signals.say(&format!("{}: node {node_id} stopped before it joined", signal.name()));
                return Ok(NodeEnd::Ended(RunEnd::Signalled(signal)));
            }
            node = ClusterNode::start(config.clone()) => node,
        };
        match joined {
            // This node's previous process (killed, or cut off) still
            // holds the id until its lease lapses; a live one keeps it.
            Err(e @ ClusterError::DuplicateNode { .. }) => {
                tracing::warn!(error = %e, "waiting for the id's lease to lapse");
                tokio::time::sleep(JOIN_RETRY).await;
            }
            joined => break joined?,
        }
    };
    if let Some(record) = &own_commits {
        record.bind_member_lease(node.session().lease_id());
    }
    // The list may have changed between the record's read and the join
    // (every old member looked gone, so another list was recorded): this
    // node's generation is over before it ran.
    if split_record::read(&client, &keys).await?.1 != revision {
        db.abort().await?;
        if let Err(e) = node.shutdown().await {
            tracing::warn!(error = %e, "leaving the cluster");
        }
        return Err(CliError::usage(format!(
            "the split's member list changed while node {node_id} joined (it was started with \
             --split {}); start it again with the split's current list",
            members.join(",")
        )));
    }
    let role = match &shuffle {
        Some(_) => {
            let etcd = (client.clone(), keys.clone());
            let leader = split_shuffle::designated_leader(&members);
            Some(split_shuffle::take_role(&node, etcd, leader, &role).await?)
        }
        None => None,
    };
    // A script that sets its own checkpoint store would put every node's
    // checkpoints in one store: each would resume from another's.
    let expected_store = node_store(&p.store, &node_id);
    if let Some(set) = db.options().await.checkpoint_store {
        if set.trim() != expected_store {
            db.abort().await?;
            return Err(CliError::usage(format!(
                "--split keeps each node's checkpoints in --state URL/nodes/NODE ({expected_store}); \
                 the script's SET checkpoint_store = '{set}' would put every node's in one store"
            )));
        }
    }
    // Dropped from a shuffled split: recover (which publishes what its last
    // checkpoint committed), give its keyed state up, and leave without a
    // checkpoint of its own.
    if shuffled && matches!(part, Part::Dropped) {
        let outcome = publish_dropped(&db, started).await;
        return leave(node, &db, outcome).await.map(NodeEnd::Ended);
    }
    // A follower killed after it answered the split's final checkpoint
    // comes back to a run that ended: its peers are gone for good, so it
    // publishes its share of that checkpoint and ends.
    if let Some(Role::Follower { leader, .. }) = &role {
        if let Some(ended) = status::missed_run_end(&client, &keys, &node_id, leader).await? {
            let outcome = publish_ended_run(&node, &db, (leader, &ended), started).await;
            return leave(node, &db, outcome).await.map(NodeEnd::Ended);
        }
    }
    if record.generation > 1 && matches!(part, Part::Member) {
        crash_point("later-generation-joined");
    }
    let running = split_failover::Running {
        node: &node_id,
        generation: record.generation,
        members: &members,
    };
    let ran = tokio::select! {
        biased;
        signal = signals.first() => {
            crate::interrupt::stop(&db, signal, signals, Resume::SplitNode).await;
            Ok(None)
        }
        // Cut off past its lease (paused, or away from etcd): the same
        // node started again may run this share now, so stop and publish
        // nothing more (the store's lease already fences its writes).
        () = lease_lost(&node) => Err(ClusterError::LeaseLost { node: node_id.clone() }.into()),
        e = outlived(&node, &client, &keys, role.as_ref()) => Err(e),
        // Stopped without another checkpoint: the next generation starts
        // from the last one committed (as after a kill), and this node's
        // sinks publish nothing past it (under exactly-once delivery).
        request = rescaled((&client, &keys), rescale_at, (&p.store, shuffled)) => {
            tracing::warn!(
                members = %request.members.join(","),
                "the split's member list is to change; stopping this node's run"
            );
            // A peer that stopped first may have halted this run already:
            // the abort then reports that halt, which changes nothing here.
            if let Err(e) = db.abort().await {
                tracing::debug!(error = %e, "abort for the change of the list");
            }
            if let Err(e) = node.shutdown().await {
                tracing::warn!(error = %e, "leaving the cluster");
            }
            return Ok(NodeEnd::Rescale(request));
        }
        // A member away past --failover-after: the request to go on
        // without it is carried out by the arm above.
        never = split_failover::watch(&node, (&client, &keys), running, (failover, away)) => match never {},
        r = run_share(&node, &db, progress, signals) => r.map(Some),
    };
    // Once the share ran to its end, its shutdown (the final checkpoint,
    // then the sinks' publish) runs whole: cancelling it halfway would
    // leave some sinks published and others not.
    let outcome = match ran {
        // Stopped by the signal, which `first` returns again at once.
        Ok(None) => Ok(RunEnd::Signalled(signals.first().await)),
        Ok(Some(cpu_at_start)) => {
            let end = End {
                member: matches!(part, Part::Member),
                role: role.clone(),
                client: &client,
                keys: &keys,
            };
            finish(&node, &db, end, cpu_at_start, started).await
        }
        Err(e) => Err(e),
    };
    if outcome.is_err() {
        if let Err(e) = db.abort().await {
            tracing::debug!(error = %e, "abort after a failure");
        }
    }
    if let Err(e) = node.shutdown().await {
        tracing::warn!(error = %e, "leaving the cluster");
    }
    // A follower started again while the leader decided the final
    // checkpoint (answered by its killed process) runs on, and fails
    // when its peers never come: it rejoins to publish its share.
    let outcome = match (outcome, &role) {
        (Err(e), Some(Role::Follower { leader, .. })) if e.code() != LEASE_LOST => {
            match status::missed_run_end(&client, &keys, &node_id, leader).await {
                Ok(Some(ended)) => Err(CliError::leader_gone(format!(
                    "the split's leader '{leader}' finished the run (term {}) while this node \
                     started again ({e}); rejoining to publish this node's share of it",
                    ended.leader_term.unwrap_or_default()
                ))),
                _ => Err(e),
            }
        }
        (outcome, _) => outcome,
    };
    // A peer that stopped for a change of the list fails this run: start
    // again with the new list rather than rejoin the old one.
    if outcome.is_err() {
        let etcd = (&client, &keys);
        if let Ok(Some(request)) = pending_rescale(etcd, rescale_at, (&p.store, shuffled)).await {
            tracing::warn!(error = ?outcome.as_ref().err(), "the run ended as the split's list changes");
            return Ok(NodeEnd::Rescale(request));
        }
    }
    // A share that ended just as the list was asked to change: the new
    // list may give this node vnodes whose files or blocks of rows are not read to their
    // end, so it starts again with it.
    if matches!(outcome, Ok(RunEnd::Completed)) && matches!(part, Part::Member) {
        if let Some(request) = split_rescale::read(&client, &keys, record.generation).await? {
            if request.members != members && request.members.contains(&node_id) {
                return Ok(NodeEnd::Rescale(request));
            }
        }
    }
    if shuffle.is_some()
        && outcome
            .as_ref()
            .is_err_and(|e| rejoins_after(e, failover.is_some()))
    {
        // Before it rejoins, every member's halted run has left (a killed
        // one's lease lapses): a channel of a previous run must not reach
        // this node's next server and halt it again.
        let until = tokio::time::Instant::now() + p.lease_ttl * 3;
        let left = sluice_cluster::membership::wait_for_members_to_leave(client, &keys, until);
        let still = left.await;
        if !still.is_empty() {
            tracing::warn!(members = ?still, "rejoining while these members are still in the cluster");
        }
    }
    outcome.map(NodeEnd::Ended)
}

/// For a follower of a shuffled split, resolves once its run is over
/// without its end ([`split_shuffle::run_outlived`]); never otherwise.
async fn outlived(
    node: &ClusterNode,
    client: &Client,
    keys: &ClusterKeys,
    role: Option<&Role>,
) -> CliError {
    match role {
        Some(Role::Follower { leader, .. }) => {
            split_shuffle::run_outlived(node, client.clone(), keys, leader).await
        }
        _ => std::future::pending().await,
    }
}

/// Resolves once this node's etcd lease is known lost.
async fn lease_lost(node: &ClusterNode) {
    let mut lost = node.session().lost();
    while !*lost.borrow_and_update() {
        if lost.changed().await.is_err() {
            // The session is gone without a verdict: never resolve.
            std::future::pending::<()>().await;
        }
    }
}

/// Start this node's share (waiting out the store lease of this node's
/// previous process) and run it to its end, reporting progress; returns
/// the CPU time at the start.
async fn run_share(
    node: &ClusterNode,
    db: &sluice::Database,
    progress: &ProgressSlot,
    signals: &Signals,
) -> Result<f64, CliError> {
    cluster::start_leading(db).await?;
    tokio::select! {
        () = cluster::report_progress(node, db) => cluster::unreachable_report(),
        r = run::run_to_end(db, progress, signals) => r,
    }
}

/// How a finished share ends.
struct End<'a> {
    /// A member of the split's list (not a dropped node).
    member: bool,
    /// Its role in a shuffled split (`None`: it checkpoints on its own).
    role: Option<Role>,
    client: &'a Client,
    keys: &'a ClusterKeys,
}

/// Shut the finished share down (its last checkpoint, then the sinks'
/// publish), record in etcd that this member finished (`sluice cluster
/// status` lists the members that did), and print the summary. In a
/// shuffled split, a follower first waits for the leader's shutdown
/// checkpoint (it covers every node's rows), and the leader's record
/// says it finished as leader, which is what the followers wait for.
async fn finish(
    node: &ClusterNode,
    db: &sluice::Database,
    end: End<'_>,
    cpu_at_start: f64,
    started: Instant,
) -> Result<RunEnd, CliError> {
    if let Some(Role::Follower { leader, seen }) = &end.role {
        crash_point("follower-share-ended");
        let term = seen.load(std::sync::atomic::Ordering::SeqCst);
        let client = end.client.clone();
        split_shuffle::leader_finished(node, client, end.keys, leader, term).await?;
        crash_point("follower-before-shutdown");
    }
    let metrics = db.shutdown().await?;
    if end.member {
        let leader_term = match end.role {
            Some(Role::Leader { term }) => Some(term),
            _ => None,
        };
        let finished = MemberFinished {
            rows_in: metrics.rows_in(),
            rows_out: metrics.rows_emitted(),
            leader_term,
        };
        status::record_member_finished(node.session(), &finished).await?;
    }
    let cpu = run::process_cpu_secs() - cpu_at_start;
    run::print_summary(&metrics, started.elapsed().as_secs_f64(), cpu)?;
    Ok(RunEnd::Completed)
}

/// The share of a run that ended while this follower was away (see
/// [`status::missed_run_end`]): it resumes from the split's final
/// checkpoint, which commits the epochs its sinks sealed for that
/// checkpoint, and stops at once without another checkpoint (it
/// publishes nothing later; rows of files that appeared since are read
/// by the split's next run). Then it records that it finished.
async fn publish_ended_run(
    node: &ClusterNode,
    db: &sluice::Database,
    (leader, ended): (&str, &MemberFinished),
    started: Instant,
) -> Result<RunEnd, CliError> {
    tracing::warn!(
        leader,
        term = ended.leader_term,
        "the split's run ended while this node was away; publishing its share of the final checkpoint"
    );
    let cpu_at_start = run::process_cpu_secs();
    cluster::start_leading(db).await?;
    let metrics = db.abort().await?;
    let finished = MemberFinished {
        rows_in: metrics.rows_in(),
        rows_out: metrics.rows_emitted(),
        leader_term: None,
    };
    status::record_member_finished(node.session(), &finished).await?;
    let cpu = run::process_cpu_secs() - cpu_at_start;
    run::print_summary(&metrics, started.elapsed().as_secs_f64(), cpu)?;
    Ok(RunEnd::Completed)
}

/// Leave the cluster after a run that ended with `outcome` (aborting the
/// database first when it failed), and return it.
async fn leave(
    node: ClusterNode,
    db: &sluice::Database,
    outcome: Result<RunEnd, CliError>,
) -> Result<RunEnd, CliError> {
    if outcome.is_err() {
        if let Err(e) = db.abort().await {
            tracing::debug!(error = %e, "abort after a failure");
        }
    }
    if let Err(e) = node.shutdown().await {
        tracing::warn!(error = %e, "leaving the cluster");
    }
    outcome
}

/// A node dropped from a shuffled split: its recovery publishes what its
/// last checkpoint committed (its sinks' last epoch, when it was killed
/// before publishing it), and it stops at once, reading nothing.
async fn publish_dropped(db: &sluice::Database, started: Instant) -> Result<RunEnd, CliError> {
    tracing::warn!(
        "this node was dropped from the shuffled split; publishing what its last checkpoint \
         committed"
    );
    let cpu_at_start = run::process_cpu_secs();
    cluster::start_leading(db).await?;
    let metrics = db.abort().await?;
    let cpu = run::process_cpu_secs() - cpu_at_start;
    run::print_summary(&metrics, started.elapsed().as_secs_f64(), cpu)?;
    Ok(RunEnd::Completed)
}

/// A kill at a named point of a node's end, for tests of windows too
/// short to hit with a signal: in debug builds, `SLUICE_TEST_CRASH=NAME`
/// aborts the process at the point `NAME` (as SIGKILL would: no cleanup,
/// no record). Release builds have no such points.
fn crash_point(name: &str) {
    if cfg!(debug_assertions) && std::env::var("SLUICE_TEST_CRASH").is_ok_and(|v| v == name) {
        tracing::warn!(point = name, "SLUICE_TEST_CRASH: aborting here");
        std::process::abort();
    }
}
