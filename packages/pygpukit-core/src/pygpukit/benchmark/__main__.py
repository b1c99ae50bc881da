"""python -m pygpukit.benchmark [--quick] [--only NAME] [--backends native,triton] [--json PATH] [--compare OLD.json] [--markdown]"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import pygpukit as gp

from . import core
from .harness import BACKENDS, Recorder, compare, table, write_json


def suites() -> dict[str, Callable[[Recorder, bool], None]]:
    """Core's suites, then those the installed plugins register (``pygpukit_register_benchmarks``)."""
    from ..registry import REGISTRY

    REGISTRY.ensure_loaded()
    return {**core.SUITE, **{b.name: b.run for b in REGISTRY.benchmarks.entries() if b.name not in core.SUITE}}


def main(argv: list[str] | None = None) -> int:
    suite = suites()
    p = argparse.ArgumentParser(prog="python -m pygpukit.benchmark", description=__doc__)
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    p.add_argument("--only", action="append", choices=sorted(suite), help="run only these benchmarks (repeatable)")
    p.add_argument("--json", metavar="PATH", help="write the records as JSON")
    p.add_argument("--compare", metavar="OLD.json", help="flag regressions against an earlier results file")
    p.add_argument("--threshold", type=float, default=0.05, help="relative loss that counts as a regression (default 0.05)")
    p.add_argument("--markdown", action="store_true", help="print the summary table as Markdown")
    p.add_argument("--backends", default="native", help=f"op backends to compare where a suite can ({','.join(BACKENDS)}; default native)")
    args = p.parse_args(argv)
    backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    if not backends or any(b not in BACKENDS for b in backends):
        p.error(f"--backends: a comma-separated list of {', '.join(BACKENDS)}, got {args.backends!r}")

    info = gp.info()
    gpu = info.device_name or "cpu"
    print(f"pygpukit {info.version} on {gpu} ({info.backend})", flush=True)
    rec = Recorder(gpu, backends)
    for name in args.only or list(suite):
        print(f"[{name}]", flush=True)
        suite[name](rec, args.quick)
    print()
    print(table(rec.records, markdown=args.markdown))
    if args.json:
        write_json(rec.records, args.json)
        print(f"\nwrote {len(rec.records)} records to {args.json}")
    if args.compare:
        with open(args.compare) as f:
            lines = compare(json.load(f), rec.records, args.threshold)
        print("\n".join(lines) if lines else f"\nno regressions against {args.compare}")
        return 1 if lines else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
