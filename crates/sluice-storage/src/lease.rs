//! The store lease: one pipeline at a time writes a checkpoint store.
//!
//! A state directory is guarded by an OS lock on its `LOCK` file, but an
//! object store (a bucket, a `file://` folder, a store handed in by the
//! embedding program) has no OS lock. Two pipelines on one store would
//! reserve each other's attempt ids, delete each other's in-flight blobs as
//! "abandoned" and prune each other's checkpoints. The lease is the guard:
//! an object `LEASE` at the root of the store that names its holder.
//!
//! # Architecture
//!
//! ```text
//!   pipeline A                         store                      pipeline B
//!   acquire ── put(Create) ──────────▶ LEASE {owner, host, pid,
//!                                            acquired_ms, expires_ms}
//!   every ttl/3: renew ── put(Update v) ▶ LEASE (new version v')
//!                                            ◀── put(Create): AlreadyExists
//!                                            ◀── get: live → SLC-STO-006 names A
//!   close: release ── delete if ours ▶ (gone)  ◀── put(Create): B holds it
//!
//!   A killed: LEASE stays; past expires_ms (or at once, when B runs on A's
//!   host and A's pid is gone) B takes it over with put(Update v_stale):
//!   of two takers only one matches v_stale.
//! ```
//!
//! Every write is conditional where the store can do it: `PutMode::Create`
//! to acquire (every `object_store` store that checkpoints can go to
//! supports it; S3 needs its default `conditional_put = etag`) and
//! `PutMode::Update` with the version read to renew and to take over.
//!
//! **Stores without conditional update.** `object_store`'s local file
//! system (`file://` URLs) refuses `PutMode::Update` (`NotImplemented`).
//! There renewal reads the lease, checks it is still this holder's and
//! still live when the write starts, and overwrites it; only the holder
//! writes a live lease, so this is safe (a holder paused past the expiry
//! between its read and its write reads again, then takes the lapsed
//! lease back like any taker, see `Held::renew_without_update`). A
//! stale lease is taken over by deleting it and creating a new one with
//! `PutMode::Create`: of two takers only one create succeeds, but a taker
//! slow enough to delete the *winner's* fresh lease (after reading the
//! stale one) would then create its own. The winner's next renewal (at most
//! `ttl/3` later) finds the lease not its own and marks it lost, which
//! fails that pipeline's next checkpoint with [`StorageError::LeaseLost`]
//! instead of letting both write. Clocks: expiry compares the holder's
//! wall clock with the taker's, so the ttl must exceed their skew.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StorageError};
use crate::liveness::process_is_alive;

/// The lease object's key under the store's prefix.
pub const LEASE_KEY: &str = "LEASE";

/// What the lease object holds (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Unique per acquisition: `<host>:<pid>:<start ns>:<n>`.
    pub owner: String,
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// When it was acquired (ms since the epoch, holder's clock).
    pub acquired_ms: i64,
    /// When it lapses unless renewed (ms since the epoch, holder's clock).
    pub expires_ms: i64,
}

impl LeaseRecord {
    /// For messages: who, where, and when the lease lapses.
    fn describe(&self, now_ms: i64) -> String {
        let left = self.expires_ms - now_ms;
        let expiry = if left > 0 {
            format!("lease expires in {:.1} s", left as f64 / 1000.0)
        } else {
            format!("lease expired {:.1} s ago", -left as f64 / 1000.0)
        };
        format!(
            "owner {}, host {}, pid {}, {expiry}",
            self.owner, self.host, self.pid
        )
    }

    /// Whether a taker at `now_ms` may replace this lease: it lapsed, or
    /// its holder ran on this host and its process is gone (a crashed
    /// pipeline restarted on the same machine need not wait for expiry).
    fn is_stale(&self, now_ms: i64, host: &str) -> bool {
        self.expires_ms <= now_ms || (self.host == host && !process_is_alive(self.pid))
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// This machine's name: the kernel's (`/proc/sys/kernel/hostname`), else
/// `$HOSTNAME`, else `unknown-host` (then only expiry frees a lease).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "unknown-host".to_string())
}

fn new_owner(host: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{host}:{}:{started}:{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Tries before acquisition gives up on a lease that keeps changing.
const ACQUIRE_TRIES: usize = 8;

struct Held {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: String,
    ttl: Duration,
    host: String,
    owner: String,
    acquired_ms: i64,
    /// The version of the lease object this holder wrote last.
    version: tokio::sync::Mutex<UpdateVersion>,
    /// Set when a renewal found the lease gone or someone else's.
    lost: AtomicBool,
    released: AtomicBool,
    /// Until when this holder may trust its lease without hearing from
    /// the store (monotonic): the start of the last successful write plus
    /// the ttl. A process paused past it (SIGSTOP, a VM stall) must not
    /// write until a renewal succeeds again, because a taker may already
    /// hold the store; the lease object's own `expires_ms` is later than
    /// this, so the holder stops trusting before anyone can take over.
    trusted_until: std::sync::Mutex<Instant>,
    /// See [`Held::test_pause_after_read`].
    #[cfg(test)]
    test_gate: std::sync::Mutex<Option<Arc<TestGate>>>,
}

/// A pause point for tests; see [`Held::test_pause_after_read`].
#[cfg(test)]
#[derive(Default)]
pub(crate) struct TestGate {
    pub(crate) reached: tokio::sync::Notify,
    pub(crate) resume: tokio::sync::Notify,
}

/// A held lease on one store; see the module docs. Renewed in the
/// background after [`StoreLease::keep_renewed`]; released by
/// [`StoreLease::release`] (or, best effort, when dropped).
pub struct StoreLease {
    held: Arc<Held>,
    renewer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for StoreLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLease")
            .field("store", &self.held.url)
            .field("owner", &self.held.owner)
            .finish()
    }
}

impl Held {
    fn record(&self) -> LeaseRecord {
        let ttl = i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX);
        LeaseRecord {
            owner: self.owner.clone(),
            host: self.host.clone(),
            pid: std::process::id(),
            acquired_ms: self.acquired_ms,
            expires_ms: now_ms().saturating_add(ttl),
        }
    }

    fn body(&self) -> PutPayload {
        // Strings and integers always encode; an empty body would read
        // back as "an unreadable lease", which no one takes over.
        PutPayload::from_bytes(Bytes::from(
            serde_json::to_vec(&self.record()).unwrap_or_default(),
        ))
    }

    fn err(&self, source: object_store::Error) -> StorageError {
        StorageError::ObjectStore {
            path: format!("{}/{LEASE_KEY}", self.url.trim_end_matches('/')),
            source,
        }
    }

    async fn put(&self, mode: PutMode) -> object_store::Result<UpdateVersion> {
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        let r = self.store.put_opts(&self.path, self.body(), opts).await?;
        Ok(r.into())
    }

    /// The lease object now, with its version; None when absent. An object
    /// that does not parse is reported as held by "an unreadable lease".
    async fn read(
        &self,
    ) -> Result<Option<(std::result::Result<LeaseRecord, String>, UpdateVersion)>> {
        let got = match self.store.get(&self.path).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.err(e)),
        };
        let version = UpdateVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        };
        let bytes = got.bytes().await.map_err(|e| self.err(e))?;
        let record = serde_json::from_slice::<LeaseRecord>(&bytes)
            .map_err(|e| format!("an unreadable lease object ({e})"));
        Ok(Some((record, version)))
    }

    /// A write of the lease that started at `sent` succeeded.
    fn trust_from(&self, sent: Instant) {
        *self
            .trusted_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = sent + self.ttl;
    }

    fn lost(&self, message: String) -> StorageError {
        self.lost.store(true, Ordering::SeqCst);
        StorageError::LeaseLost {
            store: self.url.clone(),
            message,
        }
    }

    async fn renew(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(StorageError::LeaseLost {
                store: self.url.clone(),
                message: "an earlier renewal found it gone".into(),
            });
        }
        let mut version = self.version.lock().await;
        let sent = Instant::now();
        match self.put(PutMode::Update(version.clone())).await {
            Ok(v) => {
                *version = v;
                self.trust_from(sent);
                Ok(())
            }
            Err(
                object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. },
            ) => {
                let now = self.read().await?;
                Err(self.lost(match now {
                    None => "the lease object was removed".into(),
                    Some((Ok(r), _)) => format!("it is now held by {}", r.describe(now_ms())),
                    Some((Err(e), _)) => format!("the store now holds {e}"),
                }))
            }
            Err(object_store::Error::NotImplemented { .. }) => self.renew_without_update().await,
            Err(e) => Err(self.err(e)),
        }
    }

    /// Renewal on a store without conditional update (a local file
    /// system): only the holder writes a live lease, so check it is still
    /// ours and still live, then overwrite it.
    ///
    /// "Still live" is checked after the read, against the expiry the read
    /// returned: a holder paused between its read and its write (SIGSTOP, a
    /// VM stall) may wake to a lease a taker replaced meanwhile, and must
    /// not overwrite the taker's. A read whose record lapsed before the
    /// write is therefore repeated; if the fresh read still finds this
    /// holder's lapsed record, the holder is just another taker: it deletes
    /// the record and races on `PutMode::Create`, as takers do.
    async fn renew_without_update(&self) -> Result<()> {
        let sent = Instant::now();
        if self.read_own().await?.expires_ms > now_ms() {
            return self.overwrite(sent).await;
        }
        // The read may predate a pause: read again.
        let sent = Instant::now();
        if self.read_own().await?.expires_ms > now_ms() {
            return self.overwrite(sent).await;
        }
        match self.store.delete(&self.path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(self.err(e)),
        }
        match self.put(PutMode::Create).await {
            Ok(_) => {
                self.trust_from(sent);
                Ok(())
            }
            Err(object_store::Error::AlreadyExists { .. }) => {
                Err(self.lost("it lapsed and another pipeline took it over first".into()))
            }
            Err(e) => Err(self.err(e)),
        }
    }

    /// The lease record, if it is still this holder's; else the lease is
    /// lost, and the error says to whom.
    async fn read_own(&self) -> Result<LeaseRecord> {
        let record = match self.read().await? {
            Some((Ok(r), _)) if r.owner == self.owner => r,
            None => return Err(self.lost("the lease object was removed".into())),
            Some((Ok(r), _)) => {
                return Err(self.lost(format!("it is now held by {}", r.describe(now_ms()))))
            }
            Some((Err(e), _)) => return Err(self.lost(format!("the store now holds {e}"))),
        };
        #[cfg(test)]
        self.test_pause_after_read().await;
        Ok(record)
    }

    /// Overwrite the lease with a fresh expiry; the write started at `sent`.
    async fn overwrite(&self, sent: Instant) -> Result<()> {
        self.put(PutMode::Overwrite)
            .await
            .map_err(|e| self.err(e))?;
        self.trust_from(sent);
        Ok(())
    }

    /// Tests hold a renewal between its read and its write here, to stand
    /// in for a process paused at that point: it signals `reached`, then
    /// waits for `resume`.
    #[cfg(test)]
    async fn test_pause_after_read(&self) {
        let gate = self
            .test_gate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(gate) = gate {
            gate.reached.notify_one();
            gate.resume.notified().await;
        }
    }

    async fn release(&self) -> Result<()> {
        if self.released.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // Remove it only while it is still ours: a lease taken over after
        // this holder stalled belongs to the taker.
        match self.read().await? {
            Some((Ok(r), _)) if r.owner == self.owner => {
                match self.store.delete(&self.path).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(self.err(e)),
                }
            }
            _ => {
                tracing::warn!(store = %self.url, "the lease was no longer ours at release");
                Ok(())
            }
        }
    }
}

impl StoreLease {
    /// Take the lease of the store under `prefix` of `store` (`url` names
    /// it in messages), valid for `ttl` past each renewal. A live lease of
    /// another holder is [`StorageError::Leased`], naming the holder; a
    /// stale one (see [`LeaseRecord`]) is taken over.
    pub async fn acquire(
        store: Arc<dyn ObjectStore>,
        prefix: &ObjectPath,
        url: &str,
        ttl: Duration,
    ) -> Result<StoreLease> {
        let host = host_name();
        let now = now_ms();
        let mut held = Held {
            store,
            path: prefix.clone().join(LEASE_KEY),
            url: url.to_string(),
            ttl,
            owner: new_owner(&host),
            host,
            acquired_ms: now,
            version: tokio::sync::Mutex::new(UpdateVersion {
                e_tag: None,
                version: None,
            }),
            lost: AtomicBool::new(false),
            released: AtomicBool::new(false),
            trusted_until: std::sync::Mutex::new(Instant::now()),
            #[cfg(test)]
            test_gate: std::sync::Mutex::new(None),
        };
        let mut last_holder = String::from("a lease that kept changing");
        for _ in 0..ACQUIRE_TRIES {
            let sent = Instant::now();
            match held.put(PutMode::Create).await {
                Ok(v) => {
                    held.trust_from(sent);
                    *held.version.get_mut() = v;
                    return Ok(StoreLease::new(held));
                }
                Err(object_store::Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(held.err(e)),
            }
            let Some((record, stale_version)) = held.read().await? else {
                continue; // released in between: create again
            };
            let now = now_ms();
            let record = match record {
                Ok(r) if !r.is_stale(now, &held.host) => {
                    return Err(StorageError::Leased {
                        store: held.url.clone(),
                        holder: r.describe(now),
                    })
                }
                Ok(r) => r,
                Err(unreadable) => {
                    return Err(StorageError::Leased {
                        store: held.url.clone(),
                        holder: unreadable,
                    })
                }
            };
            last_holder = record.describe(now);
            let sent = Instant::now();
            match held.put(PutMode::Update(stale_version)).await {
                Ok(v) => {
                    held.trust_from(sent);
                    tracing::warn!(store = %held.url, previous = %last_holder, "took over a stale checkpoint store lease");
                    *held.version.get_mut() = v;
                    return Ok(StoreLease::new(held));
                }
                // Someone renewed or took it first: look again.
                Err(object_store::Error::Precondition { .. }) => {}
                Err(object_store::Error::NotImplemented { .. }) => {
                    // No conditional update (local files): delete, then
                    // race on create (see the module docs).
                    match held.store.delete(&held.path).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                            tracing::warn!(store = %held.url, previous = %last_holder, "removed a stale checkpoint store lease");
                        }
                        Err(e) => return Err(held.err(e)),
                    }
                }
                Err(e) => return Err(held.err(e)),
            }
        }
        Err(StorageError::Leased {
            store: held.url.clone(),
            holder: last_holder,
        })
    }

    fn new(held: Held) -> Self {
        Self {
            held: Arc::new(held),
            renewer: std::sync::Mutex::new(None),
        }
    }

    /// Renew in the background every `ttl / 3` until released or dropped.
    /// Needs a tokio runtime. A renewal that finds the lease lost stops
    /// renewing; [`StoreLease::ensure_held`] reports it from then on.
    pub fn keep_renewed(&mut self) {
        let renewer = self
            .renewer
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if renewer.is_some() {
            return;
        }
        let weak: Weak<Held> = Arc::downgrade(&self.held);
        let every = (self.held.ttl / 3).max(Duration::from_millis(1));
        *renewer = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(held) = weak.upgrade() else { break };
                if held.released.load(Ordering::SeqCst) {
                    break;
                }
                match held.renew().await {
                    Ok(()) => {}
                    Err(e @ StorageError::LeaseLost { .. }) => {
                        tracing::error!(error = %e, "checkpoint store lease lost");
                        break;
                    }
                    // A store hiccup: try again next period (the lease
                    // lapses only after a whole ttl without renewal).
                    Err(e) => tracing::warn!(error = %e, "cannot renew the checkpoint store lease"),
                }
            }
        }));
    }

    /// Renew now (what the background task does every `ttl / 3`).
    pub async fn renew(&self) -> Result<()> {
        self.held.renew().await
    }

    /// `Ok` while no renewal has found the lease gone or taken over, it was
    /// not released, and a write of it succeeded within the last ttl (a
    /// holder that was paused longer stops trusting it until a renewal
    /// succeeds again).
    pub fn ensure_held(&self) -> Result<()> {
        if self.held.released.load(Ordering::SeqCst) {
            return Err(StorageError::LeaseLost {
                store: self.held.url.clone(),
                message: "it was released (the database was closed)".into(),
            });
        }
        if self.held.lost.load(Ordering::SeqCst) {
            return Err(StorageError::LeaseLost {
                store: self.held.url.clone(),
                message: "a renewal found it gone or held by another pipeline".into(),
            });
        }
        let trusted_until = *self
            .held
            .trusted_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if Instant::now() >= trusted_until {
            return Err(StorageError::LeaseLost {
                store: self.held.url.clone(),
                message: format!(
                    "it was not renewed within its ttl of {:?} (was this process paused?); \
                     another pipeline may hold the store now",
                    self.held.ttl
                ),
            });
        }
        Ok(())
    }

    /// Hold this holder's next renewal between its read of the lease and
    /// its write (see [`Held::test_pause_after_read`]).
    #[cfg(test)]
    pub(crate) fn pause_next_renewal_after_read(&self) -> Arc<TestGate> {
        let gate = Arc::new(TestGate::default());
        *self
            .held
            .test_gate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&gate));
        gate
    }

    /// This holder's owner id (as written in the lease object).
    pub fn owner(&self) -> &str {
        &self.held.owner
    }

    /// Stop renewing and remove the lease object if it is still ours. Once
    /// released, [`StoreLease::ensure_held`] fails.
    pub async fn release(&self) -> Result<()> {
        self.stop_renewing();
        self.held.release().await
    }

    fn stop_renewing(&self) {
        let renewer = self
            .renewer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(r) = renewer {
            r.abort();
        }
    }
}

impl Drop for StoreLease {
    fn drop(&mut self) {
        self.stop_renewing();
        if self.held.released.load(Ordering::SeqCst) {
            return;
        }
        // Dropped without release (a database dropped without shutdown):
        // give the store back if a runtime is still there; otherwise the
        // lease lapses after its ttl.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let held = Arc::clone(&self.held);
            rt.spawn(async move {
                if let Err(e) = held.release().await {
                    tracing::warn!(error = %e, "cannot release the checkpoint store lease");
                }
            });
        }
    }
}
