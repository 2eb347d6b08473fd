#!/usr/bin/env bash
# The GPU checks of the vulkan engine on a real NVIDIA machine (prepared for an H200 lease; needs
# the NVIDIA driver's Vulkan ICD). Builds torchburn into a venv, runs the engine and LLM GPU tests
# with TORCHBURN_TEST_REQUIRE_VULKAN=1 (no skips), then `python -m torchburn.bench gpu` (kernels and
# the LLM rows). On a discrete GPU the engine is in staging mode by itself (device-local buffers,
# copies through a staging buffer) and uses subgroup reductions where the driver reports them; the
# tests also run the weight-splitting path (TORCHBURN_VULKAN_MAX_BUFFER_RANGE lowered), the
# shared-memory fallback (TORCHBURN_VULKAN_NO_SUBGROUP=1), the partitioner's GPU/CPU split of
# compiled graphs, one submit per plan call / decode step with the staged copies inside it
# (test_gpu_batching.py: on a discrete GPU this is the real VRAM path) and bf16/f16 weights kept
# 16-bit (test_gpu_16bit.py; needs storageBuffer16BitAccess, which NVIDIA reports), and compiled
# nn.Linear weights split past a lowered maxStorageBufferRange (test_gpu_graph_limits.py), and compiled
# float16/bfloat16 graphs on the engine (test_gpu_compiled_16bit.py), and fused elementwise chains
# (specialized pipelines), reductions, strided copies, attention and whole transformer blocks
# (test_engine_fused.py). The bench's LLM
# table has a bf16 row (half the MiB uploaded at load) and transfer submits per token (0 expected).
# Timeouts bound it to 200 + 30 + 240 + 60 s < 9 minutes; output goes to ${OUT:-/tmp/gpu_check}.
#
# Usage: bash tools/gpu_h200_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
export TORCHBURN_TEST_REQUIRE_VULKAN=1
log() { echo "== $(date -u +%T) $*" | tee -a "$out/summary.txt"; }

log "machine"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1; nproc; uname -r; } | tee "$out/machine.txt"
ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>/dev/null | tee -a "$out/machine.txt"
if ! python3 -c "import ctypes; ctypes.CDLL('libvulkan.so.1')" 2>/dev/null; then
  log "libvulkan.so.1 missing: apt-get install -y libvulkan1 (the NVIDIA ICD comes with the driver)"
  (apt-get install -y libvulkan1 libvulkan-dev >"$out/apt.txt" 2>&1) || log "apt-get failed (see apt.txt)"
fi

log "build (venv with system packages, editable install)"
python3 -m venv --system-site-packages .venv-gpu >"$out/build.txt" 2>&1
. .venv-gpu/bin/activate
timeout 200 pip install --no-build-isolation -e ".[test,llm]" >>"$out/build.txt" 2>&1 || { log "build failed"; tail -30 "$out/build.txt"; exit 1; }

log "device as torchburn sees it"
timeout 30 python -c "import torchburn.gpu as g, json; print(json.dumps(g.gpu_info(), indent=1))" | tee "$out/gpu_info.json"
log "memory mode, reductions, 16-bit storage: $(grep -E '"(staging|subgroup_reductions|storage_16bit)"' "$out/gpu_info.json" | tr -d ' \n')"

log "tests: engine kernels, compiled graphs and the LLM forward on the GPU (split / staging / no-subgroup modes)"
timeout 240 python -m pytest -q -x tests/python/test_engine.py tests/python/test_engine_fused.py tests/python/test_llm_gpu.py \
  tests/python/test_gpu_batching.py tests/python/test_gpu_16bit.py tests/python/test_gpu_graph_limits.py tests/python/test_gpu_compiled_16bit.py \
  >"$out/tests.txt" 2>&1
log "tests rc=$? ($(tail -1 "$out/tests.txt"))"

log "bench gpu (kernels; LLM rows on the small random model: none, bf16, int8, int4)"
timeout 60 python -m torchburn.bench gpu --samples 3 >"$out/bench.txt" 2>&1
log "bench rc=$?"
cat "$out/bench.txt"
log "done"
