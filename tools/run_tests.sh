#!/usr/bin/env bash
# Installs torchburn with its test dependencies and runs every test: the C tests (ctest), the C tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer, the fuzz harnesses (corpus replay plus a
# short fuzzing run each), and the Python tests against PyTorch and the HF libraries as oracles.
#
# Usage (after `pip install torch==2.13.0`):  bash tools/run_tests.sh
# Environment: TB_FUZZ_SECONDS (default 60 per harness; 0 replays the corpus only),
#              TB_SKIP_SANITIZERS=1 / TB_SKIP_FUZZ=1 to skip those stages locally,
#              TORCHBURN_TEST_REQUIRE_VULKAN=1 (set by .ci/run) makes a missing Vulkan device or shader
#              compiler a failure instead of a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc 2>/dev/null || echo 2)

python3 -c "import torch, sys; assert torch.__version__.startswith('2.13.0'), torch.__version__" || {
  echo "PyTorch 2.13.0 is required first: pip install torch==2.13.0" >&2; exit 1; }

echo "== install torchburn with test extras"
python3 -m pip install --quiet -e ".[test,llm]"

if command -v glslangValidator >/dev/null 2>&1; then
  echo "== committed SPIR-V matches the shaders"
  bash tools/gen_spirv.sh --check
elif [ "${TORCHBURN_TEST_REQUIRE_VULKAN:-0}" = "1" ]; then
  echo "glslangValidator is required to check the committed SPIR-V (apt-get install glslang-tools)" >&2; exit 1
fi

echo "== C tests (Release)"
cmake -S . -B build/ctest -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/ctest -j "$jobs"
ctest --test-dir build/ctest --output-on-failure -j "$jobs"

if [ "${TB_SKIP_SANITIZERS:-0}" != "1" ]; then
  echo "== C tests under ASan + UBSan"
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTB_SANITIZE=ON >/dev/null
  cmake --build build/asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 LSAN_OPTIONS=suppressions="$root/tests/c/lsan.supp" \
    ctest --test-dir build/asan --output-on-failure -j "$jobs"
fi

if [ "${TB_SKIP_FUZZ:-0}" != "1" ] && [ -f tools/fuzz.sh ]; then
  echo "== fuzz harnesses"
  if ! command -v clang >/dev/null 2>&1; then
    echo "installing clang (libFuzzer, ASan, UBSan)"
    (apt-get update -qq && apt-get install -y -qq clang >/dev/null) || { echo "could not install clang" >&2; exit 1; }
  fi
  bash tools/fuzz.sh "${TB_FUZZ_SECONDS:-60}"
fi

if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  echo "installing haproxy (the two-replica test of deploy/haproxy.cfg)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null) || {
    echo "could not install haproxy" >&2; [ "${CI:-}" != "true" ] || exit 1; }
fi

echo "== Python tests"
python3 -m pytest -q -p no:cacheprovider tests/python
