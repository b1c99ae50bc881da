"""``pygpukit top``: the scheduler of every pygpukit process on this machine, live.

Every process that runs tasks publishes its scheduler snapshot into the run
directory (``pygpukit.scheduler.publish_once``, once a second). ``pygpukit top``
reads them all, forgets the files of processes that are gone, and redraws a
table like nvidia-smi's.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ._units import format_bytes
from .scheduler import run_dir


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def collect(directory: Path | None = None) -> list[dict[str, Any]]:
    """The snapshots of live processes; files of dead ones are removed."""
    d = directory or run_dir()
    docs = []
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not _alive(int(doc.get("pid", -1))):
            f.unlink(missing_ok=True)
            continue
        docs.append(doc)
    return docs


def _b(n: int | None) -> str:
    return "-" if n is None else format_bytes(n)


def render(docs: list[dict[str, Any]]) -> str:
    """The table ``pygpukit top`` draws."""
    lines = [f"pygpukit top  {time.strftime('%H:%M:%S')}  {len(docs)} process(es)"]
    if not docs:
        lines.append(f"no pygpukit process publishes in {run_dir()} (tasks start publishing; PYGPUKIT_PUBLISH=0 stops it)")
    for doc in docs:
        s = doc["snapshot"]
        age = time.time() - doc["time"]
        lines.append("")
        lines.append(
            f"pid {doc['pid']}  {doc['device']} ({doc['backend']})  committed {_b(s['committed'])} of {_b(s['capacity'])}"
            f"  evictions {s['eviction']['evictions']} restores {s['eviction']['restores']}  ({age:.1f} s ago)  {doc['argv']}"
        )
        lines.append(f"  {'PARTITION':<16}{'QUOTA':>12}{'USED':>12}{'COMMITTED':>12}{'COMPUTE':>9}")
        for p in s["partitions"]:
            lines.append(f"  {p['name']:<16}{_b(p['quota']):>12}{_b(p['used']):>12}{_b(p['committed']):>12}{p['compute']:>9.2f}")
        lines.append(
            f"  {'ID':>4} {'TASK':<16}{'QOS':<12}{'PARTITION':<12}{'STATE':<10}{'USED':>11}{'RESERVED':>11}"
            f"{'LAUNCHES':>10}{'WAITS':>8}{'WAIT ms':>9}{'EVICT':>6}"
        )
        for t in s["tasks"]:
            lines.append(
                f"  {t['id']:>4} {t['name'][:15]:<16}{t['qos']:<12}{t['partition'][:11]:<12}{t['state']:<10}"
                f"{_b(t['used']):>11}{_b(t['reservation']):>11}{t['launches']:>10}{t['waits']:>8}"
                f"{t['wait_ns'] / 1e6:>9.1f}{t['evictions']:>6}"
            )
        if s["queue"]:
            lines.append(f"  waiting for admission: {', '.join(str(i) for i in s['queue'])}")
    return "\n".join(lines)


def main(once: bool = False, as_json: bool = False, interval: float = 1.0, directory: str | None = None) -> int:
    d = Path(directory) if directory else None
    if as_json:
        print(json.dumps(collect(d), indent=1))
        return 0
    if once:
        print(render(collect(d)))
        return 0
    try:
        while True:
            sys.stdout.write("\x1b[H\x1b[2J" + render(collect(d)) + "\n")
            sys.stdout.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0
