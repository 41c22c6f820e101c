//! Errors of the shuffle, each with a stable `SLC-SHF-NNN` code.
//!
//! Codes cross the wire: a receiver that refuses or cuts a channel sends the
//! code in its `Refused` message, and the sender maps it back to the same
//! variant ([`ShuffleError::from_refusal`]), so both ends report one cause.

/// Stable code of [`ShuffleError::Connect`].
pub const CODE_CONNECT: &str = "SLC-SHF-001";
/// Stable code of [`ShuffleError::StaleGeneration`].
pub const CODE_STALE_GENERATION: &str = "SLC-SHF-002";
/// Stable code of [`ShuffleError::Protocol`].
pub const CODE_PROTOCOL: &str = "SLC-SHF-003";
/// Stable code of [`ShuffleError::SchemaMismatch`].
pub const CODE_SCHEMA_MISMATCH: &str = "SLC-SHF-004";
/// Stable code of [`ShuffleError::PeerGone`].
pub const CODE_PEER_GONE: &str = "SLC-SHF-005";
/// Stable code of [`ShuffleError::UnknownChannel`].
pub const CODE_UNKNOWN_CHANNEL: &str = "SLC-SHF-006";
/// Stable code of [`ShuffleError::Ipc`].
pub const CODE_IPC: &str = "SLC-SHF-007";
/// Stable code of [`ShuffleError::Routing`].
pub const CODE_ROUTING: &str = "SLC-SHF-008";
/// Stable code of [`ShuffleError::Refused`].
pub const CODE_REFUSED: &str = "SLC-SHF-009";
/// Stable code of [`ShuffleError::InvalidConfig`].
pub const CODE_INVALID_CONFIG: &str = "SLC-SHF-010";
/// Stable code of [`ShuffleError::Bind`].
pub const CODE_BIND: &str = "SLC-SHF-011";
/// Stable code of [`ShuffleError::FrameTooLarge`].
pub const CODE_FRAME_TOO_LARGE: &str = "SLC-SHF-012";

/// What broke the protocol (the detail of [`ShuffleError::Protocol`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A frame arrived before the handshake.
    FrameBeforeHandshake,
    /// A second handshake on an open channel.
    DuplicateHandshake,
    /// A frame arrived after the channel's end of stream.
    FrameAfterEndOfStream,
    /// A barrier not after the channel's previous one, or not the barrier
    /// the other channels are aligning on.
    BarrierOutOfOrder {
        /// The barrier that arrived, `(checkpoint_id, attempt)`.
        got: (u64, u32),
        /// The barrier it had to follow or match.
        expected: String,
    },
    /// A watermark below the channel's previous one.
    WatermarkRegressed {
        /// The channel's previous watermark.
        previous: i64,
        /// The one that arrived.
        got: i64,
    },
    /// The sender sent more than its credit.
    CreditExceeded {
        /// `frames` or `bytes`.
        what: &'static str,
        /// What the frame needed.
        needed: u64,
        /// What was left.
        available: u64,
    },
    /// A record batch before the channel's schema, or a second schema.
    SchemaOrder(&'static str),
    /// A frame with no content.
    EmptyFrame,
    /// An item for a channel index the edge does not have (a caller bug).
    NoSuchChannel {
        /// The index given.
        channel: usize,
        /// The edge's channel count.
        count: usize,
    },
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::FrameBeforeHandshake => write!(f, "a frame arrived before the handshake"),
            Self::DuplicateHandshake => write!(f, "a second handshake on an open channel"),
            Self::FrameAfterEndOfStream => write!(f, "a frame arrived after end of stream"),
            Self::BarrierOutOfOrder { got, expected } => write!(
                f,
                "barrier out of order: got checkpoint {} attempt {}, expected {expected}",
                got.0, got.1
            ),
            Self::WatermarkRegressed { previous, got } => {
                write!(f, "watermark regressed from {previous} to {got}")
            }
            Self::CreditExceeded {
                what,
                needed,
                available,
            } => write!(
                f,
                "credit exceeded: a frame needs {needed} {what}, {available} granted"
            ),
            Self::SchemaOrder(what) => write!(f, "{what}"),
            Self::EmptyFrame => write!(f, "a frame with no content"),
            Self::NoSuchChannel { channel, count } => {
                write!(f, "channel {channel} does not exist ({count} channels)")
            }
        }
    }
}

/// Anything that can go wrong in the shuffle.
#[derive(Debug, thiserror::Error)]
pub enum ShuffleError {
    /// Connecting to a peer's shuffle endpoint failed.
    #[error("SLC-SHF-001: cannot connect to the shuffle endpoint of node '{node}' at {endpoint}")]
    Connect {
        /// The destination node.
        node: String,
        /// Where it should be.
        endpoint: String,
        /// The transport's error or the call's status.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The channel's assignment generation is not the receiver's current one:
    /// the sender routed by an assignment that no longer holds (fencing).
    #[error("SLC-SHF-002: stale assignment generation {sent} on edge '{edge}' from node '{sender}'; the receiver is at generation {current}")]
    StaleGeneration {
        /// The edge.
        edge: String,
        /// The sending node.
        sender: String,
        /// The generation the sender named.
        sent: u64,
        /// The receiver's current generation.
        current: u64,
    },
    /// A peer broke the frame protocol.
    #[error("SLC-SHF-003: protocol violation on edge '{edge}' from node '{sender}': {violation}")]
    Protocol {
        /// The edge.
        edge: String,
        /// The sending node (empty before a handshake).
        sender: String,
        /// What was wrong.
        violation: Violation,
    },
    /// A batch does not have the edge's schema.
    #[error("SLC-SHF-004: schema mismatch on edge '{edge}': expected {expected}, got {got}")]
    SchemaMismatch {
        /// The edge.
        edge: String,
        /// The edge's schema.
        expected: String,
        /// What arrived.
        got: String,
    },
    /// The peer went away without ending its stream.
    #[error("SLC-SHF-005: peer '{node}' on edge '{edge}' is gone: {detail}")]
    PeerGone {
        /// The edge.
        edge: String,
        /// The peer.
        node: String,
        /// How it went.
        detail: String,
        /// The transport's status, when it gave one.
        #[source]
        source: Option<tonic::Status>,
    },
    /// The handshake named a pipeline, edge or sender this receiver does not
    /// expect, or a sender that is already connected.
    #[error("SLC-SHF-006: unknown channel: {detail}")]
    UnknownChannel {
        /// What did not match.
        detail: String,
    },
    /// An Arrow IPC frame could not be encoded or decoded.
    #[error("SLC-SHF-007: Arrow IPC {what} failed on edge '{edge}'")]
    Ipc {
        /// The edge.
        edge: String,
        /// Encode or decode of what.
        what: &'static str,
        /// Arrow's error.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// A batch could not be routed by its vnodes.
    #[error("SLC-SHF-008: cannot route on edge '{edge}': {detail}")]
    Routing {
        /// The edge.
        edge: String,
        /// Why.
        detail: String,
        /// Arrow's error, when a kernel failed.
        #[source]
        source: Option<arrow::error::ArrowError>,
    },
    /// The receiver refused or cut the channel with a code this sender does
    /// not map to a more specific variant.
    #[error("SLC-SHF-009: node '{node}' refused the channel ({code}): {message}")]
    Refused {
        /// The receiving node.
        node: String,
        /// The receiver's code.
        code: String,
        /// The receiver's message.
        message: String,
    },
    /// A configuration value is out of range.
    #[error("SLC-SHF-010: invalid shuffle configuration: {detail}")]
    InvalidConfig {
        /// What is wrong.
        detail: String,
    },
    /// The receiver could not listen on its address.
    #[error("SLC-SHF-011: cannot listen for shuffle channels on {addr}")]
    Bind {
        /// The address.
        addr: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// One encoded frame (a batch, after splitting) is over the frame limit.
    #[error("SLC-SHF-012: a frame of {size} bytes for node '{node}' on edge '{edge}' is over the limit of {limit} bytes; send smaller batches")]
    FrameTooLarge {
        /// The edge.
        edge: String,
        /// The destination node.
        node: String,
        /// The frame's encoded size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

impl ShuffleError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Connect { .. } => CODE_CONNECT,
            Self::StaleGeneration { .. } => CODE_STALE_GENERATION,
            Self::Protocol { .. } => CODE_PROTOCOL,
            Self::SchemaMismatch { .. } => CODE_SCHEMA_MISMATCH,
            Self::PeerGone { .. } => CODE_PEER_GONE,
            Self::UnknownChannel { .. } => CODE_UNKNOWN_CHANNEL,
            Self::Ipc { .. } => CODE_IPC,
            Self::Routing { .. } => CODE_ROUTING,
            Self::Refused { .. } => CODE_REFUSED,
            Self::InvalidConfig { .. } => CODE_INVALID_CONFIG,
            Self::Bind { .. } => CODE_BIND,
            Self::FrameTooLarge { .. } => CODE_FRAME_TOO_LARGE,
        }
    }

    /// The sender's view of a receiver's `Refused` message: a stale
    /// generation and a receiver that went away keep their own variants
    /// (callers react to fencing and loss specifically); every other code is
    /// carried as [`Self::Refused`].
    pub fn from_refusal(
        node: &str,
        edge: &str,
        sender: &str,
        sent_generation: u64,
        refusal: &crate::proto::Refused,
    ) -> Self {
        if refusal.code == CODE_STALE_GENERATION {
            return Self::StaleGeneration {
                edge: edge.to_string(),
                sender: sender.to_string(),
                sent: sent_generation,
                current: refusal.current_generation,
            };
        }
        if refusal.code == CODE_PEER_GONE {
            return Self::PeerGone {
                edge: edge.to_string(),
                node: node.to_string(),
                detail: refusal.message.clone(),
                source: None,
            };
        }
        Self::Refused {
            node: node.to_string(),
            code: refusal.code.clone(),
            message: refusal.message.clone(),
        }
    }
}

/// The crate's result type.
pub type Result<T, E = ShuffleError> = std::result::Result<T, E>;
