//! The node's shuffle endpoint: one gRPC server per node that admits
//! channels for every edge this node receives, fenced by the node's current
//! assignment generation.

use std::net::SocketAddr;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};
use tracing::warn;

use crate::config::{CreditBudget, MAX_FRAME_BYTES};
use crate::error::{Result, ShuffleError};
use crate::proto::shuffle_server::{Shuffle, ShuffleServer as GrpcServer};
use crate::proto::{Frame, ReceiverMessage};

use super::channel::run_channel;
use super::edge::EdgeInbox;
use super::registry::Registry;
use super::ShuffleReceiver;

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
        let registry = Arc::new(Registry::new(pipeline_id, node_id, generation));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let service = GrpcServer::new(Service {
            registry: Arc::clone(&registry),
            shutdown: shutdown_rx.clone(),
        })
        // Frames are bounded by the frame limit and each channel's credit,
        // not by gRPC's default 4 MiB message limit.
        .max_decoding_message_size(MAX_FRAME_BYTES);
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
        self.registry.set_generation(generation);
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
        self.receiver_waking(edge_id, schema, senders, budget, Arc::new(Notify::new()))
    }

    /// [`Self::receiver`] whose arrivals notify `wake`: one node's
    /// coordinator waits on a single wake for all of its edges (its
    /// `shuffle_work_wake`).
    pub fn receiver_waking(
        &self,
        edge_id: &str,
        schema: SchemaRef,
        senders: Vec<String>,
        budget: CreditBudget,
        wake: Arc<Notify>,
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
        let inbox = Arc::new(EdgeInbox::new(edge_id, schema, senders, budget, wake));
        self.registry.insert(&inbox)?;
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
