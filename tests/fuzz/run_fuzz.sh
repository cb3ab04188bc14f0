#!/bin/sh
# Runs one libFuzzer target for a bounded time, as a meson test (suite fuzz).
#   run_fuzz.sh FUZZER SEED_CORPUS_DIR LOG_DIR
# The seed corpus is copied to a fresh temporary directory, so the inputs the
# run discovers never land in the source tree. The fuzzer's output goes to
# LOG_DIR/fuzz-NAME.log; crash-, leak-, oom- and timeout- inputs are written
# to LOG_DIR as fuzz-NAME-crash-<sha1> and so on.
#   FUZZ_SECONDS  seconds to fuzz (default 15, at most 600: the meson timeout
#                 in meson.build is 720 s)
set -eu
if [ $# -ne 3 ]; then
  echo "usage: run_fuzz.sh FUZZER SEED_CORPUS_DIR LOG_DIR" >&2
  exit 2
fi
fuzzer=$1
seeds=$2
logs=$3
seconds=${FUZZ_SECONDS:-15}
case "$seconds" in
  ''|*[!0-9]*) echo "run_fuzz.sh: FUZZ_SECONDS=$seconds: expected whole seconds" >&2; exit 2 ;;
esac
if [ "$seconds" -lt 1 ] || [ "$seconds" -gt 600 ]; then
  echo "run_fuzz.sh: FUZZ_SECONDS=$seconds: expected 1..600" >&2
  exit 2
fi
name=$(basename "$fuzzer" _fuzz)
corpus=$(mktemp -d "${TMPDIR:-/tmp}/shardfs-fuzz-$name.XXXXXX")
trap 'rm -rf "$corpus"' EXIT
cp "$seeds"/* "$corpus"/
mkdir -p "$logs"
log="$logs/fuzz-$name.log"
echo "fuzz $name for ${seconds}s; output in $log"
# -timeout: an input that takes a minute is a hang, reported with its input
# well inside the meson timeout.
status=0
"$fuzzer" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$logs/fuzz-$name-" "$corpus" >"$log" 2>&1 || status=$?
grep -E '^stat::(number_of_executed_units|new_units_added)' "$log" || true
if [ "$status" -ne 0 ]; then
  tail -n 40 "$log"
  echo "fuzz $name failed (exit $status); inputs that failed:"
  ls "$logs" | grep -E "^fuzz-$name-(crash|leak|oom|timeout|slow-unit)-" || echo "(none written)"
  # libFuzzer's error exit code is 77, which meson would count as a skip.
  exit 1
fi
