#!/usr/bin/env bash
# Every page of the manual (man/*.1) renders without a warning
# (man --warnings) and is installed (tools/cli/meson.build names it).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
pages=(man/*.1)
for page in "${pages[@]}"; do
  if ! out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null); then
    echo "$page: man failed: $out"
    status=1
  elif [[ -n "$out" ]]; then
    echo "$page: warnings:"
    echo "$out"
    status=1
  fi
  if ! grep -q "man/$(basename "$page")'" tools/cli/meson.build; then
    echo "$page: not installed (tools/cli/meson.build does not name it)"
    status=1
  fi
done
echo "check_man: ${#pages[@]} pages$( ((status == 0)) && echo ", no warnings, all installed")"
exit "$status"
