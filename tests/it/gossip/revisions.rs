//! Knowledge that changes after it was learned: contradictions, the per-NPC cap, and
//! a forgotten player.

use super::*;

#[tokio::test]
async fn contradicting_facts_supersede_or_doubt_keep_both_and_superseded_ones_stop_spreading() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (anna, bram, cole, dora) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let aria = Uuid::new_v4();
    // Anna saw Aria pay honestly (an observation: confidence 1.0); Bram was told she lies (0.8).
    let honest = observe(&env, anna, aria, "Aria is honest, she paid in full", &["trade"]).await;
    let liar = Uuid::new_v4();
    world(
        &env,
        "world.fact",
        json!({"fact_id": liar, "npc_ids": [bram], "subject_id": aria, "category": "player_trait",
        "content": "Aria is a liar", "tags": [], "importance": 0.7, "confidence": 0.8}),
    )
    .await;
    move_and_wait(&env, &[(anna, "inn"), (bram, "inn"), (cole, "square"), (dora, "well")]).await;
    wait_rows(&env, "facts", "SELECT count(*) FROM knowledge_facts", 2).await;
    let mut ticker = ticker(&env, 10).await;
    ticks(&mut ticker, 2).await;

    // Bram hears the honest account at 0.9 ≥ his 0.8: his belief is superseded, kept.
    let (bram_honest, confidence, _, _) = held(&env, bram, honest).await.expect("Bram heard it");
    assert_eq!(confidence, 0.9);
    let (bram_liar, confidence, superseded_by, _) = held(&env, bram, liar).await.unwrap();
    assert_eq!((confidence, superseded_by), (0.8, Some(bram_honest)), "superseded, kept with its confidence");
    // Anna hears the rumour at 0.7 < her 1.0: she doubts both (1.0 − 0.7/2; the rumour at 0.3).
    let (_, confidence, superseded_by, _) = held(&env, anna, honest).await.unwrap();
    assert_eq!((confidence, superseded_by), (0.65, None));
    let (_, confidence, _, tags) = held(&env, anna, liar).await.expect("Anna heard it");
    assert_eq!(confidence, 0.3);
    assert!(tags.contains(&"uncertain".to_owned()), "{tags:?}");
    let mut connection = env.pool.acquire().await.unwrap();
    let read_side =
        npcmem_store::context::knowledge(&mut connection, bram, Utc::now(), None, None, None, 50).await.unwrap();
    let contents: Vec<&str> = read_side.iter().map(|fact| fact.content.as_str()).collect();
    assert_eq!(contents, vec!["Aria is honest, she paid in full"], "a superseded fact leaves prompts");
    drop(connection);

    // Bram walks to the square: Cole hears the honest account from him, never the superseded rumour.
    move_and_wait(&env, &[(bram, "square")]).await;
    ticks(&mut ticker, 4).await;
    assert_eq!(held(&env, cole, honest).await.map(|h| h.1), Some(0.8));
    assert!(held(&env, cole, liar).await.is_none(), "a superseded fact does not spread");

    // Anna also knows much else of Aria on the same category: the check reads it all and
    // keeps only what the next observation could contradict.
    let mut unrelated = Vec::new();
    for day in 0..20 {
        unrelated.push(observe(&env, anna, aria, &format!("Aria bought bread on day {day}"), &["market"]).await);
    }
    wait_until(WAIT, "Anna learns the unrelated facts", || async {
        let mut all = true;
        for origin in &unrelated {
            all &= held(&env, anna, *origin).await.is_some();
        }
        all
    })
    .await;
    // Anna then sees Aria steal (learned by the world consumer, not the leader): her doubted
    // honest belief is superseded, and the leader stops spreading it after its next refresh.
    let theft = observe(&env, anna, aria, "Aria stole a purse at the market", &["theft"]).await;
    wait_until(WAIT, "the observation supersedes Anna's belief", || async {
        held(&env, anna, honest).await.is_some_and(|h| h.2.is_some())
    })
    .await;
    for origin in &unrelated {
        let (_, confidence, superseded_by, _) = held(&env, anna, *origin).await.unwrap();
        assert_eq!((confidence, superseded_by), (1.0, None), "a fact the theft does not contradict stays as it was");
    }
    move_and_wait(&env, &[(anna, "well")]).await;
    // Anna has the bread to tell as well: tick until Dora has heard the theft.
    for _ in 0..40 {
        if held(&env, dora, theft).await.is_some() {
            break;
        }
        ticks(&mut ticker, 1).await;
    }
    assert_eq!(held(&env, dora, theft).await.map(|h| h.1), Some(0.9));
    assert!(held(&env, dora, honest).await.is_none(), "the superseded belief stays with Anna");

    let learned = learned_events(&env).await;
    let bram_event = learned.iter().find(|event| event["fact"]["id"] == json!(bram_honest)).expect("Bram's event");
    assert_eq!(
        bram_event["fact"]["contradicted"],
        json!([{"fact_id": bram_liar, "outcome": "superseded", "confidence": null}])
    );
    gossip.stop().await;
    env.cleanup().await;
}

/// The right to be forgotten against a leader whose memory lags: a tick planned on the
/// player's facts after they were deleted stores nothing about them.
#[tokio::test]
async fn a_forgotten_player_is_not_gossiped_back_by_a_leader_that_has_not_heard() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let npcs: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
    let player = Uuid::new_v4();
    let other = author(&env, &npcs[..1], "The well ran dry", 0.9, 1.0, &[]).await;
    let rumour = Uuid::new_v4();
    world(
        &env,
        "world.fact",
        json!({"fact_id": rumour, "npc_ids": [npcs[0]], "subject_id": player, "category": "player_trait",
        "content": "The stranger cheats at dice", "importance": 0.95, "confidence": 1.0}),
    )
    .await;
    let placed: Vec<(Uuid, &str)> = npcs.iter().map(|npc| (*npc, "tavern")).collect();
    move_and_wait(&env, &placed).await;
    wait_rows(&env, "facts", "SELECT count(*) FROM knowledge_facts", 2).await;
    let mut ticker = ticker(&env, 1).await;
    ticks(&mut ticker, 1).await;
    let about_player = "SELECT count(*) FROM knowledge_facts WHERE subject_id = $1";
    let count_about = |sql: &'static str| {
        let pool = env.pool.clone();
        async move { sqlx::query_scalar::<_, i64>(sql).bind(player).fetch_one(&pool).await.unwrap() }
    };
    assert_eq!(count_about(about_player).await, 2, "the rumour went first (importance 0.95)");

    let mut transaction = env.pool.begin().await.unwrap();
    npcmem_store::privacy::forget_player(&mut transaction, player, Utc::now()).await.unwrap();
    transaction.commit().await.unwrap();
    // The next tick plans on memory that still holds the rumour twice; its write skips it.
    let report = ticker.tick().await.unwrap();
    assert_eq!(count_about(about_player).await, 0, "nothing about the player came back: {report:?}");
    ticks(&mut ticker, 6).await;
    assert_eq!(count_about(about_player).await, 0);
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM knowledge_facts WHERE origin_fact_id = $1")
            .bind(other)
            .fetch_one(&env.pool)
            .await
            .unwrap(),
        4,
        "the rest of the news still spreads"
    );
    assert_eq!(ticker.world.size().spreadable_facts, 4, "the leader forgot both copies of the rumour");
    let named =
        learned_events(&env).await.iter().filter(|event| event.to_string().contains(&player.to_string())).count();
    assert_eq!(named, 2, "only the two events from before the forget name the player");
    gossip.stop().await;
    env.cleanup().await;
}

/// Facts the per-NPC cap evicts leave the leader's memory, and a new fact evicted at once
/// is not announced.
#[tokio::test]
async fn facts_the_cap_evicts_stop_spreading_and_one_evicted_at_once_is_never_announced() {
    let env = TestEnv::new().await;
    let gossip = spawn(&env);
    let (teller, listener, fading) =
        teller_and_listener(&env, ("loft", "cellar"), ("The miller owes the baker", 0.6)).await;
    let mut ticker = ticker(&env, 10).await;
    ticks(&mut ticker, 1).await;
    assert_eq!(ticker.world.size().spreadable_facts, 1);
    fill_to_the_cap(&env, teller).await;
    // Learning one more makes 502: the cap drops the two least important, the new one too.
    let evicted_at_once = author(&env, &[teller], "The baker owes the miller", 0.55, 1.0, &[]).await;
    wait_until(WAIT, "the cap held", || async { env.count("SELECT count(*) FROM knowledge_forgotten").await == 2 })
        .await;
    assert_eq!(env.count("SELECT count(*) FROM knowledge_facts").await, 500);
    assert_eq!(confidence_of(&env, teller, fading).await, None);
    assert_eq!(confidence_of(&env, teller, evicted_at_once).await, None);
    ticks(&mut ticker, 2).await;
    assert_eq!(ticker.world.size().spreadable_facts, 0, "the leader forgot the evicted fact");
    move_and_wait(&env, &[(listener, "loft")]).await;
    assert_eq!(ticks(&mut ticker, 3).await, 0, "nothing left to tell");
    assert_eq!(confidence_of(&env, listener, fading).await, None);

    let learned = learned_events(&env).await;
    let origins: Vec<&Value> = learned.iter().map(|event| &event["fact"]["origin_fact_id"]).collect();
    assert_eq!(origins, vec![&json!(fading)], "the fact evicted at once was never announced");
    gossip.stop().await;
    env.cleanup().await;
}

/// A world fact about a player sent before the player was forgotten (a late or replayed
/// message) is dropped; one sent after is learned.
#[tokio::test]
async fn a_world_fact_sent_before_its_player_was_forgotten_is_not_learned() {
    let env = TestEnv::new().await;
    let (npc, player) = (Uuid::new_v4(), Uuid::new_v4());
    let about = |content: &str| {
        json!({"fact_id": Uuid::new_v4(), "npc_ids": [npc], "subject_id": player, "category": "player_trait",
               "content": content, "importance": 0.8})
    };
    world(&env, "world.fact", about("The stranger cheats at dice")).await;
    let mut transaction = env.pool.begin().await.unwrap();
    npcmem_store::privacy::forget_player(&mut transaction, player, Utc::now()).await.unwrap();
    transaction.commit().await.unwrap();
    world(&env, "world.fact", about("The stranger paid for a round")).await;
    let gossip = spawn(&env);
    wait_rows(&env, "the later fact", "SELECT count(*) FROM knowledge_facts", 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let contents: Vec<String> =
        sqlx::query_scalar("SELECT content FROM knowledge_facts").fetch_all(&env.pool).await.unwrap();
    assert_eq!(contents, vec!["The stranger paid for a round"]);
    gossip.stop().await;
    env.cleanup().await;
}
