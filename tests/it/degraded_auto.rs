//! Automatic degraded mode: enrich's error budgets put the deployment in degraded mode and
//! take it out again, each after a run of windows; an operator's switch overrides both ways.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use npcmem_store::switches;
use npcmem_tests::fixtures::Pair;
use npcmem_tests::{TestEnv, free_port, http_get, wait_until};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);

fn context_request(pair: &Pair) -> Vec<u8> {
    serde_json::to_vec(&json!({"npc_id": pair.npc_id, "player_id": pair.player_id, "max_tokens": 256}))
        .expect("json serialises")
}

/// Four requesters asking enrich about `pair_for(i)` until `stop`.
fn load(env: &TestEnv, stop: Arc<AtomicBool>, fresh_pairs: bool) -> Vec<tokio::task::JoinHandle<()>> {
    let shared = Arc::new(Pair::new());
    (0..4)
        .map(|_| {
            let (nats, subject, stop, shared) =
                (env.nats.clone(), env.subject("enrich.request"), stop.clone(), shared.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let payload = if fresh_pairs { context_request(&Pair::new()) } else { context_request(&shared) };
                    let _ = tokio::time::timeout(Duration::from_secs(2), nats.request(subject.clone(), payload.into()))
                        .await;
                }
            })
        })
        .collect()
}

async fn degraded(env: &TestEnv) -> bool {
    let mut connection = env.pool.acquire().await.expect("a connection");
    switches::read(&mut connection).await.expect("the switches read").degraded
}

async fn health(port: u16) -> Value {
    let (_, body) = http_get(port, "/healthz").await.expect("/healthz answers");
    serde_json::from_str(&body).expect("/healthz is JSON")
}

async fn set_degraded(env: &TestEnv, value: Value) {
    let mut connection = env.pool.acquire().await.expect("a connection");
    switches::set(&mut connection, "degraded", &value, "test").await.expect("the switch sets");
}

#[tokio::test]
async fn a_missed_cache_budget_degrades_until_hits_return_and_the_switch_overrides_both_ways() {
    let env = TestEnv::new().await;
    assert!(!degraded(&env).await, "a new deployment starts in auto and not degraded");
    let port = free_port();
    let enrich = env.spawn_enrich(&[
        "--http-addr",
        &format!("127.0.0.1:{port}"),
        "--budget-window-ms",
        "1000",
        "--budget-enter-windows",
        "2",
        "--budget-leave-windows",
        "2",
    ]);

    // Every request about a new pair misses the cache: the hit rate is 0, below 0.5.
    let stop = Arc::new(AtomicBool::new(false));
    let requesters = load(&env, stop.clone(), true);
    wait_until(WAIT, "two windows of cache misses degrade the deployment", || degraded(&env)).await;
    let report = health(port).await;
    assert_eq!(report["status"], "degraded", "{report}");
    assert!(report["checks"]["budgets_breached"].as_array().unwrap().contains(&json!("cache_hit_rate")), "{report}");
    let recorded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM admin_actions
          WHERE action = 'degraded.budget_breached' AND actor = 'auto:enrich' AND details->>'check' = 'cache_hit_rate'",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(recorded, 1, "the breach is in the admin log once");
    let (_, metrics) = http_get(port, "/metrics").await.expect("/metrics answers");
    assert!(metrics.contains("npcmem_error_budget_breached{check=\"cache_hit_rate\"} 1"), "{metrics}");

    // An operator's false wins over the breach, and auto follows the budgets again.
    set_degraded(&env, json!(false)).await;
    assert!(!degraded(&env).await, "forced off while breached");
    set_degraded(&env, json!("auto")).await;
    assert!(degraded(&env).await, "auto: breached again");

    // The same pair over and over: nearly every lookup hits, above the 0.7 target.
    stop.store(true, Ordering::Relaxed);
    for requester in requesters {
        requester.await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let requesters = load(&env, stop.clone(), false);
    wait_until(WAIT, "two windows of hits end degraded mode", || async { !degraded(&env).await }).await;
    let report = health(port).await;
    assert_eq!(report["checks"]["error_budgets_met"], true, "{report}");
    stop.store(true, Ordering::Relaxed);
    for requester in requesters {
        requester.await.unwrap();
    }
    let met: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM admin_actions WHERE action = 'degraded.budget_met' AND actor = 'auto:enrich'",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert!(met >= 1, "the recovery is in the admin log");

    // An operator's true wins over met budgets.
    set_degraded(&env, json!(true)).await;
    assert!(degraded(&env).await, "forced on while every budget is met");
    set_degraded(&env, json!("auto")).await;

    // A stopped instance takes its reports with it.
    enrich.stop().await;
    assert_eq!(env.count("SELECT count(*) FROM error_budget_checks").await, 0);
    env.cleanup().await;
}
