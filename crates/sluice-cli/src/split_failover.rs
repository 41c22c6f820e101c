//! `--failover-after DURATION`: a split that goes on without a member
//! that is away, instead of waiting for it to be started again.
//!
//! Every running node of a split watches the cluster's live members (etcd
//! keys under the members' leases, mirrored by a watch, see
//! `sluice_cluster::membership::live_members`). A member of the node's
//! list whose key is gone (its process died, or it was cut off past its
//! lease) starts a clock; once a member has been away for the duration,
//! the node asks for the list without it, exactly as `sluice cluster
//! rescale` would (`split_rescale::request`, one request per generation:
//! of several nodes asking at once, one is recorded). From there the
//! request is carried out as any other: each node still running stops at
//! once (a shuffled split's checkpoints are cuts committed for all, so a
//! generation without one changes from the one before it, see
//! `split_change::may_stop_for_change`) and starts again with the new
//! list, taking the away member's vnodes over from the last committed cut
//! (keyed state, files, Nexmark blocks), so no committed row is lost or
//! written twice. A second member that dies before the new list's first
//! cut is failed over the same way.
//!
//! ```text
//!   n3's lease lapses ──► n1, n2: n3 away ── DURATION ──► request {gen g: n1,n2}
//!        ──► n1, n2 stop (last committed cut stands) ──► gen g+1: n1,n2
//! ```
//!
//! A member away since this node started counts from the start, so the
//! duration must leave the members time to start. The clocks outlive the
//! node's runs within a generation ([`AwayClocks`]): a shuffled split's
//! run ends within the exchanges' connect patience when a peer is gone
//! (60 s), and the node rejoins; a clock started again at each rejoin
//! would never reach a longer duration. An away member started
//! again later with its old list sees the change (`split_change::carried_out`)
//! and runs as a dropped node: it publishes what its last checkpoint
//! committed (output a kill left staged) and ends.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use sluice_cluster::split_record;
use sluice_cluster::split_rescale::{self, RescaleRequest};
use sluice_cluster::status::Client;
use sluice_cluster::{ClusterKeys, ClusterNode};
use tokio::time::Instant;

use crate::error::CliError;

/// How long a failed request waits before it is made again.
const RETRY: Duration = Duration::from_millis(500);

/// Parse `--failover-after`: a duration of at least 1 ms.
pub(crate) fn parse(text: &str) -> Result<Duration, CliError> {
    let after = humantime::parse_duration(text)
        .map_err(|e| CliError::usage(format!("--failover-after '{text}': {e}")))?;
    if after < Duration::from_millis(1) {
        return Err(CliError::usage(format!(
            "--failover-after '{text}': give a duration of at least 1ms (leave the option out to \
             wait for an away member instead)"
        )));
    }
    Ok(after)
}

/// When each member of the node's list went away, kept across the node's
/// runs of one generation (see the module docs); owned by the node's
/// process, reset when the generation changes.
#[derive(Debug, Default)]
pub(crate) struct AwayClocks {
    generation: u64,
    since: BTreeMap<String, Instant>,
}

impl AwayClocks {
    /// Note who is away at `now` among `running`'s other members
    /// (`present` are live); returns when each away member went away.
    fn update(
        &mut self,
        running: &Running<'_>,
        present: &std::collections::BTreeSet<String>,
        now: Instant,
    ) -> &BTreeMap<String, Instant> {
        if self.generation != running.generation {
            self.generation = running.generation;
            self.since.clear();
        }
        for member in running.members.iter().filter(|m| *m != running.node) {
            if present.contains(member) {
                self.since.remove(member);
            } else {
                self.since.entry(member.clone()).or_insert(now);
            }
        }
        self.since.retain(|m, _| running.members.contains(m));
        &self.since
    }
}

/// Which generation of which list this node runs.
pub(crate) struct Running<'a> {
    /// This node.
    pub node: &'a str,
    /// The split's generation.
    pub generation: u64,
    /// Its member list.
    pub members: &'a [String],
}

/// Watch `running`'s members through `node`'s session and, once one has
/// been away for `after`, ask for the list without the members away that
/// long (see the module docs); never resolves (the request is carried out
/// by the node's rescale watch). Without `after`, only waits.
pub(crate) async fn watch(
    node: &ClusterNode,
    (client, keys): (&Client, &ClusterKeys),
    running: Running<'_>,
    (after, clocks): (Option<Duration>, &std::sync::Mutex<AwayClocks>),
) -> Infallible {
    let Some(after) = after else {
        return std::future::pending().await;
    };
    let mut live = sluice_cluster::membership::live_members(node.session());
    // The first listing, before which nobody is known to be away.
    if live.changed().await.is_err() {
        return std::future::pending().await;
    }
    loop {
        let now = Instant::now();
        let away: BTreeMap<String, Instant> = {
            let present = live.borrow_and_update();
            let mut clocks = clocks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            clocks.update(&running, &present, now).clone()
        };
        let gone: Vec<&str> = away
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= after)
            .map(|(m, _)| m.as_str())
            .collect();
        let mut wake = away.values().map(|since| *since + after).min();
        if !gone.is_empty() {
            match ask_without(client, keys, &running, &gone, after).await {
                // Asked (by this node or another), or the list changed:
                // the node's rescale watch takes it from here.
                Ok(()) => return std::future::pending().await,
                Err(e) => {
                    tracing::warn!(error = %e, "asking to go on without the away members");
                    wake = Some(Instant::now() + RETRY);
                }
            }
        }
        tokio::select! {
            changed = live.changed() => if changed.is_err() {
                return std::future::pending().await;
            },
            () = sleep_until(wake) => {}
        }
    }
}

/// Sleep until `at`, or forever without it.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Record the request to go on without `gone`, unless the split's list
/// changed since `running` or a change of its generation is requested
/// already (both are fine: the node's rescale watch follows them).
async fn ask_without(
    client: &Client,
    keys: &ClusterKeys,
    running: &Running<'_>,
    gone: &[&str],
    after: Duration,
) -> Result<(), CliError> {
    let (record, split_revision) = split_record::read(client, keys).await?;
    let Some(record) = record.filter(|r| r.generation == running.generation) else {
        return Ok(());
    };
    let (asked, request_revision) = split_rescale::read_any(client, keys).await?;
    if asked.is_some_and(|a| a.from_generation == running.generation) {
        return Ok(());
    }
    let stays = |node: &str| !gone.contains(&node);
    let members: Vec<String> = record
        .members
        .iter()
        .filter(|m| stays(m))
        .cloned()
        .collect();
    // Each entry of a shuffle list is `NODE=IP:PORT`.
    let shuffle = record.shuffle.as_ref().map(|list| {
        let kept: Vec<&str> = list
            .split(',')
            .filter(|entry| stays(entry.split_once('=').map_or(*entry, |(n, _)| n)))
            .collect();
        kept.join(",")
    });
    let request = RescaleRequest {
        from_generation: running.generation,
        members: members.clone(),
        shuffle,
    };
    let revisions = (split_revision, request_revision);
    if split_rescale::request(client, keys, &request, revisions).await? {
        tracing::warn!(
            away = %gone.join(","),
            after = %humantime::format_duration(after),
            members = %members.join(","),
            "members of the split are away: asked to go on without them"
        );
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    /// An away member's clock runs across the node's runs of one
    /// generation (a rejoin does not restart it), stops when the member is
    /// back, and starts over in the next generation.
    #[test]
    fn away_clocks_outlive_a_run_but_not_a_generation() {
        let members: Vec<String> = ["n1", "n2", "n3"].iter().map(|m| m.to_string()).collect();
        let running = |generation| Running {
            node: "n1",
            generation,
            members: &members,
        };
        let live = |names: &[&str]| names.iter().map(|m| m.to_string()).collect();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(90);
        let mut clocks = AwayClocks::default();
        let away = clocks.update(&running(2), &live(&["n1", "n2"]), t0).clone();
        assert_eq!(away.keys().collect::<Vec<_>>(), ["n3"]);
        // The next run of generation 2 (a rejoin) sees n3 away still.
        let away = clocks
            .update(&running(2), &live(&["n1", "n2"]), later)
            .clone();
        assert_eq!(away.get("n3"), Some(&t0));
        // n3 back, then away again: its clock starts over.
        clocks.update(&running(2), &live(&["n1", "n2", "n3"]), later);
        let away = clocks.update(&running(2), &live(&["n1"]), later).clone();
        assert_eq!(away.get("n3"), Some(&later));
        assert_eq!(away.get("n2"), Some(&later));
        // A new generation counts from its own start.
        let next = later + Duration::from_secs(1);
        let away = clocks.update(&running(3), &live(&["n1"]), next).clone();
        assert_eq!(away.get("n3"), Some(&next));
    }

    #[test]
    fn failover_after_takes_a_duration_of_at_least_a_millisecond() {
        assert_eq!(parse("1500ms").ok(), Some(Duration::from_millis(1500)));
        assert_eq!(parse("10s").ok(), Some(Duration::from_secs(10)));
        for (text, says) in [
            ("0s", "give a duration of at least 1ms"),
            ("10", "--failover-after '10': "),
            ("soon", "--failover-after 'soon': "),
        ] {
            let e = parse(text).expect_err(text).to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
