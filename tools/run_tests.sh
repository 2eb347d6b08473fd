#!/usr/bin/env bash
# Installs torchburn with its test dependencies and runs every test: the C tests (ctest), the C tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer, a subset of the Python tests against the
# extension built with those sanitizers, the threaded C tests under ThreadSanitizer, the fuzz harnesses
# (corpus replay plus a short fuzzing run each), and the Python tests against PyTorch and the HF
# libraries as oracles.
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
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTB_SANITIZE=ON -DTB_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v python3)" >/dev/null
  cmake --build build/asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 LSAN_OPTIONS=suppressions="$root/tests/c/lsan.supp" \
    ctest --test-dir build/asan --output-on-failure -j "$jobs"

  # The extension built in the same tree, staged with the Python sources; the folder's sitecustomize.py
  # drops the editable install's import hook so this process and its Python subprocesses import it.
  # A sanitized extension in an unsanitized python needs the ASan runtime preloaded; Python itself
  # "leaks" at exit, so leak detection is off here (the C tests above check leaks).
  echo "== Python tests against the ASan + UBSan extension (a subset)"
  site="$root/build/asan/site"
  rm -rf "$site" && mkdir -p "$site"
  cp -r python/torchburn "$site/" && cp tools/sanitized_site/sitecustomize.py "$site/"
  find "$site" \( -name "_C*.so" -o -name __pycache__ \) -prune -exec rm -rf {} +
  cp build/asan/_C*.so "$site/torchburn/"
  LD_PRELOAD="$(gcc -print-file-name=libasan.so)" PYTHONPATH="$site" ASAN_OPTIONS=detect_leaks=0 python3 -c \
    "import torchburn, sys; sys.exit(0 if torchburn._C.__file__.startswith('$site') else 'not the sanitized _C')"
  LD_PRELOAD="$(gcc -print-file-name=libasan.so)" PYTHONPATH="$site" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    python3 -m pytest -q -p no:cacheprovider tests/python/test_json.py tests/python/test_safetensors.py \
      tests/python/test_hf_config.py tests/python/test_tensor_interop.py tests/python/test_ops.py \
      tests/python/test_llm_reliability.py tests/python/test_llm.py tests/python/test_chat_template_fuzz.py \
      tests/python/test_tokenizer.py -k "not every_code_point"
  python3 -c "import torchburn, sys; sys.exit('the sanitized stage leaked into the install' if 'build/asan' in torchburn._C.__file__ else 0)"

  echo "== ThreadSanitizer: thread pool, plan cache, tokenizer, LLM and batching-engine C tests"
  cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTB_TSAN=ON >/dev/null
  cmake --build build/tsan -j "$jobs" --target test_thread_pool test_graph test_tokenizer test_llm test_llm_batch
  for t in test_thread_pool test_graph test_tokenizer test_llm test_llm_batch; do
    TSAN_OPTIONS="halt_on_error=1:die_after_fork=0:second_deadlock_stack=1" build/tsan/$t
  done
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
python3 -m pytest -q -p no:cacheprovider --durations=25 tests/python
