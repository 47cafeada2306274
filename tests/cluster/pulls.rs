//! Three extract replicas that start together on a new durable each create it and pull.
//! nats-server 2.9.10 then keeps only one of the three pulls (measured: the durable showed
//! one waiting pull for 34 s). Each replica must notice the missing idle heartbeats and
//! pull again, rather than idle until its lost pull would have expired (six heartbeats,
//! 30 s) while the first replica takes every job.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use npcmem_tests::nats_cluster::NatsCluster;
use npcmem_tests::{TestEnv, admin_database_url};

use crate::failover::{EXTRACT_REPLICAS, NODES, extract_pulls_waiting, start_pipeline, stop_pipeline};

/// Two missed heartbeats (10 s) and the time to pull again, with room for a busy machine;
/// a lost pull expires only after 30 s.
const ALL_PULLING_WITHIN: Duration = Duration::from_secs(20);
/// How long the test waits for the first pull, and then for all of them.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

/// Seconds from the first waiting pull until every replica has one, if that happens before
/// [`GIVE_UP_AFTER`]; and each sample as (seconds since the services started, pulls).
async fn watch_pulls(env: &TestEnv) -> (Option<Duration>, Vec<(f64, usize)>) {
    let started = Instant::now();
    let mut first_pull = None;
    let mut samples = Vec::new();
    while started.elapsed() < GIVE_UP_AFTER {
        let waiting = extract_pulls_waiting(env).await;
        samples.push((started.elapsed().as_secs_f64(), waiting));
        if waiting > 0 && first_pull.is_none() {
            first_pull = Some(Instant::now());
        }
        if waiting >= EXTRACT_REPLICAS {
            return (first_pull.map(|at| at.elapsed()), samples);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (None, samples)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_on_a_new_durable_all_pull_within_two_heartbeats() {
    let cluster = NatsCluster::start(NODES).await;
    let env = TestEnv::with_stream_replicas(&cluster.url(0), &admin_database_url(), NODES).await;
    // No durable yet: the three extract replicas create it as they start.
    let services = start_pipeline(&env, &cluster);
    let outcome = AssertUnwindSafe(watch_pulls(&env)).catch_unwind().await;
    let exits = AssertUnwindSafe(stop_pipeline(services)).catch_unwind().await;
    env.cleanup().await;
    drop(cluster);
    let (all_pulling_after, samples) = outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    let exits = exits.unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    let changes: Vec<String> = samples
        .iter()
        .enumerate()
        .filter(|(index, (_, waiting))| *index == 0 || samples[index - 1].1 != *waiting)
        .map(|(_, (at, waiting))| format!("{at:.1} s: {waiting}"))
        .collect();
    println!("pulls waiting on the new extract durable (since the services started): {}", changes.join(", "));
    for (name, exit) in &exits {
        assert!(exit.is_ok(), "{name} kept running, then stopped on SIGTERM: {exit:?}");
    }
    let all_pulling_after = all_pulling_after.unwrap_or_else(|| {
        panic!("not every extract replica had a pull waiting within {GIVE_UP_AFTER:?}: {changes:?}")
    });
    assert!(
        all_pulling_after <= ALL_PULLING_WITHIN,
        "every extract replica pulls within {ALL_PULLING_WITHIN:?} of the first, not when its lost pull \
         expires: {:.1} s ({changes:?})",
        all_pulling_after.as_secs_f64()
    );
}
