#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/fuzz_*.c) with clang + ASan + UBSan in build-fuzz, replays each
# harness's committed seed corpus (fuzz/corpus/<harness>/), then fuzzes each harness for SECONDS
# (default 60; 0 only replays the corpus). New inputs go to build-fuzz/corpus/<harness>/ (kept between
# runs, so each run starts from what the last one found); crashes to build-fuzz/artifacts/. A failure
# prints the sanitizer's report. Exits non-zero on the first finding.
#   usage: tools/fuzz.sh [SECONDS]
#   env: TB_FUZZ_JOBS (build jobs, default 2), CC (default clang), TB_FUZZ_MERGE=1 (after fuzzing, merge
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
    dict_option=()
    dict="$root/fuzz/${harness#fuzz_}.dict"
    [[ -f "$dict" ]] && dict_option=(-dict="$dict")

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

    if [[ "$seconds" -le 0 ]]; then
        continue
    fi
    echo "== $harness: fuzzing for ${seconds}s"
    log="$build/$harness.log"
    set +e
    "$build/$harness" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$build/artifacts/$harness-" -print_final_stats=1 "${dict_option[@]}" "$work" "$seeds" \
        >"$log" 2>&1
    status=$?
    set -e
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|DONE" "$log" || true
    if [[ $status -ne 0 ]]; then
        tail -n 80 "$log" >&2
        echo "fuzz.sh: $harness found a problem (exit $status); inputs in $build/artifacts/" >&2
        exit 1
    fi
    if [[ "${TB_FUZZ_MERGE:-0}" == "1" ]]; then
        "$build/$harness" -merge=1 -timeout=10 "$seeds" "$work" >"$build/$harness.merge.log" 2>&1
        echo "== $harness: committed corpus now $(find "$seeds" -type f | wc -l) inputs (git status fuzz/corpus)"
    fi
done
echo "fuzz.sh: all harnesses replayed their corpus and ran ${seconds}s without findings"
