"""Developer and CI sessions. The README's test command is `nox -s tests rust lint docs`.

tests   build and install every package as a wheel into a fresh venv, run all Python tests (CPU)
rust    cargo fmt --check, clippy -D warnings, cargo test
native  build the C++ driver module alone with warnings as errors
lint    ruff check, ruff format --check, the layer contracts (import-linter), mypy on the public modules
docs    every PYGPUKIT_* variable the code reads is documented; relative links resolve
gpu     on the GPU machine (no Rust, no network): install with a prebuilt _rt, run every test
        and the benchmark; see scripts/device-check.sh
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PLUGINS = ["gemm", "nn", "llm", "audio", "triton", "serve"]
TEST_DIRS = [
    "packages/pygpukit-core/tests",
    *[f"packages/pygpukit-{p}/tests" for p in PLUGINS],
    "native-libs/driver/tests",
    "tests-integration",
]
EXAMPLE_PLUGIN_TESTS = "tests-integration/plugin"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests", "rust", "lint", "docs"]


def _install_packages(session: nox.Session, *extra: str) -> None:
    session.install("./packages/pygpukit-core", *extra)
    # runtime dependencies of the plugins (installed below with --no-deps): pygpukit-llm's tokenizer side,
    # pygpukit-serve's web stack
    session.install("tokenizers>=0.19", "jinja2>=3.1", "fastapi>=0.110", "uvicorn>=0.29")
    session.install(*[f"./packages/pygpukit-{p}" for p in PLUGINS], "--no-deps")


@nox.session
def tests(session: nox.Session) -> None:
    """All Python tests on the CPU backend, against the installed wheels (not the source tree)."""
    _install_packages(session)
    # transformers: the reference of the tokenizer tests; safetensors: the llm tests write model directories with it;
    # scipy, librosa, soundfile: the references of pygpukit-audio (and load's reader);
    # triton: pygpukit-triton's kernels run in Triton's interpreter on the CPU backend (no torch, no GPU needed);
    # openai, httpx: the clients pygpukit-serve's tests drive the server with
    session.install("pytest>=8", "pytest-timeout>=2.3", "hypothesis>=6", "transformers>=4.45", "safetensors>=0.8", "scipy>=1.11", "librosa>=0.10", "soundfile>=0.12",
                    "triton==3.6.*", "openai>=1.30", "httpx>=0.27")  # fmt: skip
    env = {"PYGPUKIT_CACHE_DIR": str(ROOT / ".nox" / "kernel-cache")}
    # a test that hangs stops the run with every thread's stack (the slowest, the
    # elementwise compile, takes ~4 min on two cores); the slowest are listed
    guard = ["--timeout=900", "--timeout-method=thread", "--durations=15"]
    session.run("pytest", "-q", *guard, *TEST_DIRS, f"--ignore={EXAMPLE_PLUGIN_TESTS}", *session.posargs, env=env)
    # a third-party plugin, built and installed now: discovery, listing, routing, disabling
    session.install("./tests-integration/example-plugin", "--no-deps")
    session.run("pytest", "-q", *guard, EXAMPLE_PLUGIN_TESTS, *session.posargs, env=env)


@nox.session(venv_backend="none")
def rust(session: nox.Session) -> None:
    session.run("cargo", "fmt", "--all", "--check", external=True)
    session.run("cargo", "clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings", external=True)
    session.run("cargo", "test", "--workspace", "--locked", external=True)


@nox.session
def native(session: nox.Session) -> None:
    """Configure and build the C++ module alone (warnings are errors in its CMakeLists)."""
    session.install("pybind11>=2.12", "nvidia-cuda-runtime>=13.0", "cmake>=3.18", "ninja")
    build = ROOT / ".nox" / "native-build"
    pybind_dir = session.run("python", "-m", "pybind11", "--cmakedir", silent=True).strip()
    session.run("cmake", "-S", "native-libs/driver", "-B", str(build), "-G", "Ninja", "-DPYGPUKIT_WERROR=ON",
                f"-Dpybind11_DIR={pybind_dir}", f"-DPython_EXECUTABLE={session.bin}/python")  # fmt: skip
    session.run("cmake", "--build", str(build))


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6", "mypy>=1.10", "numpy", "ml_dtypes", "import-linter>=2.1")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # the layer contracts of pyproject.toml's [tool.importlinter], over the source trees:
    # import-linter reads the files without importing them, so nothing is built
    src = os.pathsep.join(str(ROOT / f"packages/pygpukit-{p}/src") for p in ["core", *PLUGINS])
    session.run("lint-imports", env={"PYTHONPATH": src})
    session.chdir(ROOT / "packages/pygpukit-core/src")  # the package and its native-module stubs
    session.run("mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "pygpukit")


@nox.session(venv_backend="none")
def docs(session: nox.Session) -> None:
    """Every PYGPUKIT_* environment variable read by the code is documented in the README,
    and every relative link in the Markdown files points at a file that exists."""
    code = ""
    for f in glob.glob(str(ROOT / "packages/*/src/**/*.py"), recursive=True) + glob.glob(
        str(ROOT / "native-libs/**/*.cpp"), recursive=True
    ):
        code += Path(f).read_text()
    used = set(re.findall(r"PYGPUKIT_[A-Z_]+", code)) - {"PYGPUKIT_DRIVER_TABLE_H"}
    readme = (ROOT / "README.md").read_text()
    missing = sorted(v for v in used if v not in readme)
    if missing:
        session.error(f"undocumented environment variables (add them to README.md): {missing}")
    broken = []
    for md in [ROOT / "README.md", *ROOT.glob("docs/*.md")]:
        prose = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)  # code blocks hold no links
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", prose):
            if not (md.parent / target).exists():
                broken.append(f"{md.relative_to(ROOT)} -> {target}")
    if broken:
        session.error("broken links: " + ", ".join(broken))
    session.log(f"{len(used)} environment variables documented; links ok")


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """On the GPU machine: scripts/device-check.sh RESULTS_DIR (uses the machine's own Python)."""
    out = session.posargs[0] if session.posargs else str(ROOT / "gpu-results")
    session.run("bash", "scripts/device-check.sh", out, external=True)
