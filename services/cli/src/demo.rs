//! `npcmem demo`: a scripted scene played through the running system (`deploy/local/up`)
//! over NATS only, as a game server would: a player trades with Brom the blacksmith, helps
//! him drive off bandits and threatens Hale the guard, who stands in the same square.
//! Prints Brom's enriched prompt before and after, the relationship values, the gossip
//! Brom heard and the story signals received, so a newcomer sees an NPC remember.

use std::io::Write;
use std::time::{Duration, Instant};

use async_nats::jetstream::message::PublishMessage;
use chrono::Utc;
use futures::StreamExt as _;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::Context;
use crate::connect::Bus;
use crate::error::CliError;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Give up when the scene has not played out within this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
}

/// The cast: fresh ids each run, so the demo can be played again and again.
struct Cast {
    blacksmith: Uuid,
    guard: Uuid,
    player: Uuid,
}

const PLAYER_NAME: &str = "Aria";

impl Cast {
    /// The market square of this run: gossip passes news between NPCs in one room, so a
    /// shared room would let an earlier run's Brom tell this one about another Aria.
    fn room(&self) -> String {
        format!("market-square-{}", &self.blacksmith.simple().to_string()[..8])
    }
}

fn persona() -> Value {
    json!({"name": "Brom", "role": "blacksmith", "personality": "gruff but fair", "speaking_style": "short sentences",
           "knowledge_domains": ["smithing", "weapons"]})
}

fn conversation(cast: &Cast, npc: Uuid, npc_name: &str, role: &str, factions: &[&str], lines: &[&str]) -> Value {
    let ended_at = Utc::now();
    let messages: Vec<Value> = lines
        .iter()
        .enumerate()
        .map(|(index, text)| json!({"speaker": if index % 2 == 0 { "player" } else { "npc" }, "text": text}))
        .collect();
    json!({
        "schema_version": 1, "conversation_id": Uuid::new_v4(), "npc_id": npc, "player_id": cast.player,
        "npc": {"name": npc_name, "role": role, "factions": factions},
        "player": {"name": PLAYER_NAME, "factions": []},
        "location": "Market Square", "started_at": ended_at - chrono::Duration::minutes(2),
        "ended_at": ended_at, "messages": messages,
    })
}

/// A core NATS request answered as JSON; an error object or no responder is a failure.
async fn request(bus: &Bus, suffix: &str, body: &Value) -> Result<Value, CliError> {
    let subject = bus.topology.subject(suffix);
    let payload = serde_json::to_vec(body).expect("json serialises");
    let reply = bus.client.request(subject.clone(), payload.into()).await.map_err(|error| CliError::Unreachable {
        dependency: "npcmem-enrich",
        target: subject.clone(),
        detail: format!("{error} (is the system running? start it with deploy/local/up)"),
    })?;
    let value: Value = serde_json::from_slice(&reply.payload)
        .map_err(|error| CliError::failed(&format!("{subject} answered with something that is not JSON"), error))?;
    if let Some(error) = value.get("error") {
        return Err(CliError::Failed(format!("{subject} answered with an error: {error}")));
    }
    Ok(value)
}

async fn publish(bus: &Bus, suffix: &str, body: &Value, msg_id: Option<String>) -> Result<(), CliError> {
    let subject = bus.topology.subject(suffix);
    let mut message = PublishMessage::build().payload(serde_json::to_vec(body).expect("json serialises").into());
    if let Some(id) = msg_id {
        message = message.message_id(id);
    }
    let acknowledged = bus
        .js
        .send_publish(subject.clone(), message)
        .await
        .map_err(|error| CliError::failed(&format!("cannot publish to {subject}"), error))?
        .await;
    acknowledged
        .map_err(|error| CliError::failed(&format!("{subject} was not stored (is the system running?)"), error))?;
    Ok(())
}

async fn prompt(bus: &Bus, cast: &Cast, message: &str) -> Result<Value, CliError> {
    request(
        bus,
        "enrich.request",
        &json!({"npc_id": cast.blacksmith, "player_id": cast.player, "message": message, "max_tokens": 1024,
                "npc": persona()}),
    )
    .await
}

fn print_prompt(out: &mut dyn Write, title: &str, reply: &Value) -> std::io::Result<()> {
    writeln!(out, "\n=== {title} ===")?;
    writeln!(out, "reputation: {}", reply["placeholders"]["reputation"].as_str().unwrap_or("?"))?;
    writeln!(out, "{}", reply["system_prompt"].as_str().unwrap_or("(no system prompt)"))?;
    Ok(())
}

pub async fn run(context: &Context, args: DemoArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout_secs.max(5));
    let bus = context.bus().await?;
    let cast = Cast { blacksmith: Uuid::new_v4(), guard: Uuid::new_v4(), player: Uuid::new_v4() };
    // Story signals about our cast, as a game server would receive them.
    let mut signals = bus
        .client
        .subscribe(bus.topology.subject("signal.>"))
        .await
        .map_err(|error| CliError::failed("cannot subscribe to the story signals", error))?;
    writeln!(
        out,
        "npcmem demo: Brom the blacksmith ({}), Hale the guard ({}), {PLAYER_NAME} the player ({})",
        cast.blacksmith, cast.guard, cast.player
    )?;

    let before = prompt(&bus, &cast, "Do you remember me?").await?;
    print_prompt(out, "Brom's prompt before the scene", &before)?;

    // Where everyone stands and what drives them (gossip needs both NPCs in one room).
    for (npc, name, role, faction, drives) in [
        (cast.blacksmith, "Brom", "blacksmith", "smiths_guild", json!({"social": 0.7, "safety": 0.6})),
        (cast.guard, "Hale", "guard", "city_guard", json!({"social": 0.6, "safety": 0.95})),
    ] {
        publish(
            &bus,
            "world.npc_profile",
            &json!({"npc_id": npc, "name": name, "role": role, "factions": [faction],
            "drives": drives, "at": Utc::now()}),
            None,
        )
        .await?;
        publish(&bus, "world.npc_moved", &json!({"npc_id": npc, "room_id": cast.room(), "at": Utc::now()}), None)
            .await?;
    }
    let scene = [
        (
            "trades with Brom",
            cast.blacksmith,
            "Brom",
            "blacksmith",
            "smiths_guild",
            vec![
                "I need a steel sword.",
                "Fifty gold for the finest blade in town.",
                "Deal, here is the gold.",
                "Pleasure doing business.",
            ],
        ),
        (
            "saves Brom's forge from bandits",
            cast.blacksmith,
            "Brom",
            "blacksmith",
            "smiths_guild",
            vec![
                "Bandits are raiding your forge! I will fight them alongside you!",
                "Together then, swords up!",
                "We drove them off. They will not be back.",
                "You saved my forge. Thank you for your help, I owe you.",
            ],
        ),
        (
            "insults and threatens Hale the guard",
            cast.guard,
            "Hale",
            "guard",
            "city_guard",
            vec!["Out of my way, you useless idiot. Watch your back, guard.", "Move along before I arrest you."],
        ),
        (
            "threatens Hale's life at the gate",
            cast.guard,
            "Hale",
            "guard",
            "city_guard",
            vec!["Open the gate or I'll cut your throat.", "...Go. Just go."],
        ),
    ];
    writeln!(out, "\n=== The scene ===")?;
    for (what, npc, name, role, faction, lines) in &scene {
        let document = conversation(&cast, *npc, name, role, &[faction], lines);
        let id = document["conversation_id"].as_str().map(str::to_owned);
        publish(&bus, "conversation.ended", &document, id).await?;
        writeln!(
            out,
            "- {PLAYER_NAME} {what}: {}",
            lines.iter().map(|line| format!("\"{line}\"")).collect::<Vec<_>>().join(" / ")
        )?;
    }

    // Wait until Brom remembers both scenes and has heard from Hale.
    let (memories, knowledge) = loop {
        let memories =
            request(&bus, "query.memories", &json!({"npc_id": cast.blacksmith, "player_id": cast.player})).await?;
        let knowledge = request(
            &bus,
            "query.knowledge",
            &json!({"npc_id": cast.blacksmith, "subject_id": cast.player, "limit": 10}),
        )
        .await?;
        let heard =
            knowledge["facts"].as_array().is_some_and(|facts| facts.iter().any(|fact| fact["source"] == "gossip"));
        let hale =
            request(&bus, "query.relationship", &json!({"npc_id": cast.guard, "player_id": cast.player})).await?;
        let hale_met_twice = hale["interaction_count"].as_u64().unwrap_or(0) >= 2;
        if memories["count"].as_u64().unwrap_or(0) >= 2 && heard && hale_met_twice {
            break (memories, knowledge);
        }
        if Instant::now() >= deadline {
            return Err(CliError::Failed(format!(
                "the scene did not play out within {} s (Brom remembers {} memories, gossip reached him: {heard}); \
                 are all six services running (deploy/local/up)?",
                args.timeout_secs,
                memories["count"].as_u64().unwrap_or(0)
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    writeln!(out, "\n=== What Brom remembers ===")?;
    for memory in memories["memories"].as_array().into_iter().flatten() {
        let tags: Vec<&str> = memory["tags"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        writeln!(out, "- {} ({})", memory["content"].as_str().unwrap_or("?"), tags.join(", "))?;
    }
    writeln!(out, "\n=== What Brom knows about {PLAYER_NAME} ===")?;
    for fact in knowledge["facts"].as_array().into_iter().flatten() {
        let how = match fact["source"].as_str() {
            Some("gossip") => "heard through gossip",
            Some("conversation") => "from his own dealings",
            Some(other) => other,
            None => "?",
        };
        writeln!(out, "- {} ({how}, confidence {})", fact["told"].as_str().unwrap_or("?"), fact["confidence"])?;
    }
    for (npc, name) in [(cast.blacksmith, "Brom"), (cast.guard, "Hale")] {
        let relationship =
            request(&bus, "query.relationship", &json!({"npc_id": npc, "player_id": cast.player})).await?;
        writeln!(out, "\n=== {name}'s relationship with {PLAYER_NAME} ===")?;
        writeln!(out, "stage: {}", relationship["stage"].as_str().unwrap_or("?").replace('_', " "))?;
        let values: Vec<String> = ["trust", "friendliness", "respect", "loyalty", "fear"]
            .iter()
            .map(|dimension| format!("{dimension} {:.2}", relationship[*dimension].as_f64().unwrap_or(0.0)))
            .collect();
        writeln!(out, "{}", values.join(", "))?;
        writeln!(out, "conversations: {}", relationship["interaction_count"])?;
    }
    let after = prompt(&bus, &cast, "Do you remember me? I need another blade.").await?;
    print_prompt(out, "Brom's prompt after the scene", &after)?;

    // Signals keep arriving for a moment after the memories (relate's outbox).
    writeln!(out, "\n=== Story signals received ===")?;
    let cast_ids = [cast.blacksmith.to_string(), cast.guard.to_string(), cast.player.to_string()];
    let mut received = 0;
    let listen_until = Instant::now() + Duration::from_secs(2);
    while let Ok(Some(message)) = tokio::time::timeout_at(listen_until.into(), signals.next()).await {
        let Ok(signal) = serde_json::from_slice::<Value>(&message.payload) else { continue };
        if !cast_ids.iter().any(|id| signal["npc_id"] == json!(id) || signal["player_id"] == json!(id)) {
            continue;
        }
        received += 1;
        let npc = if signal["npc_id"] == json!(cast.blacksmith) { "Brom" } else { "Hale" };
        let detail = match (signal["stage"].as_str(), signal["extra"]["faction"].as_str(), signal["faction"].as_str()) {
            (_, Some(faction), _) | (_, _, Some(faction)) => {
                let level = signal["extra"]["level"].as_f64().or(signal["level"].as_f64()).unwrap_or(0.0);
                format!("{PLAYER_NAME}'s standing with {faction} crossed {level} (told by {npc})")
            }
            (Some(stage), _, _) => format!("{npc} now regards {PLAYER_NAME} as {}", stage.replace('_', " ")),
            _ => format!("about {npc}"),
        };
        writeln!(
            out,
            "- {} / {}: {detail}",
            signal["signal_type"].as_str().unwrap_or("?"),
            signal["event_type"].as_str().unwrap_or("-"),
        )?;
    }
    if received == 0 {
        writeln!(out, "(none yet)")?;
    }
    writeln!(out, "\nthe scene played out in {:.1} s", started.elapsed().as_secs_f64())?;
    Ok(())
}
