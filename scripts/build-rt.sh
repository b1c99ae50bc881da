#!/usr/bin/env bash
# Build pygpukit._rt (Rust, abi3: one build serves every CPython >= 3.10) into
# .carry/_rt.abi3.so, for machines without a Rust toolchain (the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
PYO3_PYTHON=${PYO3_PYTHON:-python3} cargo build --release --locked -p pygpukit-python
mkdir -p .carry
cp target/release/lib_rt.so .carry/_rt.abi3.so
echo "built .carry/_rt.abi3.so"
