#!/usr/bin/env bash
# Fetches the source of libfuse >= 3.17.1 (Debian 13's `fuse3` source
# package) into subprojects/libfuse/. libfuse 3.17.1 is the first release that
# can pass FUSE_PARALLEL_DIROPS to the kernel (Debian 12 ships 3.14, which never
# does). shardfs builds against the system's libfuse; this source is for
# measuring a build against 3.17 with `shardfs_bench.py --dirops`
# (tools/bench/README.md, "Parallel lookups in one directory").
#
#   fetch-libfuse.sh [--force]
#
# The package comes from the Debian mirror this machine is configured with:
# its URI is read from the system's apt sources (deb822 files in
# /etc/apt/sources.list.d/ and the one-line /etc/apt/sources.list) at run
# time, and `apt-get update` / `apt-get source` run with a private apt
# configuration in a temporary directory (its own source list naming only
# `deb-src MIRROR trixie main`, its own package lists and cache). The
# system's sources, lists and caches are left as they are; the script checks
# that /etc/apt is unchanged when it is done.
#
# Idempotent: an existing subprojects/libfuse/ of a new enough version is kept
# (--force fetches again). The fetched code is not part of the tree
# (.gitignore). Installs dpkg-dev (for dpkg-source) with the system's apt when
# it is missing, running `apt-get update` once first.
set -euo pipefail

release=trixie
package=fuse3
min_version=3.17.1

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/subprojects/libfuse"
force=0
case "${1:-}" in
  --force) force=1 ;;
  "") ;;
  *) echo "fetch-libfuse: unknown argument '$1' (usage: fetch-libfuse.sh [--force])" >&2; exit 2 ;;
esac

die() { echo "fetch-libfuse: $*" >&2; exit 1; }

# The version in a libfuse tree's top-level meson.build: project(..., version: 'X').
tree_version() {
  sed -n "s/^[[:space:]]*version:[[:space:]]*'\([0-9][0-9.]*\)'.*/\1/p" "$1/meson.build" 2>/dev/null | head -n1
}
new_enough() {  # new_enough VERSION: VERSION >= min_version
  [[ -n "$1" ]] && dpkg --compare-versions "$1" ge "$min_version"
}

if [[ $force == 0 && -f "$dest/meson.build" ]]; then
  have="$(tree_version "$dest")"
  if new_enough "$have"; then
    echo "fetch-libfuse: libfuse $have already in subprojects/libfuse (--force to fetch again)"
    exit 0
  fi
  echo "fetch-libfuse: subprojects/libfuse holds libfuse '${have:-unknown}', older than $min_version: fetching again"
fi

command -v apt-get >/dev/null || die "apt-get not found: this script needs Debian's apt"
command -v dpkg >/dev/null || die "dpkg not found: this script needs Debian's dpkg"
if ! command -v dpkg-source >/dev/null; then
  [[ $(id -u) == 0 ]] || die "dpkg-source not found: install the package dpkg-dev (as root: apt-get install dpkg-dev)"
  echo "fetch-libfuse: installing dpkg-dev (for dpkg-source) with the system's apt"
  apt-get update -qq || die "apt-get update failed; the package dpkg-dev is needed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpkg-dev >/dev/null ||
    die "could not install the package dpkg-dev (needed for dpkg-source)"
fi

# The mirror: the URI of the first enabled `deb`/`deb-src` entry whose suite
# is a release name (bookworm, not bookworm-security: the security archive
# has no `trixie` suite), with the keyring it names, if any.
mirror=""
keyring=""
shopt -s nullglob
for f in /etc/apt/sources.list.d/*.sources; do
  # deb822: stanzas separated by blank lines; fields Types, URIs, Suites,
  # Enabled, Signed-By (a path; an inline key block is not used here).
  line="$(awk '
    function flush() {
      if (types ~ /(^| )deb(-src)?( |$)/ && enabled != "no" && uris != "") {
        n = split(suites, s, " ")
        for (i = 1; i <= n; i++) if (s[i] !~ /-/) { split(uris, u, " "); print u[1] "\t" signed; exit }
      }
      types = uris = suites = signed = ""; enabled = "yes"
    }
    BEGIN { enabled = "yes" }
    /^[[:space:]]*#/ { next }
    /^[[:space:]]*$/ { flush(); next }
    /^[A-Za-z-]+:/ {
      key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[[:space:]]*/, "", val)
      if (key == "types") types = val
      else if (key == "uris") uris = val
      else if (key == "suites") suites = val
      else if (key == "enabled") enabled = tolower(val)
      else if (key == "signed-by" && val ~ /^\//) signed = val
    }
    END { flush() }' "$f")"
  if [[ -n "$line" ]]; then
    mirror="${line%%$'\t'*}"
    keyring="${line#*$'\t'}"
    break
  fi
done
if [[ -z "$mirror" ]]; then
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    # deb [options] URI suite components...
    line="$(awk '
      $1 == "deb" || $1 == "deb-src" {
        i = 2; opts = ""
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) { opts = opts " " $i; i++ } opts = opts " " $i; i++ }
        if ($(i + 1) !~ /-/) {
          signed = ""
          if (match(opts, /signed-by=[^] ]+/)) signed = substr(opts, RSTART + 10, RLENGTH - 10)
          print $i "\t" signed; exit
        }
      }' "$f")"
    if [[ -n "$line" ]]; then
      mirror="${line%%$'\t'*}"
      keyring="${line#*$'\t'}"
      break
    fi
  done
fi
[[ -n "$mirror" ]] || die "no Debian mirror found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list (a 'deb' entry with a release suite)"
mirror="${mirror%/}"

etc_before="$(find /etc/apt -type f -exec sha256sum {} + 2>/dev/null | sort)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/parts" "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/src"
signed=""
[[ -n "$keyring" && -f "$keyring" ]] && signed="[signed-by=$keyring] "
echo "deb-src ${signed}${mirror} ${release} main" >"$tmp/sources.list"
apt_opts=(
  -o "Dir::Etc::SourceList=$tmp/sources.list"
  -o "Dir::Etc::SourceParts=$tmp/parts"
  -o "Dir::State::Lists=$tmp/lists"
  -o "Dir::Cache=$tmp/cache"
  -o "APT::Sandbox::User=root"
)

echo "fetch-libfuse: source package $package from $release on the configured mirror"
apt-get "${apt_opts[@]}" -qq update ||
  die "apt-get update of the private source list (deb-src $release main) failed"
(cd "$tmp/src" && apt-get "${apt_opts[@]}" -qq source "$package" >/dev/null) ||
  die "apt-get source $package failed (the source package $package from Debian $release)"

src=""
for d in "$tmp/src/$package"-*/; do src="${d%/}"; done
[[ -n "$src" && -f "$src/meson.build" ]] || die "apt-get source $package left no source tree with a meson.build"
got="$(tree_version "$src")"
new_enough "$got" || die "$package from $release is libfuse '${got:-unknown}', older than $min_version"

mkdir -p "$root/subprojects"
rm -rf "$dest"
mv "$src" "$dest"

etc_after="$(find /etc/apt -type f -exec sha256sum {} + 2>/dev/null | sort)"
[[ "$etc_before" == "$etc_after" ]] || die "/etc/apt changed while fetching (it should not have): check it"
echo "fetch-libfuse: libfuse $got in subprojects/libfuse"
