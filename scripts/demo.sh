#!/usr/bin/env bash
# The main job on the built-in sample: builds shardfs, packs a small
# ImageFolder-style tree into tar shards, indexes them, mounts the index
# read-only and shows the tree through the mount, then unmounts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
shardfs="$PWD/build/tools/cli/shardfs"

work="$(mktemp -d -t shardfs-demo.XXXXXX)"
mnt="$work/mnt"
cleanup() {
  if mountpoint -q "$mnt" 2>/dev/null; then fusermount3 -u "$mnt" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== sample tree, packed into three tar shards with GNU tar"
python3 scripts/make_sample.py "$work/sample"
mkdir -p "$work/shards" "$mnt"
tar --format=posix -C "$work/sample" -cf "$work/shards/train-000000.tar" train/cat
tar --format=posix -C "$work/sample" -cf "$work/shards/train-000001.tar" train/dog train/fox
tar --format=posix -C "$work/sample" -cf "$work/shards/train-000002.tar" README.txt empty latest
ls -l "$work/shards"

echo "== shardfs index build"
"$shardfs" index build --out "$work/shards/index" "$work/shards"
"$shardfs" index info "$work/shards/index"
"$shardfs" stat "$work/shards/index" train/dog/dog_003.ppm

echo "== shardfs mount (returns once mounted)"
"$shardfs" mount "$work/shards/index" "$mnt"
echo "-- ls -l of the mount"
ls -l "$mnt" "$mnt/train"
echo "-- find | head"
(cd "$mnt" && find . | sort | head -n 12)
echo "-- a sidecar through the mount"
cat "$mnt/train/fox/fox_002.json"
echo "-- the mount equals the source tree:"
diff -r "$work/sample" "$mnt" && echo "diff -r: identical"
df -h "$mnt" | tail -n 1

echo "== shardfs umount"
"$shardfs" umount "$mnt"

echo "== migration: shardfs pack the loose sample, then verify it"
"$shardfs" pack --quiet "$work/sample" --out "$work/packed" --shard-size 64K
ls "$work/packed"
"$shardfs" verify --quiet "$work/packed/index" "$work/sample" && echo "verify: identical"
echo "demo done"
