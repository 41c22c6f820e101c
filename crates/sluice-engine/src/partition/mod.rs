//! Keys and vnodes: the canonical partition key encoding and the key →
//! vnode hash, shared by process functions (keyed state, activation ids),
//! split sources (a file's vnode) and the exchanges between nodes (a row's
//! owner). A leaf module, so each of those can depend on it.

pub mod key;
pub mod placement;
