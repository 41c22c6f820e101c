//! The members of a static split (`--split LIST`) and what each holds:
//! its vnodes (rendezvous placement of the vnodes on the listed members)
//! and its own checkpoint store.

use sluice::split::VnodePlacement;
use sluice_cluster::vnodes::{self, VnodeCount};

use crate::error::CliError;

/// The refusal of a node that `--split LIST` does not list.
pub(crate) fn not_listed(list: &str, node: &str) -> CliError {
    CliError::usage(format!(
        "--split '{list}' does not list this node, '{node}' (--node-id); only a node of the \
         split's previous list may be started with it, to publish what its last checkpoint \
         committed"
    ))
}

/// The members of `--split LIST`, sorted, each once.
pub(crate) fn parse_list(list: &str) -> Result<Vec<String>, CliError> {
    let mut members: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .collect();
    members.sort();
    if let Some(w) = members.windows(2).find(|w| w[0] == w[1]) {
        return Err(CliError::usage(format!(
            "--split '{list}': node '{}' is listed twice",
            w[0]
        )));
    }
    if members.is_empty() {
        return Err(CliError::usage(format!(
            "--split '{list}': no node given; list every node of the split, e.g. --split n1,n2,n3"
        )));
    }
    Ok(members)
}

/// The vnodes `node` holds when `count` vnodes are placed on `members`.
pub(crate) fn share_of(
    members: &[String],
    node: &str,
    count: VnodeCount,
) -> Result<VnodePlacement, CliError> {
    let owners = vnodes::place(count, members);
    let me = members.iter().position(|m| m == node);
    let owned = (0..count.get()).filter(|v| {
        owners
            .get(*v as usize)
            .is_some_and(|o| Some(*o as usize) == me)
    });
    VnodePlacement::new(count.get(), owned).map_err(CliError::usage)
}

/// `--state URL` for node `node`: `URL/nodes/NODE`.
pub(crate) fn node_store(store: &str, node: &str) -> String {
    format!("{}/nodes/{node}", store.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;

    #[test]
    fn member_lists_are_checked() {
        assert_eq!(
            parse_list(" n2, n1 ,n3").ok(),
            Some(vec!["n1".to_string(), "n2".into(), "n3".into()])
        );
        for (list, says) in [
            ("n1,n2,n1", "node 'n1' is listed twice"),
            (" , ", "no node given"),
        ] {
            let e = parse_list(list).expect_err(list).to_string();
            assert!(e.contains(says), "{list}: {e}");
        }
        let e = not_listed("n2,n3", "n1").to_string();
        assert!(e.contains("does not list this node, 'n1'"), "{e}");
    }

    #[test]
    fn the_members_shares_partition_the_vnodes() {
        let members: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let count = VnodeCount::default();
        let shares: Vec<VnodePlacement> = members
            .iter()
            .map(|m| share_of(&members, m, count).expect("share"))
            .collect();
        for v in 0..count.get() {
            assert_eq!(shares.iter().filter(|s| s.owns(v)).count(), 1, "vnode {v}");
        }
        assert!(shares.iter().all(|s| s.owned().len() > 40));
        assert_eq!(node_store("s3://b/p/", "a"), "s3://b/p/nodes/a");
    }
}
