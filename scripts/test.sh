#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite twice: a
# regular build (gcc) and a clang build with AddressSanitizer +
# UndefinedBehaviorSanitizer that also runs each libFuzzer target for a
# bounded time. Ends with one line "N passed, N failed"; non-zero on failure.
#   FUZZ_SECONDS  seconds per fuzz target (default 30)
#   SKIP_SANITIZE=1  only the regular build (for quick local runs)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
[[ -e /dev/fuse ]] || { echo "test: /dev/fuse is missing: FUSE tests cannot run" >&2; exit 1; }

status=0
builds=(build)
echo "== regular build: meson test" >&2
meson test -C build --print-errorlogs --num-processes 2 || status=$?

if [[ "${SKIP_SANITIZE:-0}" != 1 ]]; then
  echo "== sanitizer build (clang, address+undefined, fuzz targets)" >&2
  if [[ ! -f build-asan/build.ninja ]]; then
    CC=clang CXX=clang++ meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
      -Dfuzz=true -Dcpp_args=-fno-sanitize-recover=all >/dev/null
  fi
  ninja -C build-asan | { grep -vE '^\[[0-9]+/[0-9]+\]' || true; }
  builds+=(build-asan)
  SHARDFS_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --num-processes 2 || status=$?

  fuzz_seconds="${FUZZ_SECONDS:-30}"
  fuzz_log="build-asan/meson-logs/fuzz.jsonl"
  : > "$fuzz_log"
  for target in tar_scanner record_decoder; do
    corpus="$(mktemp -d)"
    cp tests/fuzz/corpus/"$target"/* "$corpus"/
    echo "== fuzz $target for ${fuzz_seconds}s" >&2
    result=OK
    if ! (cd "$corpus" && "$OLDPWD/build-asan/tests/fuzz/${target}_fuzz" \
            -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -print_final_stats=1 . \
            >fuzz.log 2>&1); then
      result=FAIL
      status=1
      tail -n 40 "$corpus/fuzz.log" >&2
      cp "$corpus"/crash-* "$corpus"/leak-* "$corpus"/timeout-* build-asan/meson-logs/ 2>/dev/null || true
    fi
    grep -E '^stat::number_of_executed_units' "$corpus/fuzz.log" >&2 || true
    echo "{\"name\": \"fuzz-$target\", \"result\": \"$result\"}" >> "$fuzz_log"
    rm -rf "$corpus"
  done
fi

python3 - "${builds[@]}" <<'PY'
import json, os, sys
passed = failed = 0
for build in sys.argv[1:]:
    for log in ("testlog.json", "fuzz.jsonl"):
        path = os.path.join(build, "meson-logs", log)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r["result"] in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                else:
                    failed += 1
                    print(f"failed: {build}: {r['name']}", file=sys.stderr)
print(f"{passed} passed, {failed} failed")
PY
exit "$status"
