#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/fuzz_*.c) with clang + ASan + UBSan in build-fuzz, replays each
# harness's committed seed corpus (fuzz/corpus/<harness>/), then fuzzes each harness for SECONDS
# (default 60; 0 only replays the corpus). New inputs go to build-fuzz/corpus/<harness>/ (kept between
# runs, so each run starts from what the last one found); crashes to build-fuzz/artifacts/. A failure
# prints the sanitizer's report. Exits non-zero on the first finding.
#   usage: tools/fuzz.sh [SECONDS]
#   env: TB_FUZZ_JOBS (build jobs, default 2), TB_FUZZ_PARALLEL (harnesses fuzzed at once, default: cores), CC (default clang), TB_FUZZ_MERGE=1 (after fuzzing, merge
#        the inputs that add coverage into the committed corpus fuzz/corpus/<harness>/, for review and commit)
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"
cc="${CC:-clang}"

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz.sh: $cc not found (apt-get install -y clang)" >&2
    exit 2
fi

# -fsanitize=fuzzer-no-link instruments the library itself for coverage; the harnesses add
# -fsanitize=fuzzer (CMakeLists.txt, TB_FUZZ) and ASan+UBSan apply to everything.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER="$cc" -DTB_FUZZ=ON -DBUILD_TESTING=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null

harnesses=()
for source in "$root"/fuzz/fuzz_*.c; do
    harnesses+=("$(basename "$source" .c)")
done
ninja -C "$build" -j "${TB_FUZZ_JOBS:-2}" "${harnesses[@]}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$build/artifacts"
for harness in "${harnesses[@]}"; do
    seeds="$root/fuzz/corpus/$harness"
    work="$build/corpus/$harness"
    mkdir -p "$work" "$seeds"
    echo "== $harness: replaying $(find "$seeds" -type f | wc -l) seed and $(find "$work" -type f | wc -l) grown inputs"
    if compgen -G "$seeds/*" >/dev/null || compgen -G "$work/*" >/dev/null; then
        log="$build/$harness.replay.log"
        set +e
        find "$seeds" "$work" -type f -print0 | xargs -0 "$build/$harness" -timeout=10 >"$log" 2>&1
        status=$?
        set -e
        grep -E "^Executed" "$log" | tail -n 1 || true
        if [[ $status -ne 0 ]]; then
            tail -n 80 "$log" >&2 # the sanitizer's report and the input that triggered it
            echo "fuzz.sh: $harness failed while replaying its corpus (exit $status); log: $log" >&2
            exit 1
        fi
    fi
done

# Fuzzing proper: up to TB_FUZZ_PARALLEL harnesses at once (default: the number of cores; each libFuzzer
# process uses one), so a 2-core CI machine fuzzes two harnesses in the wall time of one.
fuzz_one() {
    local harness="$1" work="$build/corpus/$1" seeds="$root/fuzz/corpus/$1" dict="$root/fuzz/${1#fuzz_}.dict"
    local dict_option=()
    [[ -f "$dict" ]] && dict_option=(-dict="$dict")
    "$build/$harness" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$build/artifacts/$harness-" -print_final_stats=1 "${dict_option[@]}" "$work" "$seeds" \
        >"$build/$harness.log" 2>&1
}
report_one() {
    local harness="$1" status="$2"
    echo "== $harness: fuzzed for ${seconds}s"
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|DONE" "$build/$harness.log" || true
    if [[ $status -ne 0 ]]; then
        tail -n 80 "$build/$harness.log" >&2
        echo "fuzz.sh: $harness found a problem (exit $status); inputs in $build/artifacts/" >&2
        return 1
    fi
    if [[ "${TB_FUZZ_MERGE:-0}" == "1" ]]; then
        "$build/$harness" -merge=1 -timeout=10 "$root/fuzz/corpus/$harness" "$build/corpus/$harness" \
            >"$build/$harness.merge.log" 2>&1
        echo "== $harness: committed corpus now $(find "$root/fuzz/corpus/$harness" -type f | wc -l) inputs (git status fuzz/corpus)"
    fi
}
if [[ "$seconds" -gt 0 ]]; then
    parallel="${TB_FUZZ_PARALLEL:-$(nproc 2>/dev/null || echo 1)}"
    echo "== fuzzing ${#harnesses[@]} harnesses for ${seconds}s each, $parallel at a time"
    failed=0
    for ((first = 0; first < ${#harnesses[@]}; first += parallel)); do
        batch=("${harnesses[@]:first:parallel}")
        pids=()
        for harness in "${batch[@]}"; do
            fuzz_one "$harness" &
            pids+=($!)
        done
        for i in "${!batch[@]}"; do
            set +e
            wait "${pids[$i]}"
            status=$?
            set -e
            report_one "${batch[$i]}" "$status" || failed=1
        done
        [[ $failed -eq 0 ]] || exit 1
    done
fi
echo "fuzz.sh: all harnesses replayed their corpus and ran ${seconds}s without findings"
