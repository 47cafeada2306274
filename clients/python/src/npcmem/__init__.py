"""npcmem game-server SDK: persistent memory, relationships and gossip for NPCs.

>>> import npcmem
>>> async with await npcmem.Client.connect() as client:
...     await client.publish_conversation(conversation)
...     reply = await client.context(npc_id, player_id, message="Hello?", npc={"name": "Brom"})
"""

from .client import WORLD_NAMESPACE, Client, SignalStream, world_msg_id
from .errors import NpcmemError
from .models import (
    CATEGORIES,
    ContextSection,
    ConversationEnded,
    Drives,
    EnrichReply,
    EnrichRequest,
    ErrorBody,
    ErrorReply,
    KnowledgeAnswer,
    KnowledgeFact,
    MemoriesAnswer,
    MemoryItem,
    Mood,
    NpcInfo,
    NpcMoved,
    NpcProfile,
    Observation,
    Persona,
    PlayerInfo,
    PlayerPrivacy,
    PublishAck,
    RecallAnswer,
    RecalledTurn,
    RelationshipState,
    Signal,
    TranscriptMessage,
    WorldFact,
    encode,
    from_dict,
    now,
)
from .settings import Settings, locate_env_file, parse_env_file, resolve
from .signals import SignalFilter

__version__ = "0.1.0"

__all__ = [
    "CATEGORIES",
    "Client",
    "ContextSection",
    "ConversationEnded",
    "Drives",
    "EnrichReply",
    "EnrichRequest",
    "ErrorBody",
    "ErrorReply",
    "KnowledgeAnswer",
    "KnowledgeFact",
    "MemoriesAnswer",
    "MemoryItem",
    "Mood",
    "NpcInfo",
    "NpcMoved",
    "NpcProfile",
    "NpcmemError",
    "Observation",
    "Persona",
    "PlayerInfo",
    "PlayerPrivacy",
    "PublishAck",
    "RecallAnswer",
    "RecalledTurn",
    "RelationshipState",
    "Settings",
    "Signal",
    "SignalFilter",
    "SignalStream",
    "TranscriptMessage",
    "WORLD_NAMESPACE",
    "WorldFact",
    "encode",
    "from_dict",
    "locate_env_file",
    "now",
    "parse_env_file",
    "resolve",
    "world_msg_id",
]
