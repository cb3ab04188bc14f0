#!/usr/bin/env bash
# Installs what is missing, checks that every C++ source keeps the tree's
# .clang-format, builds, and runs the whole test suite twice: a
# regular build (gcc) and a clang build with AddressSanitizer +
# UndefinedBehaviorSanitizer whose suite also runs each libFuzzer target for a
# bounded time (the tests of the suite 'fuzz', tests/fuzz/meson.build) and
# leaves out the suite 'timing' (tests/integration/meson.build says why). Ends
# with one line "N passed, N failed" counted from meson's testlog.json of each
# build; non-zero on failure.
#   FUZZ_SECONDS  seconds per fuzz target (default 15, at most 600)
#   SKIP_SANITIZE=1  only the regular build (for quick local runs)
set -euo pipefail
cd "$(dirname "$0")/.."
# One `apt-get update` for both groups of packages. The test-only group (the
# largest: torch for the loader benchmark, clang, the peers, the servers),
# then the S3 test server (npm; node may come with the test group, ~13 s in a
# fresh clone), then the format check (clang-format too) run while the
# regular build compiles, each step only if the one before it succeeded.
stamp="$(mktemp -u -t shardfs-apt-updated.XXXXXX)"
format_log="$(mktemp -t shardfs-format.XXXXXX)"
trap 'rm -f "$stamp" "$format_log"' EXIT
export APT_UPDATED_STAMP="$stamp"
bash scripts/install-deps.sh build
# The tree keeps its own .clang-format; a source that differs fails the run
# (exit 3 of the background steps), before any test, so that the format
# cannot drift again.
mapfile -t sources < <(find . \( -path './build*' -o -path ./.git -o -path ./subprojects -o -name node_modules \) -prune \
  -o \( -name '*.cc' -o -name '*.h' \) -print | sort)
(
  bash scripts/install-deps.sh test || exit 1
  bash scripts/install-test-servers.sh || exit 2
  clang-format --dry-run -Werror "${sources[@]}" >"$format_log" 2>&1 || exit 3
) &
deps_pid=$!
build_status=0
# A build dir this run sets up gets line tables only (-g1 after meson's -g,
# as the sanitizer build below does): failures keep function, file and line,
# and the compile, the largest part of a fresh run, takes about 30% less CPU.
# A build dir that exists keeps its own options.
[[ -f build/build.ninja ]] || export MESON_ARGS="-Dcpp_args=-g1 ${MESON_ARGS:-}"
bash scripts/build.sh || build_status=$?
deps_status=0
wait "$deps_pid" || deps_status=$?
if ((build_status != 0)); then echo "test: the build failed" >&2; exit "$build_status"; fi
case "$deps_status" in
  0) ;;
  1) echo "test: installing the test packages failed (scripts/install-deps.sh test)" >&2
     exit 1 ;;
  2) echo "test: installing the test servers failed (scripts/install-test-servers.sh)" >&2
     exit 1 ;;
  3) cat "$format_log" >&2
     echo "test: these sources differ from .clang-format: run clang-format -i on them" >&2
     exit 1 ;;
  *) echo "test: installing the test packages failed (status $deps_status)" >&2
     exit "$deps_status" ;;
esac
echo "test: packages and regular build took ${SECONDS} s" >&2
[[ -e /dev/fuse ]] || { echo "test: /dev/fuse is missing: FUSE tests cannot run" >&2; exit 1; }

status=0
builds=(build)

# The sanitizer build compiles while the regular suite runs, at the lowest
# priority: the suite's tests spend much of their time waiting (mounts,
# unmounts, child processes), and the compiler takes only the cores they
# leave idle. Its output goes to a log, shown if it fails.
asan_pid=""
asan_log="$(mktemp -t shardfs-asan-build.XXXXXX)"
trap 'rm -f "$stamp" "$format_log" "$asan_log"; [[ -n "$asan_pid" ]] && kill "$asan_pid" 2>/dev/null || true' EXIT
if [[ "${SKIP_SANITIZE:-0}" != 1 ]]; then
  # Line tables only (-gline-tables-only after meson's -g, as OSS-Fuzz builds
  # do): sanitizer reports keep function, file and line, and this tree, one
  # of the suite's largest compiles, compiles ~15% faster without full
  # debug info. A unity build (meson joins a target's sources four to a
  # file) parses the heavy headers (RocksDB, fmt, gtest) and emits their
  # templates once per group, not once per source: about a third less
  # compile time. It needs names private to a source (anonymous namespaces)
  # to differ across a target's sources; a clash fails here by name.
  if [[ ! -f build-asan/build.ninja ]]; then
    CC=clang CXX=clang++ meson setup build-asan --unity on -Dpython=disabled \
      -Db_sanitize=address,undefined -Db_lundef=false \
      -Dfuzz=true "-Dcpp_args=-fno-sanitize-recover=all -gline-tables-only" >/dev/null
  fi
  # The Python package is not built here: an extension module with the
  # sanitizer runtime loads only into an interpreter started with it
  # preloaded. Also set on a build dir made before the option existed.
  meson configure build-asan -Dpython=disabled >/dev/null
  nice -n 19 ninja -C build-asan >"$asan_log" 2>&1 &
  asan_pid=$!
fi

echo "== regular build: meson test" >&2
# A testlog.json left by an earlier run must not be counted if this one dies.
rm -f build/meson-logs/testlog.json
meson test -C build --print-errorlogs --num-processes 2 || status=$?
echo "test: regular suite done at ${SECONDS} s" >&2

if [[ -n "$asan_pid" ]]; then
  echo "== sanitizer build (clang, address+undefined, fuzz targets): meson test" >&2
  asan_status=0
  wait "$asan_pid" || asan_status=$?
  asan_pid=""
  if ((asan_status != 0)); then
    grep -vE '^\[[0-9]+/[0-9]+\]' "$asan_log" >&2 || true
    echo "test: the sanitizer build failed" >&2
    exit "$asan_status"
  fi
  echo "test: sanitizer build done at ${SECONDS} s" >&2
  builds+=(build-asan)
  rm -f build-asan/meson-logs/testlog.json
  FUZZ_SECONDS="${FUZZ_SECONDS:-15}" SHARDFS_SANITIZED=1 \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --num-processes 2 --no-suite timing || status=$?
  echo "test: sanitizer suite done at ${SECONDS} s" >&2
fi

# Every test of every build counts once; a missing log (meson test could not
# run) is a failure.
python3 - "${builds[@]}" <<'PY' || status=1
import json, os, sys
passed = failed = 0
for build in sys.argv[1:]:
    path = os.path.join(build, "meson-logs", "testlog.json")
    if not os.path.exists(path):
        failed += 1
        print(f"failed: {build}: no {path}", file=sys.stderr)
        continue
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r["result"] in ("OK", "EXPECTEDFAIL"):
                passed += 1
            else:
                failed += 1
                print(f"failed: {build}: {r['name']} ({r['result']})", file=sys.stderr)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
exit "$status"
