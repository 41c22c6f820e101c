//! Rows routed by vnode arrive exactly once at their owner.

use std::collections::HashMap;

use sluice_shuffle::{CreditBudget, OwnerTable, ShuffleEvent, ShuffleSender};

use crate::common::*;

/// xorshift64*: deterministic pseudo-random numbers without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_reach_their_vnode_owner_exactly_once() {
    const VNODES: u32 = 16;
    let nodes: Vec<String> = ["n0", "n1", "n2"].iter().map(|s| s.to_string()).collect();
    // An uneven owner table, as rendezvous placement would give.
    let owners: Vec<u32> = (0..VNODES)
        .map(|v| [0, 1, 2, 2, 1][v as usize % 5])
        .collect();
    let table = OwnerTable::new(nodes.clone(), owners.clone()).unwrap();

    let mut servers = Vec::new();
    for node in &nodes {
        servers.push(server(node, 7).await);
    }
    let endpoints: HashMap<String, String> = nodes
        .iter()
        .zip(&servers)
        .map(|(n, s)| (n.clone(), s.endpoint()))
        .collect();
    // Every node receives from the two others; small budgets so the
    // consumers' pace matters.
    let budget = CreditBudget::new(4, 4096).unwrap();
    let mut consumers = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let others: Vec<String> = nodes.iter().filter(|n| *n != node).cloned().collect();
        let receiver = servers[i].receiver(EDGE, schema(), others, budget).unwrap();
        consumers.push(tokio::spawn(async move {
            let mut rows = Vec::new();
            let mut ended = false;
            while let Some(event) = receiver.next().await {
                match event.unwrap() {
                    ShuffleEvent::Data(b) => {
                        let vnodes = b
                            .column(1)
                            .as_any()
                            .downcast_ref::<arrow::array::UInt32Array>()
                            .unwrap()
                            .values()
                            .to_vec();
                        rows.extend(keys(&b).into_iter().zip(vnodes));
                    }
                    ShuffleEvent::EndOfStream => ended = true,
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert!(ended);
            rows
        }));
    }

    let mut producers = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let mut sender =
            ShuffleSender::connect(identity(node, 7), schema(), 1, table.clone(), &endpoints)
                .await
                .unwrap();
        producers.push(tokio::spawn(async move {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1));
            let mut sent = Vec::new();
            let mut local = Vec::new();
            for b in 0..20 {
                let len = 1 + (rng.next() % 50) as usize;
                let ks: Vec<i64> = (0..len)
                    .map(|r| (i as i64) * 1_000_000 + b * 1000 + r as i64)
                    .collect();
                let vs: Vec<u32> = (0..len)
                    .map(|_| (rng.next() % VNODES as u64) as u32)
                    .collect();
                sent.extend(ks.iter().copied().zip(vs.iter().copied()));
                if let Some(mine) = sender.send(&batch(ks, vs)).await.unwrap() {
                    let vnodes = mine
                        .column(1)
                        .as_any()
                        .downcast_ref::<arrow::array::UInt32Array>()
                        .unwrap()
                        .values()
                        .to_vec();
                    local.extend(keys(&mine).into_iter().zip(vnodes));
                }
            }
            sender.finish().await.unwrap();
            (sent, local)
        }));
    }

    let mut all_sent = Vec::new();
    let mut received: Vec<Vec<(i64, u32)>> = vec![Vec::new(); 3];
    for (i, p) in producers.into_iter().enumerate() {
        let (sent, local) = p.await.unwrap();
        all_sent.extend(sent);
        // Local rows are short-circuited, never sent to the node itself.
        received[i].extend(local);
    }
    for (i, c) in consumers.into_iter().enumerate() {
        received[i].extend(c.await.unwrap());
    }
    for (i, rows) in received.iter_mut().enumerate() {
        let mut expected: Vec<(i64, u32)> = all_sent
            .iter()
            .copied()
            .filter(|(_, v)| owners[*v as usize] as usize == i)
            .collect();
        expected.sort_unstable();
        rows.sort_unstable();
        assert!(!expected.is_empty());
        assert_eq!(*rows, expected, "node n{i}");
    }
    for s in servers {
        s.shutdown().await;
    }
}
