"""Fill the kernel disk cache for this GPU with every built-in instantiation
that CI compiles, in parallel (one NVRTC program per instantiation, exactly as
pygpukit compiles them when first used). The GPU test run calls this so that
its time goes to testing rather than to one-at-a-time compiles.

    python3 scripts/warm-kernel-cache.py [-j JOBS]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor


def _compile(job: tuple[str, str, int]) -> str | None:
    from pygpukit import kernels
    from pygpukit.jit import compiler

    name, expr, sm = job
    try:
        compiler.compile_source(kernels.source(name), [expr], sm, program_name=f"{name}.cu")
    except Exception as e:  # report every failure, keep compiling the rest
        return f"{name}: {expr}: {e}"
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count())
    args = p.parse_args()
    from pygpukit import _runtime
    from pygpukit.kernels.catalog import instantiations

    sm = _runtime.get().sm
    jobs = [(name, expr, sm) for name, exprs in instantiations().items() for expr in exprs]
    start = time.perf_counter()
    # spawn: the workers only need NVRTC, never the parent's CUDA context
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        errors = [e for e in pool.map(_compile, jobs, chunksize=8) if e]
    print(f"warmed {len(jobs) - len(errors)} of {len(jobs)} kernels for sm_{sm} in {time.perf_counter() - start:.0f} s")
    for e in errors:
        print("FAILED", e)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
