"""The ``pygpukit`` command: info, doctor, demo, ops, plugins, top, and the
commands plugins register (``pygpukit_register_commands``: the function takes
the remaining arguments and returns an exit status)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

BUILTIN = ("info", "doctor", "demo", "ops", "plugins", "top")


def _plugin_commands() -> dict[str, Any]:
    from .registry import REGISTRY

    REGISTRY.ensure_loaded()
    return {c.name: c for c in REGISTRY.commands.entries()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = {} if argv and argv[0] in BUILTIN else _plugin_commands()
    if argv and argv[0] in extra:
        return int(extra[argv[0]].main(argv[1:]) or 0)
    parser = argparse.ArgumentParser(prog="pygpukit", description="PyGPUkit command line")
    sub = parser.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="backend, device, driver, NVRTC and cache directory")
    p_info.add_argument("--json", action="store_true", help="print as JSON")
    sub.add_parser("doctor", help="check the installation and say how to fix problems")
    sub.add_parser("demo", help="a short tour: info, array ops, a jit kernel, pool stats")
    p_ops = sub.add_parser("ops", help="every op, its implementations, and which one runs here and why")
    p_ops.add_argument("--json", action="store_true", help="print as JSON")
    p_plugins = sub.add_parser("plugins", help="the plugins found, where they came from and their state")
    p_plugins.add_argument("--json", action="store_true", help="print as JSON")
    p_top = sub.add_parser("top", help="the scheduler of every pygpukit process here, live (partitions, tasks, pacing)")
    p_top.add_argument("--once", action="store_true", help="print one table and exit")
    p_top.add_argument("--json", action="store_true", help="print the published snapshots as JSON and exit")
    p_top.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p_top.add_argument("--dir", default=None, help="run directory (default: PYGPUKIT_RUN_DIR or <tmp>/pygpukit-<uid>)")
    for name, cmd in sorted(extra.items()):
        sub.add_parser(name, help=f"{cmd.description} (from plugin {cmd.plugin}; pygpukit {name} --help)", add_help=False)
    args = parser.parse_args(argv)

    if args.command == "info":
        from .info import info

        i = info()
        print(json.dumps(i.as_dict(), indent=2) if args.json else i)
        return 0
    if args.command == "doctor":
        from .doctor import main as doctor_main

        return doctor_main()
    if args.command == "ops":
        from . import ops

        print(json.dumps(ops.as_json_rows(), indent=1) if args.json else ops.format_table())
        return 0
    if args.command == "plugins":
        return _plugins(args.json)
    if args.command == "top":
        from .top import main as top_main

        if args.interval <= 0:
            parser.error("--interval must be > 0")
        return top_main(args.once, args.json, args.interval, args.dir)
    from .demo import main as demo_main

    return demo_main()


def _plugins(as_json: bool) -> int:
    from . import plugins

    rows = [
        {"name": p.name, "status": p.status, "source": p.source, "version": p.info.version if p.info else "",
         "description": p.info.description if p.info else ""}
        for p in plugins.plugins()
    ]  # fmt: skip
    if as_json:
        print(json.dumps(rows, indent=1))
    elif not rows:
        print("no plugins installed (packages announce themselves through the entry-point group 'pygpukit')")
    for r in [] if as_json else rows:
        print(f"{r['name']} {r['version']}: {r['status']}\n  {r['source']}" + (f"\n  {r['description']}" if r["description"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
