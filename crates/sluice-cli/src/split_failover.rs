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
//! duration must leave the members time to start. An away member started
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
    after: Option<Duration>,
) -> Infallible {
    let Some(after) = after else {
        return std::future::pending().await;
    };
    let mut live = sluice_cluster::membership::live_members(node.session());
    // The first listing, before which nobody is known to be away.
    if live.changed().await.is_err() {
        return std::future::pending().await;
    }
    let mut away: BTreeMap<&str, Instant> = BTreeMap::new();
    loop {
        let now = Instant::now();
        {
            let present = live.borrow_and_update();
            for member in running.members.iter().filter(|m| *m != running.node) {
                if present.contains(member) {
                    away.remove(member.as_str());
                } else {
                    away.entry(member.as_str()).or_insert(now);
                }
            }
        }
        let gone: Vec<&str> = away
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= after)
            .map(|(m, _)| *m)
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
