#!/usr/bin/env bash
# Installs what is missing and builds shardfs into BUILD_DIR (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh build
build_dir="${BUILD_DIR:-build}"
if [[ ! -f "$build_dir/build.ninja" ]]; then
  meson setup "$build_dir" ${MESON_ARGS:-} >/dev/null
fi
# Progress lines are noise; warnings and errors are not.
ninja -C "$build_dir" | { grep -vE '^\[[0-9]+/[0-9]+\]' || true; }
