"""Runs the scripted MUD session against a real, running npcmem and checks that the NPCs
remember.

    deploy/local/up
    NPCMEM_SDK_INTEGRATION=1 python -m pytest -q examples/mud/test_session.py

Skipped unless ``NPCMEM_SDK_INTEGRATION=1`` is set; with it set, the test fails when no
system answers. The system is found the way the SDK finds it (``NPCMEM_ENV_FILE``, the
``NPCMEM_*`` variables, or ``.local/env`` in the repository).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
MUD = HERE / "mud.py"
SESSION = HERE / "session.txt"

pytestmark = pytest.mark.skipif(
    os.environ.get("NPCMEM_SDK_INTEGRATION") != "1",
    reason="needs a running npcmem (deploy/local/up); set NPCMEM_SDK_INTEGRATION=1",
)


def run_session() -> subprocess.CompletedProcess:
    # A world of its own for every run, so the NPCs meet Aria for the first time and the
    # story signals are new, however often the test runs against the same system.
    world = f"test-{uuid.uuid4().hex[:12]}"
    env = dict(os.environ)
    env.pop("MUD_LLM_BASE_URL", None)  # the template replies are deterministic
    return subprocess.run(
        [sys.executable, str(MUD), "--name", "Aria", "--world", world, "--no-walk", "--no-llm", "--script", str(SESSION)],
        cwd=str(HERE.parent.parent),  # the repository, where .local/env is found
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def reply_after(lines: list, command: str, npc: str) -> str:
    """The NPC's line that answered the last ``> say <command>``."""
    echo = f"> say {command}"
    starts = [i for i, line in enumerate(lines) if line.strip() == echo]
    assert starts, f"the session never said {command!r}"
    for line in lines[starts[-1] + 1 :]:
        if line.startswith("> "):
            break
        if line.startswith(npc + " "):
            return line
    raise AssertionError(f"{npc} did not answer {command!r}")


def test_scripted_session_npcs_remember() -> None:
    result = run_session()
    output = result.stdout
    report = f"\n--- stdout ---\n{output}\n--- stderr ---\n{result.stderr}"
    assert result.returncode == 0, f"mud.py exited with {result.returncode}{report}"
    assert "npcmem over nats" in output, f"the MUD did not reach npcmem over NATS{report}"
    lines = output.splitlines()

    # The first threat meets a stranger; the return visit meets an enemy who remembers.
    first = reply_after(lines, "Give me your gold or I will kill you.", "Brom")
    assert "threatened" not in first, f"Brom remembered before anything happened: {first}{report}"
    remembered = reply_after(lines, "Do you remember me?", "Brom")
    assert re.search(r"\bthreatened\b", remembered), f"Brom does not remember the threats: {remembered}{report}"
    assert re.search(r"\b(kill|burn|forge)\b", remembered), f"Brom's memory has no threat in it: {remembered}{report}"
    assert "eyes you warily" in remembered, f"Brom does not treat Aria as an enemy: {remembered}{report}"

    # The trade went through, and the hostile Brom refuses to sell.
    assert "the saddle is yours" in reply_after(lines, "Deal. Here's the gold.", "Tobin"), report
    assert "don't sell" in reply_after(lines, "I'd like to buy a steel sword.", "Brom"), report

    # Story signals arrived while the session ran.
    stories = [line for line in lines if line.startswith("[story] ")]
    assert stories, f"no story signal was printed{report}"
    assert any("Brom" in line and "npc_hostile" in line for line in stories), f"no npc_hostile from Brom{report}"
    assert "[wait] timed out" not in output, report
