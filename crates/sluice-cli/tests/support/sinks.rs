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
