#!/usr/bin/env bash
# Installs every Debian package shardfs needs to build, test and benchmark.
# Runs `apt-get update` once, then installs only what is missing.
set -euo pipefail

packages=(
  # build
  g++ meson ninja-build pkg-config
  libfuse3-dev librocksdb-dev libarchive-dev libxxhash-dev libfmt-dev
  libgtest-dev libgmock-dev
  libcurl4-openssl-dev
  # run
  fuse3
  # tests: other tar writers and reference readers
  tar libarchive-tools python3 busybox
  # sanitizer and fuzz build
  clang libclang-rt-14-dev llvm
  # benchmark peers
  squashfs-tools squashfuse archivemount
  # benchmark: the real loader (torch DataLoader over torchvision ImageFolder)
  python3-torchvision python3-pil
  # remote-shard tests: HTTP(S) server, its certificate, signed S3 uploads
  nginx-light openssl curl
)
# node and npm run the S3 test server (scripts/install-test-servers.sh), which
# needs Node.js >= 20: an installed one is kept, Debian's only fills a gap.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install-deps: installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
