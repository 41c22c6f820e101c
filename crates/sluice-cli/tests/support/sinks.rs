//! What the shuffle tests read back from sink files: their data lines,
//! and the final state of a changelog.

use std::collections::BTreeMap;
use std::path::Path;

/// The data lines of a sink file, sorted (none while it does not exist).
pub fn lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut l: Vec<String> = text.lines().skip(1).map(str::to_string).collect();
    l.sort();
    l
}

/// The final state of a changelog sink file: each row inserted and not
/// retracted (the change kind is the last column).
pub fn final_state(path: &Path) -> Vec<String> {
    final_state_of(&[path])
}

/// The final state of the changelog that `paths` (the files of a split's
/// nodes) hold together: a key's row may be retracted on another node
/// than the one that inserted it, once its vnode moved.
pub fn final_state_of<P: AsRef<Path>>(paths: &[P]) -> Vec<String> {
    let mut state: BTreeMap<String, i64> = BTreeMap::new();
    for line in paths.iter().flat_map(|p| lines(p.as_ref())) {
        let (row, change) = line.rsplit_once(',').unwrap();
        *state.entry(row.to_string()).or_default() += if change == "insert" { 1 } else { -1 };
    }
    state
        .into_iter()
        .flat_map(|(row, n)| {
            assert!(n >= 0, "{row} retracted more often than inserted");
            std::iter::repeat_n(row, n as usize)
        })
        .collect()
}

/// The activation logs (`activation_id,key,callback,count,watermark`, the
/// built-in `activation_log` function's output) that a split's nodes
/// wrote at least once (`nodes`), against one node's (`reference`):
/// every delivery of an activation id is the same row (a replay after a
/// kill reproduced it: key, callback, count and watermark), and without
/// repeats each key had exactly the reference's number of input
/// activations (ids aside: a split numbers them per vnode; a count
/// restarts at each timer, whose cuts differ from one node's). A replay
/// that ran an input again under another id shows as an input too many.
/// Returns how many deliveries were repeats.
pub fn assert_activation_logs<P: AsRef<Path>>(nodes: &[P], reference: &Path) -> usize {
    assert_activations(nodes.iter().flat_map(|n| lines(n.as_ref())), reference)
}

/// [`assert_activation_logs`] of the rows `delivered` (the handlers' own
/// record of what they returned, say, which a kill does not take back).
pub fn assert_activations(delivered: impl Iterator<Item = String>, reference: &Path) -> usize {
    let mut by_id: BTreeMap<i64, String> = BTreeMap::new();
    let mut repeats = 0;
    for line in delivered {
        let (id, row) = line.split_once(',').unwrap();
        let id: i64 = id.parse().unwrap();
        match by_id.get(&id) {
            Some(before) => {
                repeats += 1;
                assert_eq!(
                    before, row,
                    "activation {id} delivered again with another row"
                );
            }
            None => {
                by_id.insert(id, row.to_string());
            }
        }
    }
    let inputs = |rows: &mut dyn Iterator<Item = &str>| {
        let mut per_key: BTreeMap<String, usize> = BTreeMap::new();
        for r in rows {
            let f: Vec<&str> = r.split(',').collect();
            if f[1] == "input" {
                *per_key.entry(f[0].to_string()).or_default() += 1;
            }
        }
        per_key
    };
    let single = lines(reference);
    let single = inputs(&mut single.iter().map(|l| l.split_once(',').unwrap().1));
    assert!(!single.is_empty(), "the reference ran no input activation");
    let split = inputs(&mut by_id.values().map(String::as_str));
    assert_eq!(split, single, "input activations per key");
    eprintln!(
        "{} activations, {repeats} delivered again by a replay",
        by_id.len()
    );
    repeats
}
