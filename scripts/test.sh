#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite.
# Ends with one line "N passed, N failed" and exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
[[ -e /dev/fuse ]] || { echo "test: /dev/fuse is missing: FUSE tests cannot run" >&2; exit 1; }

status=0
meson test -C build --print-errorlogs --num-processes 2 || status=$?

# One summary line across every build that ran.
python3 - build <<'PY'
import json, sys
passed = failed = 0
for build in sys.argv[1:]:
    with open(f"{build}/meson-logs/testlog.json") as f:
        for line in f:
            r = json.loads(line)
            if r["result"] in ("OK", "EXPECTEDFAIL"):
                passed += 1
            else:
                failed += 1
print(f"{passed} passed, {failed} failed")
PY
exit "$status"
