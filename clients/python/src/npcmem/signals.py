"""What wire-protocol §6 asks every signal subscriber to do, as a plain object:
deduplicate by ``signal_id`` and, where a signal carries a ``version``, treat one older
than the highest already applied for its NPC-player pair as stale.

Signals of one applied conversation share its relationship version (a threshold
crossing, the stage change and a memory milestone all carry the same ``version``), so a
signal with the *same* version as the highest applied one is not stale; it is a
different signal of the same update. Exact repeats are caught by ``signal_id``.

Memory is bounded: the most recent ``max_ids`` signal ids and ``max_pairs`` pairs are
kept (least recently used first out).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional, Tuple

from .models import Signal

ACCEPT = "accept"
DUPLICATE = "duplicate"
STALE = "stale"


class SignalFilter:
    """Decide, then record: :meth:`check` says whether a signal is new, :meth:`commit`
    records it once it has been applied (so a signal whose handling failed is not
    remembered and is accepted again when JetStream redelivers it)."""

    def __init__(self, max_ids: int = 10_000, max_pairs: int = 100_000) -> None:
        if max_ids < 1 or max_pairs < 1:
            raise ValueError("max_ids and max_pairs must be at least 1")
        self.max_ids = max_ids
        self.max_pairs = max_pairs
        self._ids: "OrderedDict[str, None]" = OrderedDict()
        self._versions: "OrderedDict[Tuple[str, str], int]" = OrderedDict()

    @staticmethod
    def pair(signal: Signal) -> Optional[Tuple[str, str]]:
        """The (npc_id, player_id) a version orders, or ``None`` when it carries none."""
        if signal.version is None or signal.player_id is None:
            return None
        return (str(signal.npc_id).lower(), str(signal.player_id).lower())

    def check(self, signal: Signal) -> str:
        """``"accept"``, ``"duplicate"`` (same ``signal_id`` seen) or ``"stale"`` (an older
        version than one applied for the pair). Records nothing."""
        if str(signal.signal_id).lower() in self._ids:
            return DUPLICATE
        pair = self.pair(signal)
        if pair is not None:
            highest = self._versions.get(pair)
            if highest is not None and int(signal.version) < highest:  # type: ignore[arg-type]
                return STALE
        return ACCEPT

    def commit(self, signal: Signal) -> None:
        """Remember the signal as applied."""
        key = str(signal.signal_id).lower()
        self._ids[key] = None
        self._ids.move_to_end(key)
        while len(self._ids) > self.max_ids:
            self._ids.popitem(last=False)
        pair = self.pair(signal)
        if pair is not None:
            version = int(signal.version)  # type: ignore[arg-type]
            highest = self._versions.get(pair)
            self._versions[pair] = version if highest is None else max(highest, version)
            self._versions.move_to_end(pair)
            while len(self._versions) > self.max_pairs:
                self._versions.popitem(last=False)

    def admit(self, signal: Signal) -> bool:
        """:meth:`check` and, when accepted, :meth:`commit` at once."""
        if self.check(signal) != ACCEPT:
            return False
        self.commit(signal)
        return True

    def highest_version(self, npc_id: str, player_id: str) -> Optional[int]:
        return self._versions.get((str(npc_id).lower(), str(player_id).lower()))

    def __len__(self) -> int:
        return len(self._ids)

    def __bool__(self) -> bool:  # an empty filter is still a filter
        return True
