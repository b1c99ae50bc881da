"""The ``pygpukit`` command: info, doctor, demo."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pygpukit", description="PyGPUkit command line")
    sub = parser.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="backend, device, driver, NVRTC and cache directory")
    p_info.add_argument("--json", action="store_true", help="print as JSON")
    sub.add_parser("doctor", help="check the installation and say how to fix problems")
    sub.add_parser("demo", help="a short tour: info, array ops, a jit kernel, pool stats")
    args = parser.parse_args(argv)

    if args.command == "info":
        from .info import info

        i = info()
        print(json.dumps(i.as_dict(), indent=2) if args.json else i)
        return 0
    if args.command == "doctor":
        from .doctor import main as doctor_main

        return doctor_main()
    from .demo import main as demo_main

    return demo_main()


if __name__ == "__main__":
    sys.exit(main())
