//! Told from the right side: a threat the player made to one NPC, passed on by gossip,
//! reads as the victim's own experience, then as something the victim told, then as
//! something a third NPC heard about the victim.

use npcmem_tests::fixtures::{self, Pair};

use super::*;

/// The NPC's "Things you know" once it holds `line` (a loaded machine may answer a first
/// request before the knowledge has loaded).
async fn knowledge_of(env: &TestEnv, npc: Uuid, line: &str) -> String {
    let request = json!({"npc_id": npc, "player_id": Uuid::new_v4(), "max_tokens": 1024});
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let knowledge = inputs::knowledge_section(&env.request_json("enrich.request", &request).await);
        if knowledge.contains(line) {
            return knowledge;
        }
        assert!(std::time::Instant::now() < deadline, "waited for {line:?}, the NPC knows: {knowledge}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_threat_reads_from_each_holders_side_along_a_three_hop_chain() {
    let env = TestEnv::new().await;
    let ingest = env.spawn_ingest(&[]);
    let extract = env.spawn_extract(&[]);
    let gossip = spawn(&env);
    let enrich = env.spawn_enrich(&[]);
    let (hale, brom, tobin) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    for (npc, name) in [(hale, "Hale"), (brom, "Brom"), (tobin, "Tobin")] {
        world(&env, "world.npc_profile", json!({"npc_id": npc, "name": name})).await;
    }
    move_and_wait(&env, &[(hale, "gate"), (brom, "gate"), (tobin, "market")]).await;

    // Aria threatens Hale the guard.
    let pair = Pair { npc_id: hale, player_id: Uuid::new_v4() };
    let mut conversation = fixtures::conversation(
        Uuid::new_v4(),
        &pair,
        &["Open the gate.", "Curfew. Nobody passes.", "Open it or I'll cut your throat.", "...Fine. Go."],
    );
    conversation["npc"]["name"] = json!("Hale");
    env.publish(&env.subject("conversation.ended"), fixtures::bytes(&conversation), None).await;
    wait_rows(&env, "Hale learned of the threat", "SELECT count(*) FROM knowledge_facts", 1).await;
    let own = knowledge_of(&env, hale, "- Aria threatened you: \"Open it or I'll cut your throat.\"").await;
    assert!(!own.contains("told you") && !own.contains("believe"), "Hale's own experience is no hearsay: {own}");
    // Asked about Aria herself, Hale recalls the threat once: as his memory, not again as knowledge.
    let request = json!({"npc_id": hale, "player_id": pair.player_id, "max_tokens": 1024});
    let reply = env.request_json("enrich.request", &request).await;
    let sections = reply["sections"].as_array().cloned().unwrap_or_default();
    let memory = sections.iter().find(|s| s["provider"] == "memory").and_then(|s| s["content"].as_str());
    assert!(
        memory.is_some_and(|m| m.contains("- Aria threatened you: \"Open it or I'll cut your throat.\" (")),
        "{reply}"
    );
    assert!(!inputs::knowledge_section(&reply).contains("Aria threatened you"), "shown twice: {reply}");

    // Hale tells Brom at the gate; Brom walks to the market and tells Tobin.
    let mut leader = ticker(&env, 10).await;
    ticks(&mut leader, 2).await;
    wait_rows(&env, "Brom heard it", "SELECT count(*) FROM knowledge_facts", 2).await;
    move_and_wait(&env, &[(brom, "market")]).await;
    ticks(&mut leader, 3).await;
    wait_rows(&env, "Tobin heard it", "SELECT count(*) FROM knowledge_facts", 3).await;

    let heard = "- Hale told you Aria threatened them: \"Open it or I'll cut your throat.\" (you half believe it)";
    knowledge_of(&env, brom, heard).await;
    let retold = "- Brom told you Aria threatened Hale: \"Open it or I'll cut your throat.\" (you half believe it)";
    knowledge_of(&env, tobin, retold).await;
    let parties: Vec<(Option<Uuid>, Option<Uuid>)> =
        sqlx::query_as("SELECT actor_id, target_id FROM knowledge_facts ORDER BY hop_count")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(parties, vec![(Some(pair.player_id), Some(hale)); 3], "every copy knows who did what to whom");

    enrich.stop().await;
    gossip.stop().await;
    extract.stop().await;
    ingest.stop().await;
    env.cleanup().await;
}
