//! `sluice run --cluster etcd=URL --node-id N --state URL FILE.sql`: one
//! node of an active–standby cluster, and `sluice cluster status`.
//!
//! Every node executes the same script, seals its catalog in etcd (a node
//! whose catalog differs is refused, naming the objects that differ),
//! joins, and campaigns. The leader runs the pipeline with its checkpoints
//! in the shared store; the others wait. When the leader dies or is cut
//! off past its lease, a standby wins the election and runs the same
//! pipeline from the last committed checkpoint; the shared store's lease
//! keeps a deposed leader from committing anything more. When a leader
//! runs the (file) sources to their end and publishes the sinks, it
//! records the run as finished and every standby stops. A standby that
//! loses its own lease (paused, or cut off from etcd) has touched nothing,
//! so it joins again (retrying while etcd is unreachable).
//!
//! ```text
//!   execute + seal script ─► seal_or_verify (etcd) ─► join ─► campaign
//!        wait_for_turn ─┬─ Finished ─────────────────────────► exit 0
//!                       └─ Lead{term} ─► start (retry while the store's
//!                             lease is held by the old leader)
//!                           ─► run to the end ──► shutdown (publish) ─► record_finished
//!                              └─ leadership lost ─► abort (publish nothing) ─► exit 1
//! ```
//!
//! Vnode-placed execution (keyed state split across nodes) is not part of
//! this mode yet: the leader runs, and in the assignment table owns, every
//! vnode (`Placement::Leader`). It starts the pipeline once its own table
//! is written, and each checkpoint is admitted under that table's
//! generation (`LeaderCommitRecord::admit`): a checkpoint taken under an
//! older table never commits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use clap::{Args, Subcommand};
use sluice::{ClusterInfo, ClusterMember, Database, DatabaseBuilder, Delivery, StorageError};
use sluice_cluster::assignment::Placement;
use sluice_cluster::catalog_seal::SealedCatalog;
use sluice_cluster::standby::{self, Turn};
use sluice_cluster::status::{self, ClusterStatus, Finished, Progress};
use sluice_cluster::{
    ClusterError, ClusterKeys, ClusterNode, LeaderCommitRecord, NodeConfig, VnodeCount,
};

use crate::error::CliError;
use crate::progress::ProgressSlot;
use crate::run::{self, RunEnd};
use crate::signals::{Signal, Signals};
use crate::RunArgs;

/// How often the running leader reports its progress to etcd.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How often a new leader retries a store still leased by the old one.
const STORE_RETRY: Duration = Duration::from_millis(500);

/// How often a standby that lost its lease retries joining again.
const REJOIN_RETRY: Duration = Duration::from_secs(1);

/// `sluice cluster ...`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Show the cluster's members, leader, vnodes, progress and whether the run finished.
    Status {
        /// The etcd endpoints, `etcd=URL[,URL]`.
        #[arg(long, value_name = "etcd=URL[,URL]")]
        cluster: String,
        /// The cluster's id.
        #[arg(long, value_name = "NAME", default_value = "sluice")]
        cluster_id: String,
    },
    /// Change the member list of a running split: each node, once it has a
    /// checkpoint of its generation, stops (that checkpoint stands) and
    /// starts again with the new list; start the nodes it adds with it too.
    Rescale {
        /// The etcd endpoints, `etcd=URL[,URL]`.
        #[arg(long, value_name = "etcd=URL[,URL]")]
        cluster: String,
        /// The cluster's id.
        #[arg(long, value_name = "NAME", default_value = "sluice")]
        cluster_id: String,
        /// The new member list.
        #[arg(long, value_name = "NODE,NODE,...")]
        split: String,
        /// Where each new member's shuffle listens, for a split run with
        /// --shuffle (it needs one).
        #[arg(long, value_name = "NODE=IP:PORT,...")]
        shuffle: Option<String>,
    },
}

/// `sluice cluster status`: the same table as `SHOW CLUSTER`, plus a
/// line on the leader and the end of the run.
pub async fn command(args: ClusterArgs) -> Result<(), CliError> {
    match args.command {
        ClusterCommand::Status {
            cluster,
            cluster_id,
        } => {
            let endpoints = parse_endpoints(&cluster)?;
            let info = EtcdInfo::connect(&endpoints, &cluster_id, None).await?;
            let s = info.read().await?;
            let db = Database::builder()
                .cluster_info(Arc::new(info))
                .open()
                .await?;
            run::print_tables(&db.execute("SHOW CLUSTER").await?)?;
            println!("{}", summary(&s));
            if let Some(line) = crate::split_change::status_line(&endpoints, &cluster_id).await? {
                println!("{line}");
            }
            Ok(())
        }
        ClusterCommand::Rescale {
            cluster,
            cluster_id,
            split,
            shuffle,
        } => {
            let endpoints = parse_endpoints(&cluster)?;
            let said = crate::split_change::request_rescale(
                &endpoints,
                &cluster_id,
                &split,
                shuffle.as_deref(),
            )
            .await?;
            println!("{said}");
            Ok(())
        }
    }
}

/// One line: the leader, the assignment, the committed checkpoint and the
/// end of the run.
fn summary(s: &ClusterStatus) -> String {
    let leader = match &s.leader {
        Some((node, term)) => format!("leader {node} (term {term})"),
        None => "no leader".to_string(),
    };
    let finished = match &s.finished {
        Some(f) => format!(
            "; finished by {} ({} rows in, {} rows out)",
            f.node, f.rows_in, f.rows_out
        ),
        None => String::new(),
    };
    let members_finished = if s.finished_members.is_empty() {
        String::new()
    } else {
        let each: Vec<String> = s
            .finished_members
            .iter()
            .map(|(node, f)| format!("{node} ({} rows in, {} rows out)", f.rows_in, f.rows_out))
            .collect();
        format!("; split members finished: {}", each.join(", "))
    };
    format!(
        "cluster {}: {leader}, {} members, {} vnodes at generation {}{finished}{members_finished}",
        s.cluster,
        s.members.len(),
        s.vnode_count,
        s.generation
    )
}

/// `etcd=URL[,URL]` as a list of endpoints.
fn parse_endpoints(spec: &str) -> Result<Vec<String>, CliError> {
    let Some(list) = spec.strip_prefix("etcd=") else {
        return Err(CliError::usage(format!(
            "--cluster '{spec}': expected etcd=URL[,URL], e.g. --cluster etcd=http://127.0.0.1:2379"
        )));
    };
    let endpoints: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    if endpoints.is_empty() {
        return Err(CliError::usage(format!(
            "--cluster '{spec}': no etcd endpoint given"
        )));
    }
    Ok(endpoints)
}

/// `SHOW CLUSTER` answered from etcd.
pub(crate) struct EtcdInfo {
    client: status::Client,
    keys: ClusterKeys,
    node: Option<String>,
}

impl EtcdInfo {
    async fn connect(
        endpoints: &[String],
        cluster: &str,
        node: Option<&str>,
    ) -> Result<Self, ClusterError> {
        Ok(Self {
            client: status::connect(endpoints).await?,
            keys: ClusterKeys::new(cluster)?,
            node: node.map(str::to_string),
        })
    }

    async fn read(&self) -> Result<ClusterStatus, ClusterError> {
        status::read(&self.client, &self.keys).await
    }
}

#[async_trait]
impl ClusterInfo for EtcdInfo {
    async fn members(&self) -> sluice::Result<Vec<ClusterMember>> {
        let s = self.read().await.map_err(|e| sluice::Error::Cluster {
            code: e.code(),
            source: Box::new(e),
        })?;
        let now = now_ms();
        Ok(s.members
            .into_iter()
            .map(|m| ClusterMember {
                role: role(m.leader, m.vnodes).to_string(),
                is_self: self.node.as_deref() == Some(m.node.as_str()),
                vnodes: m.vnodes,
                generation: s.generation,
                rows_in: m.progress.as_ref().map(|p| p.rows_in),
                rows_out: m.progress.as_ref().map(|p| p.rows_out),
                watermark_ms: m.progress.as_ref().map(|p| p.watermark_ms),
                checkpoint: m.progress.as_ref().map(|p| p.checkpoint),
                report_age_ms: m.progress.as_ref().map(|p| now - p.at_ms),
                asks_for_checkpoints: m.asks_for_checkpoints,
                node: m.node,
            })
            .collect())
    }
}

/// A member's role as `SHOW CLUSTER` names it: the leader; a follower,
/// which runs the vnodes it owns (the nodes of a split); or a standby,
/// which owns none and waits to take over.
fn role(leader: bool, vnodes: u32) -> &'static str {
    match (leader, vnodes) {
        (true, _) => "leader",
        (false, 0) => "standby",
        (false, _) => "follower",
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What every cluster mode checks and builds before its node joins.
pub(crate) struct Prepared {
    pub(crate) node_id: String,
    pub(crate) endpoints: Vec<String>,
    pub(crate) lease_ttl: Duration,
    /// The shared checkpoint store's URL (`--state`, or a later
    /// `--set checkpoint_store=...`).
    pub(crate) store: String,
    pub(crate) text: String,
    pub(crate) info: EtcdInfo,
    /// Exactly-once delivery and a store lease of one node lease, unless
    /// the user set them.
    pub(crate) builder: DatabaseBuilder,
}

/// Check a cluster run's arguments, read its script, connect to etcd and
/// make the database builder every cluster mode starts from.
pub(crate) async fn prepare(args: &RunArgs) -> Result<Prepared, CliError> {
    let (Some(spec), Some(node_id)) = (&args.cluster, &args.node_id) else {
        return Err(CliError::usage(
            "--cluster and --node-id go together: --cluster etcd=URL --node-id NAME",
        ));
    };
    if args.state.is_none() {
        return Err(CliError::usage(
            "--cluster needs --state URL: a checkpoint store every node reaches \
             (s3://bucket/prefix, or file:///dir on a shared file system), so that a \
             standby can take over from the leader's last checkpoint",
        ));
    }
    // `--set checkpoint_store=...` comes after `--state` and wins.
    let store = args
        .set
        .iter()
        .rev()
        .find_map(|s| s.trim().strip_prefix("checkpoint_store="))
        .or(args.state.as_deref())
        .unwrap_or_default()
        .trim()
        .to_string();
    if store.starts_with("memory:") {
        return Err(CliError::usage(
            "--cluster with --state memory://: a memory store lives inside one process, \
             so no standby could take over from it; use s3://... or file:///shared/dir",
        ));
    }
    if args.state_dir.is_some() {
        return Err(CliError::usage(
            "--cluster keeps its state in --state URL; --state-dir is a local directory \
             that the other nodes cannot read",
        ));
    }
    let lease_ttl = humantime::parse_duration(&args.lease_ttl)
        .map_err(|e| CliError::usage(format!("--lease-ttl '{}': {e}", args.lease_ttl)))?;
    let endpoints = parse_endpoints(spec)?;
    let text = run::read_script(args)?;
    let info = EtcdInfo::connect(&endpoints, &args.cluster_id, Some(node_id)).await?;
    let mut builder = run::builder(args)?;
    // No lost or duplicated output across a takeover, unless the user
    // chose otherwise.
    if !args
        .set
        .iter()
        .any(|s| s.trim_start().starts_with("delivery"))
    {
        builder = builder.set("delivery", "exactly_once")?;
    }
    // A leader killed on another host keeps the store leased until its
    // store lease lapses: make that one node lease (etcd's whole seconds),
    // so a takeover waits about one lease period, not the 30 s default.
    if !args
        .set
        .iter()
        .any(|s| s.trim_start().starts_with("checkpoint_store_lease"))
    {
        let secs = lease_ttl.as_secs() + u64::from(lease_ttl.subsec_nanos() > 0);
        builder = builder.set(
            "checkpoint_store_lease",
            &format!("{}s", secs.clamp(1, 3600)),
        )?;
    }
    Ok(Prepared {
        node_id: node_id.clone(),
        endpoints,
        lease_ttl,
        store,
        text,
        info,
        builder,
    })
}

/// The catalog every node must match: the script's objects, plus the
/// options that decide where a takeover resumes from and what it
/// publishes (a node with another store would start over, duplicating
/// output; one with another delivery would publish under other rules).
pub(crate) async fn sealed_catalog(db: &Database, store: &str) -> SealedCatalog {
    let fingerprints = db.catalog_fingerprints().await;
    let mut objects = fingerprints.objects;
    let delivery = match db.checkpoint_delivery().await {
        Some(Delivery::ExactlyOnce) => "exactly_once",
        Some(Delivery::AtLeastOnce) => "at_least_once",
        None => "off",
    };
    objects.insert("option delivery".to_string(), delivery.to_string());
    objects.insert("option checkpoint_store".to_string(), store.to_string());
    SealedCatalog {
        fingerprint: fingerprints.whole,
        objects,
        vnode_count: VnodeCount::default(),
    }
}

/// `sluice run --cluster ...` (see the module docs).
pub async fn run(args: RunArgs, progress: &ProgressSlot) -> Result<RunEnd, CliError> {
    let signals = Signals::install(progress)?;
    let started = Instant::now();
    let Prepared {
        node_id,
        endpoints,
        lease_ttl,
        store,
        text,
        info,
        builder,
    } = prepare(&args).await?;
    let node_id = node_id.as_str();
    // Checkpoints count once this node, while it leads, records them in
    // etcd: a leader deposed while it wrote commits nothing.
    let commits = Arc::new(LeaderCommitRecord::new(
        info.client.clone(),
        info.keys.clone(),
        node_id,
    ));
    let db = builder
        .cluster_info(Arc::new(info))
        .commit_authority(Arc::clone(&commits) as Arc<dyn sluice::CommitAuthority>)
        .open()
        .await?;
    crate::builtins::register(&db).await?;
    run::execute_script(&db, &text).await?;
    let catalog = sealed_catalog(&db, &store).await;
    let mut config = NodeConfig::new(endpoints, &args.cluster_id, node_id, catalog);
    config.lease_ttl = lease_ttl;
    // Active–standby: the leader runs, and owns, every vnode.
    config.placement = Placement::Leader;
    let mut node = tokio::select! {
        biased;
        signal = signals.first() => {
            signals.say(&format!("{}: node {node_id} stopped before it joined", signal.name()));
            return Ok(RunEnd::Signalled(signal));
        }
        node = ClusterNode::start(config.clone()) => node?,
    };
    // Set once this node, as leader, starts the pipeline: only then does a
    // signal stop it (a standby's pipeline was declared, never started, and
    // must not touch the store or the sinks).
    let leading = AtomicBool::new(false);
    loop {
        let outcome = tokio::select! {
            biased;
            signal = signals.first() => Ok(stop_on_signal(&node, &db, signal, &signals, &leading).await),
            r = serve(&node, &db, &commits, progress, &signals, started, &leading) => r,
        };
        commits.stand_down();
        // Leave now rather than one lease later, so a standby takes over
        // at once.
        if let Err(e) = node.shutdown().await {
            tracing::warn!(error = %e, "leaving the cluster");
        }
        match outcome {
            Err(CliError::Cluster(e @ ClusterError::LeaseLost { .. }))
                if !leading.load(Ordering::Acquire) =>
            {
                // A standby that lost its lease (paused, or cut off from
                // etcd) has touched nothing: it joins again.
                tracing::warn!(error = %e, "standby lost its lease; rejoining");
                node = match rejoin(&config, &signals).await {
                    Ok(node) => node,
                    Err(signal) => {
                        signals.say(&format!(
                            "{}: standby node {node_id} left the cluster",
                            signal.name()
                        ));
                        return Ok(RunEnd::Signalled(signal));
                    }
                };
            }
            outcome => return outcome,
        }
    }
}

/// Join the cluster again after a standby's lease was lost, retrying
/// while etcd cannot be reached; a signal gives up.
async fn rejoin(config: &NodeConfig, signals: &Signals) -> Result<ClusterNode, Signal> {
    loop {
        let attempt = tokio::select! {
            biased;
            signal = signals.first() => return Err(signal),
            node = ClusterNode::start(config.clone()) => node,
        };
        match attempt {
            Ok(node) => {
                tracing::info!(node = node.node_id(), "rejoined the cluster");
                return Ok(node);
            }
            Err(e) => {
                tracing::warn!(error = %e, "rejoining the cluster");
                tokio::select! {
                    biased;
                    signal = signals.first() => return Err(signal),
                    () = tokio::time::sleep(REJOIN_RETRY) => {}
                }
            }
        }
    }
}

/// What a signal does to this node: the leader stops cleanly, a deposed
/// leader publishes nothing, a standby just leaves.
async fn stop_on_signal(
    node: &ClusterNode,
    db: &Database,
    signal: Signal,
    signals: &Signals,
    leading: &AtomicBool,
) -> RunEnd {
    if leading.load(Ordering::Acquire) && node.is_leader() {
        // The leader stops cleanly (a final checkpoint under
        // exactly-once); the next leader continues from it.
        crate::interrupt::stop(db, signal, signals, crate::interrupt::Resume::Cluster).await;
    } else if leading.load(Ordering::Acquire) {
        // Deposed while it ran: publish nothing.
        if let Err(e) = db.abort().await {
            tracing::debug!(error = %e, "abort of a deposed leader");
        }
        signals.say(&format!(
            "{}: node {} was no longer the leader; it published nothing",
            signal.name(),
            node.node_id()
        ));
    } else {
        // A standby never touched the store or the sinks.
        signals.say(&format!(
            "{}: standby node {} left the cluster",
            signal.name(),
            node.node_id()
        ));
    }
    RunEnd::Signalled(signal)
}

/// Wait for this node's turn and take it.
async fn serve(
    node: &ClusterNode,
    db: &Database,
    commits: &LeaderCommitRecord,
    progress: &ProgressSlot,
    signals: &Signals,
    started: Instant,
    leading: &AtomicBool,
) -> Result<RunEnd, CliError> {
    match standby::wait_for_turn(node).await? {
        Turn::Finished(f) => {
            println!(
                "sluice: node {} stands down: node {} finished the run ({} rows in, {} rows out)",
                node.node_id(),
                f.node,
                f.rows_in,
                f.rows_out
            );
            Ok(RunEnd::Completed)
        }
        Turn::Lead { term } => {
            tracing::info!(node = node.node_id(), term, "leading: running the pipeline");
            commits.lead(Arc::clone(node.election()), term);
            let ran = tokio::select! {
                biased;
                () = standby::lost_leadership(node, term) => None,
                r = lead(node, db, term, commits, progress, signals, leading) => Some(r),
            };
            match ran {
                None => {
                    // Publish nothing: the new leader continues from the
                    // last committed checkpoint.
                    Err(deposed(db, node, term).await)
                }
                // The store refused a checkpoint of this term (etcd refused
                // its record, or another node holds the store's lease: the
                // pipeline halted on it), or the run failed after the node
                // was deposed: it was deposed, whatever failed first.
                Some(Err(e))
                    if StorageError::FENCE_CODES.contains(&e.code())
                        || node.term() != Some(term) =>
                {
                    tracing::debug!(error = %e, "the run failed after losing leadership");
                    Err(deposed(db, node, term).await)
                }
                Some(Err(e)) => {
                    if let Err(shutdown) = db.abort().await {
                        tracing::debug!(error = %shutdown, "shutdown after a failure");
                    }
                    Err(e)
                }
                Some(Ok(_)) if node.term() != Some(term) => {
                    // Deposed at the very end: the next leader publishes.
                    Err(deposed(db, node, term).await)
                }
                Some(Ok(cpu_at_start)) => {
                    let metrics = db.shutdown().await?;
                    let cpu = run::process_cpu_secs() - cpu_at_start;
                    let finished = Finished {
                        node: node.node_id().to_string(),
                        term,
                        rows_in: metrics.rows_in(),
                        rows_out: metrics.rows_emitted(),
                    };
                    standby::record_finished(node.election(), &finished).await?;
                    run::print_summary(&metrics, started.elapsed().as_secs_f64(), cpu)?;
                    Ok(RunEnd::Completed)
                }
            }
        }
    }
}

/// Abort a run this node no longer leads (publishing nothing: the next
/// leader continues from the last committed checkpoint).
async fn deposed(db: &Database, node: &ClusterNode, term: u64) -> CliError {
    if let Err(e) = db.abort().await {
        tracing::debug!(error = %e, "abort after losing leadership");
    }
    ClusterError::NotLeader {
        node: node.node_id().to_string(),
        term,
    }
    .into()
}

/// Start the pipeline (waiting out the store lease of a leader that died)
/// and run it to its end, reporting progress; returns the CPU time at the
/// start.
async fn lead(
    node: &ClusterNode,
    db: &Database,
    term: u64,
    commits: &LeaderCommitRecord,
    progress: &ProgressSlot,
    signals: &Signals,
    leading: &AtomicBool,
) -> Result<f64, CliError> {
    leading.store(true, Ordering::Release);
    // Checkpoints are admitted under this leader's own assignment table
    // (every vnode on this node): start once the driver has written it.
    let table = standby::wait_for_own_assignment(node, term).await?;
    tracing::info!(generation = table.generation(), "this leader's assignment");
    // An attempt the previous leader left undecided never counts.
    let orphans = commits.take_over().await?;
    if !orphans.is_empty() {
        tracing::info!(
            ?orphans,
            "aborted the previous leader's undecided checkpoints"
        );
    }
    start_leading(db).await?;
    tokio::select! {
        () = report_progress(node, db) => unreachable_report(),
        r = run::run_to_end(db, progress, signals) => r,
    }
}

/// Report this node's progress to etcd every [`PROGRESS_EVERY`], for
/// `SHOW CLUSTER`; never returns.
pub(crate) async fn report_progress(node: &ClusterNode, db: &Database) {
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    loop {
        tick.tick().await;
        let m = db.metrics();
        let p = Progress {
            rows_in: m.rows_in(),
            rows_out: m.rows_emitted(),
            watermark_ms: m.watermark,
            checkpoint: m.last_checkpoint.as_ref().map_or(0, |c| c.id),
            at_ms: now_ms(),
        };
        if let Err(e) = status::publish_progress(node.session(), &p).await {
            tracing::debug!(error = %e, "progress report");
        }
    }
}

/// Start the pipeline as the leader: wait out the store lease of a leader
/// that died, and ask etcd again when it did not answer which checkpoints
/// count. Any other error ends the run.
pub(crate) async fn start_leading(db: &Database) -> Result<(), CliError> {
    loop {
        match db.start().await {
            Ok(()) => return Ok(()),
            // The old leader's store lease: it lapses by itself (at once
            // when its process is gone from this host).
            Err(e) if e.code() == "SLC-STO-006" => {
                tracing::info!(error = %e, "waiting for the store lease");
                tokio::time::sleep(STORE_RETRY).await;
            }
            // etcd did not answer which checkpoints count (a call timeout,
            // this process paused mid-call): nothing started, so ask again.
            // Failing would hand the run to a standby for one slow call;
            // if this node loses its term meanwhile, the caller stops it.
            Err(e) if e.code() == "SLC-STO-009" => {
                tracing::warn!(error = %e, "asking etcd again for the committed checkpoints");
                tokio::time::sleep(STORE_RETRY).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The progress loop never ends by itself.
pub(crate) fn unreachable_report() -> Result<f64, CliError> {
    Err(CliError::script("the progress reporter stopped"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoints("etcd=http://a:1, http://b:2").ok(),
            Some(vec!["http://a:1".to_string(), "http://b:2".to_string()])
        );
        for bad in ["http://a:1", "etcd=", "etcd= , "] {
            let e = parse_endpoints(bad).err().map(|e| e.to_string());
            assert!(e.is_some_and(|e| e.contains("--cluster")), "{bad}");
        }
    }

    /// The summary line names the split members that finished, with
    /// their rows.
    #[test]
    fn the_summary_lists_finished_split_members() {
        let mut s = ClusterStatus {
            cluster: "c".into(),
            revision: 9,
            leader: None,
            members: Vec::new(),
            generation: 4,
            vnode_count: 256,
            committed: 0,
            finished: None,
            finished_members: Default::default(),
        };
        assert_eq!(
            summary(&s),
            "cluster c: no leader, 0 members, 256 vnodes at generation 4"
        );
        for (node, rows_in) in [("n2", 5), ("n1", 7)] {
            let f = sluice_cluster::status::MemberFinished {
                rows_in,
                rows_out: 1,
                leader_term: None,
            };
            s.finished_members.insert(node.into(), f);
        }
        assert_eq!(
            summary(&s),
            "cluster c: no leader, 0 members, 256 vnodes at generation 4; split members \
             finished: n1 (7 rows in, 1 rows out), n2 (5 rows in, 1 rows out)"
        );
    }

    /// Every role `SHOW CLUSTER` can show: nodes of a split own vnodes
    /// without leading and are followers, not standbys.
    #[test]
    fn roles() {
        assert_eq!(role(true, 256), "leader");
        assert_eq!(role(true, 0), "leader");
        assert_eq!(role(false, 85), "follower");
        assert_eq!(role(false, 0), "standby");
    }

    /// An authority that does not answer the first read of the committed
    /// checkpoints (etcd timed out), then answers.
    #[derive(Debug, Default)]
    struct SlowOnce {
        asked: std::sync::atomic::AtomicU32,
    }

    #[async_trait]
    impl sluice::CommitAuthority for SlowOnce {
        async fn record_commit(
            &self,
            _id: u64,
            _: Option<u64>,
            _: &sluice::BlobRef,
        ) -> Result<(), StorageError> {
            Ok(())
        }

        async fn committed(&self) -> Result<Option<std::collections::BTreeSet<u64>>, StorageError> {
            if self.asked.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(StorageError::Authority {
                    what: "reading the committed checkpoints".into(),
                    source: "etcd did not answer in time".into(),
                });
            }
            Ok(None)
        }

        async fn forget_below(&self, _id: u64) -> Result<(), StorageError> {
            Ok(())
        }
    }

    /// A leader whose first read of the committed checkpoints got no
    /// answer asks again and starts; before, the run failed and a standby
    /// took it over.
    #[tokio::test]
    async fn a_leader_starts_after_an_unanswered_read_of_the_committed_checkpoints(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let authority = Arc::new(SlowOnce::default());
        let db = Database::builder()
            .set("checkpoint_store", "memory:///")?
            .set("checkpoint_interval", "1h")?
            .commit_authority(Arc::clone(&authority) as Arc<dyn sluice::CommitAuthority>)
            .open()
            .await?;
        db.execute("CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
            .await?;
        tokio::time::timeout(Duration::from_secs(10), start_leading(&db)).await??;
        assert_eq!(authority.asked.load(Ordering::SeqCst), 2);
        db.abort().await?;
        Ok(())
    }
}
