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
ls .carry/wheels
