"""What the SDK adds to a context request: `client.context(...)` against the same request
sent as raw bytes with nats-py on the same connection, alternated so both see the same
server load. Prints p50/p99 of each and the p50 difference (the target is <= 0.3 ms).

    python bench/context_overhead.py [--requests 2000]   # a running system: .local/env or NPCMEM_*
"""

import argparse
import asyncio
import json
import statistics
import time
import uuid

import npcmem


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(requests: int) -> None:
    async with await npcmem.Client.connect() as client:
        npc_id, player_id = str(uuid.uuid4()), str(uuid.uuid4())
        persona = {"name": "Brom", "role": "the blacksmith", "personality": "gruff but fair"}
        message = "Do you remember me?"
        raw = json.dumps(
            {"npc_id": npc_id, "player_id": player_id, "message": message, "max_tokens": 1024, "npc": persona}
        ).encode()
        subject = client.subject("enrich.request")
        sdk, plain = [], []
        for i in range(requests + 200):
            # Alternate which goes first so neither always meets a warmer server.
            order = (0, 1) if i % 2 else (1, 0)
            for which in order:
                started = time.perf_counter()
                if which == 0:
                    await client.context(npc_id, player_id, message=message, max_tokens=1024, npc=persona)
                else:
                    reply = await client.nats.request(subject, raw, timeout=5)
                    json.loads(reply.data)
                elapsed = (time.perf_counter() - started) * 1000
                if i >= 200:  # warm-up left out
                    (sdk if which == 0 else plain).append(elapsed)
        print(f"requests: {requests} each, alternated, after 200 warm-up pairs")
        print(f"raw nats-py request + json.loads: p50 {statistics.median(plain):.3f} ms, p99 {percentile(plain, 0.99):.3f} ms")
        print(f"npcmem SDK client.context():      p50 {statistics.median(sdk):.3f} ms, p99 {percentile(sdk, 0.99):.3f} ms")
        print(f"SDK overhead at p50: {statistics.median(sdk) - statistics.median(plain):.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    asyncio.run(main(parser.parse_args().requests))
