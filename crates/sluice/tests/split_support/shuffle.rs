//! Nodes of a shuffled split in one process, each with its own shuffle
//! server on loopback.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use sluice::split::{CreditBudget, OwnerTable, ShuffleServer, ShuffleSetup, VnodePlacement};
use sluice::Database;

/// The pipeline id every test node shares.
pub const PIPELINE: &str = "shuffled";

/// Servers for `nodes` nodes on loopback, and the owner table.
pub async fn servers(nodes: usize, owner: &[u32]) -> (Vec<Arc<ShuffleServer>>, OwnerTable) {
    let names: Vec<String> = (0..nodes).map(|n| format!("n{n}")).collect();
    let mut servers = Vec::new();
    for name in &names {
        let addr = "127.0.0.1:0".parse().unwrap();
        servers.push(Arc::new(
            ShuffleServer::bind(addr, PIPELINE, name, 1).await.unwrap(),
        ));
    }
    (servers, OwnerTable::new(names, owner.to_vec()).unwrap())
}

/// Open node `n` of the split with its shuffle and the script.
pub async fn open_node(
    dir: &Path,
    n: usize,
    servers: &[Arc<ShuffleServer>],
    table: &OwnerTable,
    batch: u64,
    script: &str,
    budget: CreditBudget,
) -> sluice::Result<Database> {
    let name = format!("n{n}");
    let endpoints: HashMap<String, String> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("n{i}"), s.endpoint()))
        .collect();
    let setup = ShuffleSetup::new(
        &name,
        PIPELINE,
        1,
        table.clone(),
        endpoints,
        Arc::clone(&servers[n]),
    )?
    // Every node of a test starts at once: a node that never opens its
    // channels is given up on in seconds.
    .with_patience(std::time::Duration::from_secs(3))
    .with_budget(budget);
    let placement = VnodePlacement::new(table.vnode_count(), setup.owned_vnodes()).unwrap();
    let db = Database::builder()
        .base_dir(dir)
        .split(&name, placement)?
        .shuffle(setup)?
        .open()
        .await?;
    db.execute(&script.replace("BATCH", &batch.to_string()))
        .await?;
    Ok(db)
}

/// Run `script` (its `BATCH` replaced by `batch`) to its end on `db`, one
/// node without a shuffle: the reference a split's nodes are held to.
pub async fn run_reference(db: Database, script: &str, batch: u64) {
    db.execute(&script.replace("BATCH", &batch.to_string()))
        .await
        .unwrap();
    tokio::time::timeout(super::LIMIT, db.run_to_completion())
        .await
        .expect("in time")
        .unwrap();
    db.shutdown().await.unwrap();
}
