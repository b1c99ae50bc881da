#!/usr/bin/env bash
# Run on the GPU test machine (no Rust, no network) from the repository root:
#   scripts/device-check.sh RESULTS_DIR [pytest args...]
# Needs .carry/_rt.abi3.so (built here by scripts/build-rt.sh and carried along);
# plugin wheels in .carry/wheels (scripts/build-plugin-wheels.sh) are installed
# too: the plugin packages before the tests (their tests run with
# core's), the example plugin after them, for tests-integration/plugin.
# TESTS="paths" runs only those tests; SKIP_WARM=1 skips compiling core's
# kernels up front; SKIP_BENCH=1 skips the benchmark, BENCH_ARGS adds to it.
# Installs pygpukit-core with --target into /tmp/pgk-site (the machine's python3
# keeps seeing its own torch, cupy, nvidia-cuda-nvrtc, scikit-build-core,
# pybind11; a venv made from it would not), runs every test
# (GPU tests included, after compiling the built-in kernels in parallel), the benchmark, doctor and info; logs and JSON go to RESULTS_DIR.
set -uo pipefail
OUT=${1:?usage: scripts/device-check.sh RESULTS_DIR [pytest args...]}
shift
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ROOT=$(pwd)
RT="$ROOT/.carry/_rt.abi3.so"
[ -f "$RT" ] || { echo "missing $RT: run scripts/build-rt.sh first and carry .carry"; exit 2; }

SITE=/tmp/pgk-site
export PYGPUKIT_CACHE_DIR=/tmp/pgk-kernel-cache
start=$(date +%s)
rm -rf "$SITE"
PYGPUKIT_PREBUILT_RT="$RT" python3 -m pip install -v --no-build-isolation --no-deps --no-index --target "$SITE" \
  ./packages/pygpukit-core > "$OUT/install.log" 2>&1 || { tail -n 60 "$OUT/install.log"; exit 3; }
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
WHEELS="$ROOT/.carry/wheels"
if [ -d "$WHEELS/deps" ]; then  # pygpukit-serve's dependencies (scripts/build-plugin-wheels.sh downloads them)
  python3 -m pip install --no-index --find-links "$WHEELS/deps" --target "$SITE" fastapi uvicorn openai httpx >> "$OUT/install.log" 2>&1 || { tail -n 20 "$OUT/install.log"; exit 3; }
fi
PLUGIN_TESTS=()
for plugin in gemm nn llm audio triton serve; do
  if compgen -G "$WHEELS/pygpukit_${plugin}-*.whl" > /dev/null; then
    python3 -m pip install --no-deps --no-index --target "$SITE" "$WHEELS"/pygpukit_${plugin}-*.whl >> "$OUT/install.log" 2>&1 || { tail -n 20 "$OUT/install.log"; exit 3; }
    PLUGIN_TESTS+=("$ROOT/packages/pygpukit-${plugin}/tests")
  fi
done
# TESTS="dir or file ...": run only those (relative to the repository root) instead of every test directory
if [ -n "${TESTS:-}" ]; then
  read -r -a TEST_PATHS <<< "$TESTS"
  TEST_PATHS=("${TEST_PATHS[@]/#/$ROOT/}")
else
  TEST_PATHS=("$ROOT/packages/pygpukit-core/tests" "$ROOT/native-libs/driver/tests" "${PLUGIN_TESTS[@]}")
fi
echo "install: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pygpukit info | tee "$OUT/info.txt"
python3 -m pygpukit doctor | tee "$OUT/doctor.txt"
[ "${SKIP_WARM:-0}" = "1" ] || python3 scripts/warm-kernel-cache.py | tee "$OUT/warm-cache.log"
cd /tmp  # test the installed wheel, not the source tree
python3 -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" -q -p no:cacheprovider "${TEST_PATHS[@]}" "$@" 2>&1 | tee "$OUT/pytest.log" | tail -n 40
rc=${PIPESTATUS[0]}; echo "pytest exit code: $rc" | tee -a "$OUT/pytest.log"
if compgen -G "$WHEELS/pygpukit_example_plugin-*.whl" > /dev/null; then
  python3 -m pip install --no-deps --no-index --target "$SITE" "$WHEELS"/pygpukit_example_plugin-*.whl >> "$OUT/install.log" 2>&1
  python3 -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" -q -p no:cacheprovider "$ROOT/tests-integration/plugin" 2>&1 | tee "$OUT/pytest-plugin.log" | tail -n 15
fi
if [ "${SKIP_BENCH:-0}" != "1" ]; then
  python3 -m pygpukit.benchmark --json "$OUT/bench.json" --markdown ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -n 30
fi
