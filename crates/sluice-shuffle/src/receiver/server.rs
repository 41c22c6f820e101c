//! The node's shuffle endpoint: one gRPC server per node that admits
//! channels for every edge this node receives, fenced by the node's current
//! assignment generation.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use arrow::datatypes::SchemaRef;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};
use tracing::warn;

use crate::config::CreditBudget;
use crate::error::{Result, ShuffleError};
use crate::proto::shuffle_server::{Shuffle, ShuffleServer as GrpcServer};
use crate::proto::{Frame, Handshake, ReceiverMessage};

use super::channel::run_channel;
use super::edge::EdgeInbox;
use super::ShuffleReceiver;

/// What every channel task of one server shares.
#[derive(Debug)]
pub(crate) struct Registry {
    pipeline_id: String,
    node_id: String,
    generation: AtomicU64,
    edges: Mutex<HashMap<String, Weak<EdgeInbox>>>,
}

impl Registry {
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Check a handshake and attach its channel.
    pub fn admit(&self, handshake: &Handshake) -> Result<(Arc<EdgeInbox>, usize, Arc<Notify>)> {
        if handshake.pipeline_id != self.pipeline_id {
            return Err(ShuffleError::UnknownChannel {
                detail: format!(
                    "node '{}' runs pipeline '{}', the channel names '{}'",
                    self.node_id, self.pipeline_id, handshake.pipeline_id
                ),
            });
        }
        let current = self.generation();
        if handshake.generation != current {
            return Err(ShuffleError::StaleGeneration {
                edge: handshake.edge_id.clone(),
                sender: handshake.sender_node.clone(),
                sent: handshake.generation,
                current,
            });
        }
        let inbox = self
            .edges
            .lock()
            .get(&handshake.edge_id)
            .and_then(Weak::upgrade)
            .ok_or_else(|| ShuffleError::UnknownChannel {
                detail: format!(
                    "node '{}' receives no edge '{}'",
                    self.node_id, handshake.edge_id
                ),
            })?;
        let (index, control) = inbox.attach(&handshake.sender_node)?;
        Ok((inbox, index, control))
    }

    /// Forget `inbox`'s edge (unless a newer receiver took the name).
    pub fn remove(&self, inbox: &Arc<EdgeInbox>) {
        let mut edges = self.edges.lock();
        if edges
            .get(&inbox.edge)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(inbox)))
        {
            edges.remove(&inbox.edge);
        }
    }
}

#[derive(Debug, Clone)]
struct Service {
    registry: Arc<Registry>,
    shutdown: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl Shuffle for Service {
    type ExchangeStream = ReceiverStream<Result<ReceiverMessage, Status>>;

    async fn exchange(
        &self,
        request: Request<Streaming<Frame>>,
    ) -> Result<Response<Self::ExchangeStream>, Status> {
        // A few control messages at most are in flight: credit coalesces
        // in the edge's inbox while this is full.
        let (out, rx) = mpsc::channel(4);
        tokio::spawn(run_channel(
            Arc::clone(&self.registry),
            request.into_inner(),
            out,
            self.shutdown.clone(),
        ));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// One node's shuffle endpoint.
#[derive(Debug)]
pub struct ShuffleServer {
    registry: Arc<Registry>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<std::result::Result<(), tonic::transport::Error>>>,
}

impl ShuffleServer {
    /// Listen on `addr` (port 0 picks one) as `node_id` of `pipeline_id`,
    /// admitting channels of assignment `generation`.
    pub async fn bind(
        addr: SocketAddr,
        pipeline_id: &str,
        node_id: &str,
        generation: u64,
    ) -> Result<Self> {
        let bind_error = |source| ShuffleError::Bind {
            addr: addr.to_string(),
            source,
        };
        let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        let registry = Arc::new(Registry {
            pipeline_id: pipeline_id.to_string(),
            node_id: node_id.to_string(),
            generation: AtomicU64::new(generation),
            edges: Mutex::new(HashMap::new()),
        });
        let (shutdown, shutdown_rx) = watch::channel(false);
        let service = GrpcServer::new(Service {
            registry: Arc::clone(&registry),
            shutdown: shutdown_rx.clone(),
        })
        // Frames are bounded by each channel's credit, not by gRPC's
        // default 4 MiB message limit.
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
        let mut signal = shutdown_rx;
        let task = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
                    let _ = signal.wait_for(|stop| *stop).await;
                }),
        );
        Ok(Self {
            registry,
            addr,
            shutdown,
            task: Some(task),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URI senders connect to.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The current assignment generation.
    pub fn generation(&self) -> u64 {
        self.registry.generation()
    }

    /// Move to a new assignment generation: new channels must name it, and
    /// open channels of another generation are cut (`SLC-SHF-002`) at once.
    pub fn set_generation(&self, generation: u64) {
        self.registry
            .generation
            .store(generation, Ordering::Release);
        let edges: Vec<Arc<EdgeInbox>> = self
            .registry
            .edges
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for edge in edges {
            edge.poke_all();
        }
    }

    /// Start receiving `edge_id`: one channel from each of `senders`, each
    /// carrying batches of `schema`, each allowed `budget` in flight.
    pub fn receiver(
        &self,
        edge_id: &str,
        schema: SchemaRef,
        senders: Vec<String>,
        budget: CreditBudget,
    ) -> Result<ShuffleReceiver> {
        if senders.is_empty() {
            return Err(ShuffleError::InvalidConfig {
                detail: format!("edge '{edge_id}' has no senders"),
            });
        }
        for (i, sender) in senders.iter().enumerate() {
            if senders[..i].contains(sender) {
                return Err(ShuffleError::InvalidConfig {
                    detail: format!("sender '{sender}' is listed twice for edge '{edge_id}'"),
                });
            }
        }
        let mut edges = self.registry.edges.lock();
        if edges.get(edge_id).and_then(Weak::upgrade).is_some() {
            return Err(ShuffleError::InvalidConfig {
                detail: format!("edge '{edge_id}' already has a receiver on this node"),
            });
        }
        let inbox = Arc::new(EdgeInbox::new(edge_id, schema, senders, budget));
        edges.insert(edge_id.to_string(), Arc::downgrade(&inbox));
        Ok(ShuffleReceiver::new(inbox, Arc::clone(&self.registry)))
    }

    /// Stop: cut every open channel (their senders see `SLC-SHF-005`) and
    /// wait for the server to stop.
    pub async fn shutdown(mut self) {
        self.stop();
        if let Some(task) = self.task.take() {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => warn!(%error, "shuffle server stopped with an error"),
                Err(error) => warn!(%error, "shuffle server task failed"),
            }
        }
    }

    fn stop(&self) {
        let _ = self.shutdown.send(true);
    }
}

impl Drop for ShuffleServer {
    fn drop(&mut self) {
        self.stop();
    }
}
