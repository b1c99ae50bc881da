#!/usr/bin/env bash
# Build the pure-Python plugin packages (and the example third-party plugin of
# tests-integration) as wheels into .carry/wheels, for the GPU machine, which
# has no network to fetch their build backend. scripts/device-check.sh
# installs whatever wheels it finds there.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .carry/wheels
mkdir -p .carry/wheels
for pkg in packages/pygpukit-gemm packages/pygpukit-nn packages/pygpukit-llm packages/pygpukit-audio packages/pygpukit-triton packages/pygpukit-serve tests-integration/example-plugin; do
  python3 -m pip wheel --quiet --no-deps --wheel-dir .carry/wheels "./$pkg"
done
# pygpukit-serve's web stack and the clients its tests use, for the GPU machine's Python (3.12, no network)
python3 -m pip download --quiet --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --dest .carry/wheels/deps \
  "fastapi>=0.110" "uvicorn>=0.29" "openai>=1.30" "httpx>=0.27"
ls .carry/wheels
