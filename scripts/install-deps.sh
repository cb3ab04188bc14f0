#!/usr/bin/env bash
# Installs the Debian packages shardfs needs, only those that are missing.
#   install-deps.sh [all|build|test]
#     build  compile and run shardfs (and the demo)
#     test   the rest of the test suite and the benchmark: other tar writers
#            and readers, the sanitizer toolchain, the benchmark's peers and
#            its real loader (torch), the remote-shard test servers, a
#            single-node Slurm
#     all    both (the default)
# Runs `apt-get update` once before installing anything, and not at all when
# the file named by $APT_UPDATED_STAMP exists (scripts/test.sh installs the two
# groups one after the other and updates once); creates that file after an
# update.
set -euo pipefail
group="${1:-all}"

build_packages=(
  g++ meson ninja-build pkg-config
  libfuse3-dev librocksdb-dev libarchive-dev libxxhash-dev libfmt-dev
  libgtest-dev libgmock-dev
  libcurl4-openssl-dev
  # zip archives: deflated members are inflated with libdeflate
  libdeflate-dev
  # compressed tar shards (.tar.gz, .tar.zst, .tar.xz, .tar.bz2); reads of
  # .tar.gz inflate with ISA-L (igzip), about three times zlib's speed
  zlib1g-dev libisal-dev libzstd-dev liblzma-dev libbz2-dev
  # run; the demo's shards are written with GNU tar
  fuse3 tar python3
  # the Python package (src/python/shardfs): pybind11, the headers, and for
  # `pip install --no-build-isolation .` (README.md, "Python, without FUSE")
  # meson-python, pip and a venv of Debian's python3 that sees them
  pybind11-dev python3-dev python3-mesonpy python3-pip python3-venv
)
test_packages=(
  # other tar writers and reference readers
  libarchive-tools busybox
  # zip writers and reference extraction (tests/integration/test_zip.py)
  zip unzip
  # sanitizer and fuzz build
  clang libclang-rt-14-dev llvm
  # the format check (scripts/test.sh): the tree keeps its own .clang-format
  clang-format
  # the manual's check (scripts/check_man.sh): man --warnings
  man-db
  # benchmark peers
  squashfs-tools squashfuse archivemount
  # benchmark peers for zip and gzip archives (bench --archives)
  fuse-zip python3-indexed-gzip
  # benchmark: the real loader (torch DataLoader over torchvision ImageFolder)
  python3-torchvision python3-pil
  # the Python package's types checked with mypy --strict (tests/integration/test_python_typing.py)
  python3-mypy
  # the Python package's fsspec filesystem (tests/integration/test_python_fsspec.py)
  python3-fsspec
  # benchmark: --perf profiles the rows whose targets are not met (perf record)
  linux-perf
  # benchmark: --plot draws the ratios to the loose tree (matplotlib, Agg backend)
  python3-matplotlib
  # remote-shard tests: HTTP(S) server, its certificate, signed S3 uploads
  nginx-light openssl curl
  # partitioned builds as a Slurm job array: a single-node Slurm of its own
  # (tests/integration/test_slurm_array.py)
  slurm-wlm munge
  # the threads a daemon starts, counted by tracing it (tests/integration/test_mount_threads.py)
  strace
  # a real network filesystem in the tests: sshd of its own on 127.0.0.1,
  # sshfs over a delay proxy, the server's syscalls counted with strace
  # (tests/integration/netfs_testlib.py, test_netfs.py)
  openssh-server openssh-client sshfs
  # compressed tar shards (tests/integration/test_compressed_tar.py)
  pigz zstd xz-utils bzip2
  # multi-stream and multi-block bzip2 writers (tests/integration/test_bzip2.py)
  pbzip2 lbzip2
)
# node and npm run the S3 test server (scripts/install-test-servers.sh), which
# needs Node.js >= 20: an installed one is kept, Debian's only fills a gap.
command -v node >/dev/null || test_packages+=(nodejs)
command -v npm >/dev/null || test_packages+=(npm)

case "$group" in
  build) packages=("${build_packages[@]}") ;;
  test) packages=("${test_packages[@]}") ;;
  all) packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  *) echo "install-deps: unknown group '$group' (all, build or test)" >&2; exit 2 ;;
esac

# One dpkg-query for all of them (one a package took ~3 s per group); a
# package dpkg does not know is missing too.
declare -A installed=()
while read -r name state; do
  [[ "$state" == "install ok installed" ]] && installed["${name%%:*}"]=1
done < <(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for p in "${packages[@]}"; do
  [[ -n "${installed[$p]:-}" ]] || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  stamp="${APT_UPDATED_STAMP:-}"
  if [[ -z "$stamp" || ! -e "$stamp" ]]; then
    apt-get update -qq
    if [[ -n "$stamp" ]]; then touch "$stamp"; fi
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
