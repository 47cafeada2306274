#!/usr/bin/env python3
"""A small text MUD whose NPCs remember you, built on the npcmem Python SDK.

Rooms, a few NPCs that walk between them, and a terminal player. Every conversation
is published to npcmem when it ends; before each NPC line the MUD asks npcmem for the
NPC's context and either sends it to an OpenAI-compatible LLM (``MUD_LLM_BASE_URL``)
or answers from a template over that context. Story signals print as they arrive.

    python examples/mud/mud.py --name Aria
    python examples/mud/mud.py --name Aria --script examples/mud/session.txt --no-walk

Only the SDK (``pip install ./clients/python``) and the standard library are used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import npcmem

# --- the world ---------------------------------------------------------------------------

ROOMS: Dict[str, Dict[str, object]] = {
    "forge": {
        "title": "The Forge",
        "text": "Heat rolls off the anvil. Racks of blades and horseshoes line the soot-black walls.",
        "exits": {"square": "square"},
    },
    "square": {
        "title": "The Market Square",
        "text": "Stalls and shouting traders crowd the cobbles around a dry fountain.",
        "exits": {"forge": "forge", "tavern": "tavern", "gate": "gate"},
    },
    "tavern": {
        "title": "The Crooked Tankard",
        "text": "A low, smoky tavern. Someone is murdering a tune on a lute in the corner.",
        "exits": {"square": "square"},
    },
    "gate": {
        "title": "The Town Gate",
        "text": "A squat stone gatehouse watches the north road. The portcullis is half raised.",
        "exits": {"square": "square"},
    },
}


@dataclass
class Npc:
    name: str
    role: str
    personality: str
    speaking_style: str
    knowledge_domains: List[str]
    home: str
    factions: List[str]
    drives: Dict[str, float]
    wares: Dict[str, int]  # item -> price in gold
    lines: Dict[str, str]  # the NPC's own voice for the template replies
    route: List[str] = field(default_factory=list)  # the rooms it walks through, in a loop
    room: str = ""
    id: str = ""
    step: int = 0

    def persona(self) -> Dict[str, object]:
        """The enrich request's ``npc`` persona (wire protocol §7)."""
        return {
            "name": self.name,
            "role": self.role,
            "personality": self.personality,
            "speaking_style": self.speaking_style,
            "knowledge_domains": self.knowledge_domains,
        }


def make_npcs() -> List[Npc]:
    return [
        Npc(
            name="Brom",
            role="the blacksmith",
            personality="gruff but fair, proud of his forge, slow to forgive",
            speaking_style="short, blunt sentences",
            knowledge_domains=["smithing", "weapons", "the town's gossip"],
            home="forge",
            route=["forge", "forge", "square", "tavern", "square"],
            factions=["smiths_guild"],
            drives={"social": 0.4, "safety": 0.6, "loyalty": 0.7, "curiosity": 0.3},
            wares={"steel sword": 40, "dagger": 8, "horseshoes": 2, "shield": 25},
            lines={
                "greet": "Forge is hot. Make it quick.",
                "threat": "Threats? In my own forge? Get out before I set the guard on you.",
                "threat_again": "Again with the threats. I haven't forgotten the last ones.",
                "default": "Steel, shoes, or nothing. What'll it be?",
                "secret": "Hm. I'll keep it. Mostly.",
                "bye": "Mind the sparks on your way out.",
                "refuse": "I don't sell to the likes of you.",
                "thanks": "Good steel. Don't waste it.",
            },
        ),
        Npc(
            name="Hale",
            role="the gate guard",
            personality="dutiful, nosy and a terrible keeper of secrets",
            speaking_style="formal, with a guardsman's bark",
            knowledge_domains=["the town watch", "the north road", "who comes and goes"],
            home="gate",
            route=["gate", "square", "forge", "square"],
            factions=["city_guard"],
            drives={"social": 0.9, "safety": 0.5, "loyalty": 0.4, "curiosity": 0.8},
            wares={"map": 3, "torch": 1},
            lines={
                "greet": "Halt. State your business. ...Oh, go on then.",
                "threat": "You threaten a guard of this town? Choose your next words carefully.",
                "threat_again": "That's twice now. The watch has a cell with your name on it.",
                "default": "Quiet on the north road today. Too quiet.",
                "secret": "My lips are sealed. Sealed, I say.",
                "bye": "Move along, then.",
                "refuse": "The watch does no business with troublemakers.",
                "thanks": "Stay out of trouble.",
            },
        ),
        Npc(
            name="Tobin",
            role="the stable boy",
            personality="eager, cheerful, easily frightened",
            speaking_style="quick and breathless, lots of questions",
            knowledge_domains=["horses", "the stables", "tavern rumours"],
            home="square",
            route=["square", "tavern", "square", "gate"],
            factions=[],
            drives={"social": 0.8, "safety": 0.3, "loyalty": 0.5, "curiosity": 0.6},
            wares={"saddle": 12, "pony": 60, "rope": 1},
            lines={
                "greet": "Oh! Hello! Need a horse? Or a saddle? I've got both!",
                "threat": "P-please don't hurt me! I only look after the horses!",
                "threat_again": "Not you again... I'll run and tell Hale, I will!",
                "default": "Did you hear? Someone saw wolves by the mill!",
                "secret": "I won't tell! Well... I'll try not to.",
                "bye": "Bye! Come back soon!",
                "refuse": "I... I don't think I should sell to you.",
                "thanks": "She's a good one, you'll see!",
            },
        ),
    ]


def place(room: str) -> str:
    """'the forge' for use inside a sentence."""
    title = str(ROOMS[room]["title"])
    return "the " + title[4:] if title.startswith("The ") else title


# Stable ids: UUID v5 of the name in a namespace of the world, so a returning player is
# remembered and an NPC is the same NPC in every session.
def world_namespace(world: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"npcmem-mud:{world}")


def player_id_for(world: str, name: str) -> str:
    return str(uuid.uuid5(world_namespace(world), "player:" + name.strip().lower()))


def npc_id_for(world: str, name: str) -> str:
    return str(uuid.uuid5(world_namespace(world), "npc:" + name.strip().lower()))


# --- output ------------------------------------------------------------------------------


def say(text: str = "") -> None:
    print(text, flush=True)


# --- template replies (no LLM) -----------------------------------------------------------

STAGE_OPENERS = {
    "stranger": "{name} looks you over.",
    "acquaintance": "{name} nods at you.",
    "friend": "{name} grins at you.",
    "close_friend": "{name} claps you on the shoulder.",
    "trusted_ally": "{name} greets you like family.",
    "rival": "{name} narrows his eyes at you.",
    "enemy": "{name} eyes you warily.",
}
NEGATIVE_TAGS = ("threat", "insult", "theft", "betrayal", "combat")
NEGATIVE_WORDS = ("threatened", "insulted", "stole", "betrayed", "attacked", "robbed", "hurt")

INTENTS: List[Tuple[str, re.Pattern]] = [
    ("remember", re.compile(r"\b(remember|recall|know me|met before|who am i|forgotten me)\b")),
    ("threat", re.compile(r"\b(kill|burn|hurt|gut|or else|cut your|you'll regret|you'll pay|die)\b")),
    ("secret", re.compile(r"\b(between you and me|don't tell|do not tell|a secret|keep (it|this) quiet|never told)\b")),
    ("accept", re.compile(r"\b(deal|i'll take it|i will take it|here's the (gold|coin|money)|agreed|sold)\b")),
    ("trade", re.compile(r"\b(buy|sell|need|want|price|how much|cost|looking for|wares)\b")),
    ("thanks", re.compile(r"\b(thanks|thank you|cheers)\b")),
    ("greet", re.compile(r"^\W*(hello|hi|hey|greetings|good (day|morning|evening)|hail|well met)\b")),
]


def intent_of(text: str) -> str:
    plain = text.lower()
    for name, pattern in INTENTS:
        if pattern.search(plain):
            return name
    return "default"


def section(reply: npcmem.EnrichReply, provider: str) -> str:
    for s in reply.sections:
        if s.provider == provider:
            return s.content
    return ""


def bullet_lines(text: str) -> List[str]:
    return [line[2:].strip() for line in text.splitlines() if line.startswith("- ")]


def stage_of(reply: npcmem.EnrichReply) -> str:
    reputation = reply.placeholders.get("reputation", "") or ""
    stage = reputation.split(" (")[0].strip().lower().replace(" ", "_")
    return stage if stage in STAGE_OPENERS else "stranger"


_AGE = re.compile(r"\s*\((?:[^()]*\b(?:ago|just now|important|yesterday|today)\b[^()]*)\)\s*$")
_BELIEF = re.compile(r"\s*\(you (?:believe it|half believe it|doubt it)\)\s*$")


def _swap_outside_quotes(text: str, pairs: List[Tuple[str, str]]) -> str:
    parts = re.split(r'("[^"]*")', text)
    for i in range(0, len(parts), 2):  # even parts are outside quotes
        for pattern, repl in pairs:
            parts[i] = re.sub(pattern, repl, parts[i])
    return "".join(parts)


def second_person(statement: str, player: str) -> str:
    """'Aria threatened you: "..."' as the NPC says it to Aria: 'you threatened me: "..."'."""
    text = _BELIEF.sub("", _AGE.sub("", statement.strip()))
    p = re.escape(player)
    return _swap_outside_quotes(
        text,
        [
            (r"\byou\b", "me"),
            (r"\byour\b", "my"),
            (r"\byourself\b", "myself"),
            (rf"\b{p}'s\b", "your"),
            (rf"\b{p}\b", "you"),
        ],
    )


def pick_memory(reply: npcmem.EnrichReply, stage: str) -> Optional[str]:
    memories = bullet_lines(section(reply, "memory"))
    if not memories:
        return None
    if stage in ("enemy", "rival"):
        for line in memories:
            if any(word in line for word in NEGATIVE_WORDS):
                return line
    return memories[0]


def pick_hearsay(reply: npcmem.EnrichReply, player: str) -> Optional[str]:
    """A fact about the player someone else told the NPC (gossip): 'Hale told you Aria ...'."""
    for line in bullet_lines(section(reply, "knowledge")):
        if " told you " in line and re.search(rf"\b{re.escape(player)}\b", line):
            return line
    return None


def last_time(reply: npcmem.EnrichReply, player: str) -> Optional[str]:
    """What the player said in the latest recorded conversation (working memory)."""
    for line in bullet_lines(section(reply, "working_memory")):
        match = re.search(rf'{re.escape(player)}: "([^"]+)"', line)
        if match:
            return match.group(1)
    return None


def find_ware(npc: Npc, text: str) -> Optional[str]:
    plain = text.lower()
    for item in npc.wares:
        if item in plain or item.split()[-1] in plain:
            return item
    return None


def tidy(text: str) -> str:
    """Quotes inside the NPC's speech as single quotes, without doubled full stops."""
    text = re.sub(r'"([^"]*)"', r"'\1'", text)
    text = re.sub(r"([.!?])'([.!?])", r"\1'", text)
    return re.sub(r"(?<!\.)\.\.(?!\.)", ".", text)


def template_reply(npc: Npc, player: str, text: str, reply: npcmem.EnrichReply, talk: "Conversation") -> str:
    """The NPC's line from the context alone: its stage, memories, gossip and mood."""
    stage = stage_of(reply)
    intent = intent_of(text)
    opener = STAGE_OPENERS[stage].format(name=npc.name)
    memory = pick_memory(reply, stage)
    hearsay = pick_hearsay(reply, player)
    hostile = stage in ("enemy", "rival")
    first_line = talk.npc_lines == 0
    speech: List[str] = []

    if intent == "remember":
        if memory:
            recalled = second_person(memory, player)
            if hostile:
                speech.append(f"Remember you? You're the one who {recalled[4:] if recalled.startswith('you ') else recalled}.")
            else:
                speech.append(f"Of course I remember. {recalled[0].upper() + recalled[1:]}.")
        elif last_time(reply, player):
            speech.append(f"Aye. Last time you told me: \"{last_time(reply, player)}\"")
        elif hearsay:
            speech.append(f"Never met you. But {second_person(hearsay, player)}.")
        else:
            speech.append("Can't say I do. Should I?")
    elif intent == "threat":
        threatened_before = memory is not None and "threatened" in memory
        speech.append(npc.lines["threat_again" if threatened_before or hostile else "threat"])
        if threatened_before:
            speech.append(f"{second_person(memory, player)[0].upper() + second_person(memory, player)[1:]}. I remember.")
    elif intent == "trade":
        item = find_ware(npc, text) or next(iter(npc.wares))
        if hostile:
            speech.append(npc.lines["refuse"])
            if memory:
                speech.append(f"Not after {second_person(memory, player).split(':')[0]}.")
        else:
            price = npc.wares[item]
            if stage in ("friend", "close_friend", "trusted_ally"):
                price = max(1, price * 3 // 4)
                speech.append(f"For you, a friend's price: {item}, {price} gold.")
            else:
                speech.append(f"A {item}? That's {price} gold.")
            talk.offer = (item, price)
    elif intent == "accept":
        if talk.offer:
            item, price = talk.offer
            speech.append(f"Done. {price} gold, and the {item} is yours.")
            talk.offer = None
        else:
            speech.append("Deal? We haven't agreed on anything yet.")
    elif intent == "secret":
        speech.append(npc.lines["secret"])
    elif intent == "thanks":
        speech.append(npc.lines["thanks"])
    elif intent == "greet" or first_line:
        speech.append(npc.lines["greet"] if not hostile else "You. What do you want now?")
        if first_line and memory:
            speech.append(f"I haven't forgotten: {second_person(memory, player)}.")
        elif first_line and hearsay:
            talk.mentioned_hearsay = True
            speech.append(f"Word gets around. {second_person(hearsay, player)}.")
    else:
        if hearsay and not talk.mentioned_hearsay:
            talk.mentioned_hearsay = True
            speech.append(f"Word gets around, you know. {second_person(hearsay, player)}.")
        else:
            speech.append(npc.lines["default"] if not hostile else "Say what you came to say and go.")

    return f'{opener} "{tidy(" ".join(speech))}"'


# --- the optional LLM --------------------------------------------------------------------


class Llm:
    """An OpenAI-compatible chat completion endpoint, spoken with urllib."""

    def __init__(self, base_url: str, api_key: Optional[str], model: str) -> None:
        base = base_url.rstrip("/")
        self.url = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        self.api_key = api_key
        self.model = model

    @classmethod
    def from_env(cls) -> Optional["Llm"]:
        base = os.environ.get("MUD_LLM_BASE_URL", "").strip()
        if not base:
            return None
        return cls(base, os.environ.get("MUD_LLM_API_KEY") or None, os.environ.get("MUD_LLM_MODEL") or "gpt-4o-mini")

    def _post(self, messages: List[Dict[str, str]]) -> str:
        body = json.dumps({"model": self.model, "messages": messages, "max_tokens": 200, "temperature": 0.7})
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body.encode("utf-8"), headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read().decode("utf-8"))
        return answer["choices"][0]["message"]["content"].strip()

    async def reply(self, system_prompt: str, transcript: List[npcmem.TranscriptMessage], npc: Npc) -> str:
        messages = [
            {
                "role": "system",
                "content": system_prompt
                + f"\n\nYou are speaking in a text game. Answer with {npc.name}'s next line only:"
                " one to three sentences, no stage directions longer than a few words.",
            }
        ]
        for turn in transcript:
            messages.append({"role": "user" if turn.speaker == "player" else "assistant", "content": turn.text})
        return await asyncio.to_thread(self._post, messages)


# --- conversations -----------------------------------------------------------------------


@dataclass
class Conversation:
    npc: Npc
    room: str
    conversation_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started_at: str = field(default_factory=npcmem.now)
    messages: List[npcmem.TranscriptMessage] = field(default_factory=list)
    offer: Optional[Tuple[str, int]] = None
    npc_lines: int = 0
    mentioned_hearsay: bool = False


class Game:
    def __init__(self, client: npcmem.Client, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args
        self.world = args.world
        self.player_name = args.name.strip()
        self.player_id = player_id_for(self.world, self.player_name)
        self.npcs = make_npcs()
        for npc in self.npcs:
            npc.id = npc_id_for(self.world, npc.name)
            npc.room = npc.home
        self.room = "square"
        self.talk: Optional[Conversation] = None
        self.rng = random.Random(args.seed)
        self.llm = None if args.no_llm else Llm.from_env()
        self.published: Dict[str, int] = {}  # npc id -> conversations published this session
        self.baseline: Dict[str, int] = {}  # npc id -> interaction_count before the first one
        self.commands = 0
        self.failed = False
        self.signals_seen = 0
        self.last_signal_at = 0.0
        self._signal_task: Optional[asyncio.Task] = None
        self._walk_task: Optional[asyncio.Task] = None
        self._stream: Optional[npcmem.SignalStream] = None
        self._lock = asyncio.Lock()

    # --- helpers ---

    def npc_named(self, name: str) -> Optional[Npc]:
        name = name.strip().lower()
        for npc in self.npcs:
            if npc.name.lower() == name or (name and npc.name.lower().startswith(name)):
                return npc
        return None

    def npcs_here(self) -> List[Npc]:
        return [npc for npc in self.npcs if npc.room == self.room]

    def by_id(self, npc_id: str) -> Optional[Npc]:
        for npc in self.npcs:
            if npc.id == str(npc_id).lower():
                return npc
        return None

    # --- start and stop ---

    async def start(self) -> None:
        say(f"Welcome to the town, {self.player_name}. (npcmem over {self.client.transport}, world '{self.world}')")
        if self.llm:
            say(f"(NPCs speak through the LLM at {self.llm.url}, model {self.llm.model})")
        else:
            say("(no LLM configured: NPCs answer from a template over their npcmem context)")
        for npc in self.npcs:
            await self.client.npc_profile(
                npc.id, npc.name, role=npc.role.replace("the ", ""), factions=npc.factions, drives=npc.drives
            )
            await self.client.npc_moved(npc.id, self.room_id(npc.room))
        if self.client.transport == "nats":
            durable = re.sub(r"[^A-Za-z0-9_-]", "_", f"mud-{self.world}-{self.player_name.lower()}")[:200]
            if durable.upper().startswith(self.client.settings.stream_prefix.upper()):
                durable = "x" + durable
            self._stream = self.client.signals(durable)
            self._signal_task = asyncio.create_task(self._signals())
        else:
            say("(HTTP mode: story signals and the query API need NATS; they are off)")
        if not self.args.no_walk and not self.args.script:
            self._walk_task = asyncio.create_task(self._walk_on_timer())
        say()
        self.look()

    async def stop(self) -> None:
        if self.talk:
            await self.end_talk("You take your leave.")
        if self._walk_task:
            self._walk_task.cancel()
        if self._signal_task:
            await self.drain_signals()
            self._signal_task.cancel()
            try:
                await self._signal_task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self._stream:
            await self._stream.close()

    # --- story signals ---

    async def _signals(self) -> None:
        assert self._stream is not None
        try:
            async for signal in self._stream:
                if signal.player_id and str(signal.player_id).lower() == self.player_id:
                    self.print_signal(signal)
        except asyncio.CancelledError:
            raise
        except npcmem.NpcmemError as error:
            say(f"(story signals unavailable: {error})")

    def print_signal(self, signal: npcmem.Signal) -> None:
        npc = self.by_id(signal.npc_id)
        who = npc.name if npc else "Someone"
        kind = signal.event_type or signal.signal_type
        stage = (signal.stage or "").replace("_", " ")
        if signal.signal_type == "relationship_changed":
            text = {
                "npc_hostile": f"{who} now sees you as {'an ' if stage[:1] in 'aeiou' else 'a '}{stage or 'enemy'} and no longer trusts you",
                "npc_cowered": f"{who} is afraid of you",
                "npc_trusted_ally": f"{who} trusts you completely",
                "npc_respect": f"{who} respects you",
                "npc_best_friend": f"{who} counts you as a best friend",
                "npc_despise": f"{who} despises you",
                "stage_changed": f"{who}: {str(signal.get('old_stage') or '?').replace('_', ' ')} -> {stage}",
            }.get(signal.event_type or "", f"{who}'s feelings about you changed")
        elif signal.signal_type == "secret_learned":
            teller = self.by_id(signal.get("from_npc_id") or "")
            content = str(signal.get("content") or "")
            quoted = re.search(r'"(.+)"', content)
            secret = quoted.group(1) if quoted else content
            if teller:
                text = f"{who} heard your secret from {teller.name}: '{secret}'"
            else:
                text = f"{who} now knows your secret: '{secret}'"
        elif signal.signal_type == "memory_milestone":
            text = f"{who} now holds {signal.get('memory_count')} memories of you"
        elif signal.signal_type == "faction_reputation_shift":
            direction = "rose" if signal.event_type == "reputation_up" else "fell"
            text = f"your standing with the {signal.get('faction')} {direction} past {signal.get('level')}"
        else:
            text = f"{who}: {signal.signal_type}"
        self.signals_seen += 1
        self.last_signal_at = time.monotonic()
        say(f"[story] {text} ({kind})")

    async def drain_signals(self, quiet: float = 2.0, limit: float = 8.0) -> None:
        """Before leaving, give signals still in flight a moment to arrive."""
        start = time.monotonic()
        while time.monotonic() - start < limit:
            since = time.monotonic() - max(self.last_signal_at, start)
            if since >= quiet:
                return
            await asyncio.sleep(0.2)

    # --- walking ---

    async def _walk_on_timer(self) -> None:
        while True:
            await asyncio.sleep(self.args.walk_every)
            async with self._lock:
                await self.walk_one()

    def room_id(self, room: str) -> str:
        """The room as npcmem sees it: one world's forge is not another's."""
        return f"{self.world}/{room}"

    async def walk_one(self) -> None:
        """One NPC not talking to the player takes the next step of its round."""
        movable = [npc for npc in self.npcs if not (self.talk and self.talk.npc is npc)]
        if not movable:
            return
        npc = self.rng.choice(movable)
        npc.step = (npc.step + 1) % len(npc.route)
        target = npc.route[npc.step]
        if target == npc.room:
            return
        old = npc.room
        npc.room = target
        await self.client.npc_moved(npc.id, self.room_id(target))
        if old == self.room:
            say(f"{npc.name} heads off towards {place(target)}.")
        elif target == self.room:
            say(f"{npc.name} walks in from {place(old)}.")

    # --- commands ---

    def look(self) -> None:
        room = ROOMS[self.room]
        say(f"== {room['title']} ==")
        say(str(room["text"]))
        here = self.npcs_here()
        if here:
            say("Here: " + ", ".join(f"{npc.name} ({npc.role})" for npc in here) + ".")
        say("Exits: " + ", ".join(sorted(room["exits"])) + ".")  # type: ignore[arg-type]

    def who(self) -> None:
        for npc in self.npcs:
            marker = " (here)" if npc.room == self.room else ""
            say(f"  {npc.name:6} {npc.role:16} {ROOMS[npc.room]['title']}{marker}")

    async def go(self, exit_name: str) -> None:
        exits: Dict[str, str] = ROOMS[self.room]["exits"]  # type: ignore[assignment]
        target = exits.get(exit_name.strip().lower())
        if target is None:
            say(f"You can't go '{exit_name}'. Exits: {', '.join(sorted(exits))}.")
            return
        if self.talk:
            await self.end_talk(f"You leave {self.talk.npc.name} mid-sentence.")
        self.room = target
        self.look()

    async def start_talk(self, name: str) -> None:
        npc = self.npc_named(name) if name else (self.npcs_here()[0] if len(self.npcs_here()) == 1 else None)
        if npc is None or npc.room != self.room:
            say(f"There is no {name or 'one'} here to talk to." if name else "Talk to whom? (talk <npc>)")
            return
        if self.talk and self.talk.npc is npc:
            say(f"You are already talking to {npc.name}.")
            return
        if self.talk:
            await self.end_talk()
        if npc.id not in self.baseline and self.client.transport == "nats":
            try:
                self.baseline[npc.id] = (await self.client.query_relationship(npc.id, self.player_id)).interaction_count
            except npcmem.NpcmemError:
                self.baseline[npc.id] = 0
        self.talk = Conversation(npc=npc, room=self.room)
        say(f"You turn to {npc.name}. (say <text> to talk, bye to end)")

    async def speak(self, text: str) -> None:
        text = text.strip()
        if not text:
            say("Say what?")
            return
        if self.talk is None:
            here = self.npcs_here()
            if len(here) != 1:
                say("Nobody is listening. (talk <npc> first)" if not here else "Talk to whom? (talk <npc> first)")
                return
            await self.start_talk(here[0].name)
        talk = self.talk
        assert talk is not None
        npc = talk.npc
        talk.messages.append(npcmem.TranscriptMessage("player", text))
        try:
            context = await self.client.context(npc.id, self.player_id, message=text, npc=npc.persona())
        except npcmem.NpcmemError as error:
            say(f"({npc.name} seems distracted: npcmem said {error})")
            talk.messages.pop()
            return
        line: Optional[str] = None
        if self.llm and context.system_prompt:
            try:
                spoken = await self.llm.reply(context.system_prompt, talk.messages, npc)
                line = f"{npc.name} says: \"{spoken.strip(chr(34))}\""
                npc_text = spoken
            except (urllib.error.URLError, OSError, KeyError, ValueError) as error:
                say(f"(the LLM did not answer: {error}; {npc.name} falls back on habit)")
        if line is None:
            line = template_reply(npc, self.player_name, text, context, talk)
            npc_text = line.split('"', 1)[1].rstrip('"') if '"' in line else line
        talk.npc_lines += 1
        talk.messages.append(npcmem.TranscriptMessage("npc", npc_text))
        say(line)
        if self.args.show_context:
            say("  [context] " + context.text().replace("\n", "\n  [context] "))

    async def end_talk(self, farewell: Optional[str] = None) -> None:
        talk = self.talk
        self.talk = None
        if talk is None:
            say("You are not talking to anyone.")
            return
        if farewell is None:
            farewell = f'{talk.npc.name}: "{talk.npc.lines["bye"]}"'
        say(farewell)
        if not talk.messages:
            return
        conversation = npcmem.ConversationEnded(
            conversation_id=talk.conversation_id,
            npc_id=talk.npc.id,
            player_id=self.player_id,
            npc=npcmem.NpcInfo(name=talk.npc.name, role=talk.npc.role.replace("the ", ""), factions=talk.npc.factions),
            player=npcmem.PlayerInfo(name=self.player_name),
            location=ROOMS[talk.room]["title"],  # type: ignore[arg-type]
            started_at=talk.started_at,
            ended_at=npcmem.now(),
            messages=talk.messages[:200],
        )
        try:
            await self.client.publish_conversation(conversation)
            self.published[talk.npc.id] = self.published.get(talk.npc.id, 0) + 1
            say(f"(npcmem: conversation with {talk.npc.name} recorded, {len(talk.messages)} lines)")
        except npcmem.NpcmemError as error:
            say(f"(npcmem: could not record the conversation: {error})")

    async def wait(self, arg: str) -> None:
        """Wait until npcmem has taken in every conversation published this session
        (each NPC's interaction count reached), or the deadline (seconds) passes."""
        try:
            deadline = float(arg) if arg.strip() else 60.0
        except ValueError:
            say("usage: wait [seconds]")
            return
        start = time.monotonic()
        if self.client.transport != "nats":
            await asyncio.sleep(min(deadline, 5.0))
            say("(HTTP mode: cannot watch npcmem's progress; waited 5 s)")
            return
        pending = dict(self.published)
        while pending:
            for npc_id, count in list(pending.items()):
                try:
                    state = await self.client.query_relationship(npc_id, self.player_id)
                except npcmem.NpcmemError:
                    continue
                if state.interaction_count >= self.baseline.get(npc_id, 0) + count:
                    del pending[npc_id]
            if not pending:
                break
            if time.monotonic() - start > deadline:
                names = ", ".join(self.by_id(i).name for i in pending)  # type: ignore[union-attr]
                say(f"[wait] timed out after {deadline:.0f} s: {names} not up to date")
                self.failed = True
                return
            await asyncio.sleep(0.2)
        say(f"(the town has taken it all in: {time.monotonic() - start:.1f} s)")

    async def pause(self, arg: str) -> None:
        """Let time pass (gossip ticks about once a second); signals print meanwhile."""
        try:
            seconds = min(max(float(arg or "5"), 0.0), 600.0)
        except ValueError:
            say("usage: pause [seconds]")
            return
        self._lock.release()  # let the walking timer run while we wait
        try:
            await asyncio.sleep(seconds)
        finally:
            await self._lock.acquire()

    def help(self) -> None:
        say(
            "Commands:\n"
            "  look              describe the room\n"
            "  go <exit>         walk (or just the exit's name)\n"
            "  who               where everyone is\n"
            "  talk <npc>        start a conversation;  bye  ends it\n"
            "  say <text>        speak to the NPC you are talking to (or 'text)\n"
            "  wait [seconds]    wait until npcmem has taken in your conversations\n"
            "  pause [seconds]   let time pass\n"
            "  quit              leave the game"
        )

    async def handle(self, line: str) -> bool:
        """Run one command; False to quit."""
        line = line.strip()
        if not line or line.startswith("#"):
            return True
        if line.startswith("'"):
            line = "say " + line[1:]
        verb, _, rest = line.partition(" ")
        verb = verb.lower()
        self.commands += 1
        async with self._lock:
            if verb in ("look", "l"):
                self.look()
            elif verb == "go":
                await self.go(rest)
            elif verb in ROOMS[self.room]["exits"]:  # type: ignore[operator]
                await self.go(verb)
            elif verb == "say":
                await self.speak(rest)
            elif verb == "talk":
                await self.start_talk(rest)
            elif verb == "bye":
                await self.end_talk()
            elif verb == "who":
                self.who()
            elif verb == "wait":
                await self.wait(rest)
            elif verb == "pause":
                await self.pause(rest)
            elif verb in ("help", "?"):
                self.help()
            elif verb in ("quit", "exit"):
                return False
            else:
                say(f"Unknown command '{verb}'. Type help.")
            if self.args.script and not self.args.no_walk and self.commands % self.args.walk_commands == 0:
                await self.walk_one()
        return True


# --- input -------------------------------------------------------------------------------


def terminal_lines(loop: asyncio.AbstractEventLoop, queue: "asyncio.Queue[Optional[str]]") -> None:
    """Read stdin on a daemon thread (so quitting never waits for it)."""

    def run() -> None:
        while True:
            try:
                line = input()
            except (EOFError, KeyboardInterrupt):
                loop.call_soon_threadsafe(queue.put_nowait, None)
                return
            loop.call_soon_threadsafe(queue.put_nowait, line)

    threading.Thread(target=run, name="stdin", daemon=True).start()


async def play(args: argparse.Namespace) -> int:
    try:
        client = await npcmem.Client.connect(env_file=args.env_file)
    except npcmem.NpcmemError as error:
        print(f"mud: cannot reach npcmem: {error}", file=sys.stderr, flush=True)
        print("mud: start it with deploy/local/up (or set NPCMEM_ENV_FILE / NPCMEM_NATS_URL)", file=sys.stderr)
        return 2
    game = Game(client, args)
    try:
        try:
            await game.start()
        except npcmem.NpcmemError as error:
            print(f"mud: npcmem refused the world setup: {error}", file=sys.stderr, flush=True)
            return 2
        if args.script:
            with open(args.script, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
            for line in lines:
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                say(f"> {line.strip()}")
                if not await game.handle(line):
                    break
        else:
            queue: "asyncio.Queue[Optional[str]]" = asyncio.Queue()
            terminal_lines(asyncio.get_running_loop(), queue)
            say("Type help for commands.")
            while True:
                print("> ", end="", flush=True)
                line = await queue.get()
                if line is None or not await game.handle(line):
                    break
        await game.stop()
        say("Farewell.")
    finally:
        await client.close()
    return 1 if game.failed else 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="A small text MUD whose NPCs remember you (npcmem).")
    parser.add_argument("--name", required=True, help="your character's name (the same name is remembered)")
    parser.add_argument("--script", help="read commands from this file, one per line, instead of the terminal")
    parser.add_argument("--seed", type=int, default=None, help="seed for NPC walking (deterministic walks)")
    parser.add_argument("--no-walk", action="store_true", help="NPCs stay in their home rooms")
    parser.add_argument("--walk-every", type=float, default=15.0, help="seconds between NPC moves (interactive)")
    parser.add_argument("--walk-commands", type=int, default=4, help="commands between NPC moves (--script)")
    parser.add_argument("--world", default="default", help="name of the world; ids are derived from it")
    parser.add_argument("--env-file", default=None, help="npcmem env file (default: NPCMEM_ENV_FILE or .local/env)")
    parser.add_argument("--no-llm", action="store_true", help="ignore MUD_LLM_BASE_URL; answer from templates")
    parser.add_argument("--show-context", action="store_true", help="print npcmem's context under each NPC line")
    args = parser.parse_args(argv)
    if not args.name.strip() or len(args.name.strip()) > 100:
        parser.error("--name must be 1 to 100 characters")
    args.walk_commands = max(1, args.walk_commands)
    try:
        return asyncio.run(play(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
