//! `deploy/local/up` checks JetStream before it builds or starts anything: against a NATS
//! server with no room for the world's streams it says so in one message with the fix,
//! exits non-zero and leaves nothing running and no stream behind.

use std::path::Path;

use npcmem_tests::nats_server::PrivateNats;

#[tokio::test]
async fn up_against_a_nats_without_room_says_why_and_starts_nothing() {
    let scratch = std::env::temp_dir().join(format!("npcmem-up-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&scratch).unwrap();
    let config = scratch.join("small.conf");
    std::fs::write(&config, "jetstream { max_file_store: 64MB }\n").unwrap();
    let nats = PrivateNats::start_with(Some(&config), Vec::new()).await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository");
    let local = scratch.join("local");
    let output = tokio::process::Command::new("bash")
        .arg(root.join("deploy/local/up"))
        .env("NPCMEM_NATS_URL", nats.url())
        .env("NPCMEM_LOCAL_DIR", &local)
        .env("NPCMEM_SKIP_BUILD", "1")
        .env_remove("NPCMEM_PRIVATE_SERVERS")
        .output()
        .await
        .expect("bash runs up");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "up fails: {stderr}");
    assert!(stderr.contains("has no room for this world's 6 streams, which reserve 1.5 GiB"), "{stderr}");
    assert!(stderr.contains("insufficient storage resources"), "JetStream's own words: {stderr}");
    assert!(stderr.contains("Fix:") && stderr.contains("NPCMEM_LIMITS_STREAM_MAX_BYTES"), "{stderr}");
    assert!(stderr.lines().count() <= 5, "one message, not a screen of logs: {stderr}");
    let running: Vec<_> = std::fs::read_dir(local.join("run"))
        .map(|entries| entries.flatten().map(|e| e.file_name()).filter(|n| n != ".lock").collect())
        .unwrap_or_default();
    assert!(running.is_empty(), "nothing started or recorded: {running:?}");
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let streams: Vec<String> =
        futures::StreamExt::collect::<Vec<_>>(js.stream_names()).await.into_iter().flatten().collect();
    assert!(streams.is_empty(), "no stream left behind, the probe included: {streams:?}");
    let _ = std::fs::remove_dir_all(&scratch);
}
