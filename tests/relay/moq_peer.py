"""A moq-rs (moq-dev) peer for interop tests, run as a subprocess.

``python -m tests.relay.moq_peer pub URL NAMESPACE TRACK GROUPS OBJECTS SIZE`` publishes
deterministic frames (byte ``(g * 31 + o) % 251`` repeated SIZE times) and waits to be read;
``... sub URL NAMESPACE TRACK GROUPS OBJECTS SIZE`` subscribes, checks every frame and prints
one JSON line ``{"groups": n, "frames": n, "bytes": n, "ok": bool}``.
"""

from __future__ import annotations

import asyncio
import json
import sys

import moq


def frame(g: int, o: int, size: int) -> bytes:
    return bytes([(g * 31 + o) % 251]) * size


async def pub(url: str, ns: str, track: str, groups: int, objects: int, size: int) -> None:
    client = moq.Client(url, tls_verify=False, reconnect=False)
    async with client:
        bc = client.create_broadcast(ns)
        tr = bc.publish_track(track)
        bc.announce()
        print(json.dumps({"announced": True}), flush=True)
        await tr.used()
        await asyncio.sleep(1.0)
        for g in range(groups):
            grp = tr.create_group(g)
            for o in range(objects):
                grp.write_frame(frame(g, o, size), timestamp_us=0)
            grp.finish()
            await asyncio.sleep(0.2)  # a live track: one group at a time
        tr.finish()
        await asyncio.sleep(30)  # stay until the test kills us


async def sub(url: str, ns: str, track: str, groups: int, objects: int, size: int) -> None:
    client = moq.Client(url, tls_verify=False, reconnect=False)
    seen: dict[int, int] = {}
    ok = True
    nbytes = 0
    async with client:
        bc = await client.announced_broadcast(ns)
        t = await bc.subscribe_track(track)
        print(json.dumps({"subscribed": True}), flush=True)
        async for grp in t.groups_as_arrived():
            g = grp.sequence
            o = 0
            async for f in grp:
                payload = bytes(f.payload)
                ok = ok and payload == frame(g, o, size)
                nbytes += len(payload)
                o += 1
            seen[g] = o
            print(json.dumps({"group": g, "frames": o}), file=sys.stderr, flush=True)
            if len(seen) >= groups:
                break
    ok = ok and all(seen.get(g) == objects for g in range(groups))
    print(
        json.dumps({"groups": len(seen), "frames": sum(seen.values()), "bytes": nbytes, "ok": ok}),
        flush=True,
    )


if __name__ == "__main__":
    mode, url, ns, track, *nums = sys.argv[1:]
    g, o, s = (int(x) for x in nums)
    asyncio.run((pub if mode == "pub" else sub)(url, ns, track, g, o, s))
