// `shardfs pack`: a directory tree in, tar shards and their index out.
//
// The tree is scanned first (in parallel; nothing is read but directories and
// inodes), sorted in tree order (index::TreeOrderLess) and cut into shards;
// then a pool of reader threads opens and reads files ahead of one writer
// thread, which writes the shards in order with archive::TarWriter and feeds
// each member's exact data offset and XXH3-64 to index::IndexWriter. The
// index is published last, at OUT_DIR/index.
//
// Member order. Entries are stored depth-first (a directory right before
// its descendants), siblings ordered by sample: by the name up to and
// including its first '.' (the whole name when it has none), then
// non-directories before directories, then the rest of the name (see
// PackOrderLess in tools/pack/pack_plan.h). For siblings of one kind this is
// plain byte order of the names, so shards follow the index's inode order
// except where a directory shares a sample prefix with files ("x/s.a",
// "x/s.z", then the directory "x/s.b/"): its subtree then comes after the
// sample instead of inside it.
//
// Sample order (--shuffle SEED, --from-list). The order above is kept for
// directories and within a sample, but the samples (and the empty
// directories) are placed in another order: with --shuffle, sorted by the
// seeded XXH3-64 of their sample key, so that every shard holds samples of
// nearly every class, the same tree and seed giving byte-identical shards;
// else with --from-list, in the order of the list's lines (the first line
// naming one of a sample's files, or a directory above it); --shuffle wins
// over a list's order. A directory is then stored right before the first
// sample below it, still before everything below it. The index is the
// same as without: only the shards and offsets of the files differ (see
// PlanMembers in tools/pack/pack_plan.h).
//
// Shards. Members are grouped into samples the way WebDataset groups them:
// consecutive non-directory members of one directory whose names agree up to
// the first '.' ("a/img1.jpg", "a/img1.cls"); the order above makes every
// sample of the tree consecutive. A sample is never split; a shard is cut
// before a sample that would take it past shard_size bytes (trailer
// included) or max_files members. A sample larger than shard_size gets a
// shard of its own. Directories (the root as "./") and symlinks are members
// too. Names WebDataset cannot group (no '.', a leading '.', extensions of
// one sample equal but for case) are reported as warnings, one per kind.
//
// Hard links. Every shard is self-contained: the first name of a file in a
// shard carries the data (a regular member), later names in that shard are
// tar hard links to it. A file whose first name went to an earlier shard is
// therefore stored again, as a regular member, in each later shard that
// holds one of its names. The index still holds one inode for all the names
// (the data of the first name), so the mount shows the hard links of the
// source; an `index build` over the shards alone sees such a copy as a file
// of its own.
//
// Safety. The source is opened read-only, O_NOATIME where allowed, with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) so nothing outside SRC_DIR
// is read even if the tree changes under the pack. Each shard is written as
// NAME.tmp, fsynced and renamed; the directory is fsynced before the index is
// published atomically. An interrupted pack therefore leaves no index.
//
// Re-running. A pack deletes or replaces no file it did not write itself in
// the same run unless force is set. Without force it refuses to start, before
// anything is written, when OUT_DIR/index exists or when OUT_DIR holds a
// file its name pattern could produce (a shard or NAME.tmp, whoever wrote
// it: an interrupted pack's leftovers too) or an interrupted pack's record
// (below); index.tmp-* directories left by
// an interrupted publish are left alone (with a warning). With force it
// replaces an earlier output whole, and only that: OUT_DIR may hold nothing
// but what a pack's own records say a pack wrote, never judged by a name:
// an index a pack made (meta created_by "shardfs pack", no `index add`
// since) and the shards it lists there; an interrupted pack's
// .shardfs-pack-in-progress (the shards it was writing, listed before the
// first was made, removed once the index is published) and the files it
// lists, as NAME or NAME.tmp; and index.tmp-*/index.old-* directories,
// those directories holding only an index's or a build's own files (see
// ListEarlierOutput). Anything else stops the pack before anything is
// written: an index `index build` made over a user's shards beside it
// (and so those shards), a user's file named like a shard, a user's file
// inside "index". The new output is written into a fresh
// OUT_DIR.tmp-HOST-PID-* beside
// OUT_DIR and exchanged with it in one step once complete (ReplaceDirectory
// in base/paths.h), then the old one is removed: a failed or interrupted
// forced pack leaves the earlier output as it was (and at most an
// OUT_DIR.tmp-* directory of its own). Neither of SRC_DIR and OUT_DIR may
// hold the other. Output is deterministic (same tree, same options ->
// byte-identical shards), so a forced restart reproduces an interrupted
// pack. A failed pack removes the shards it wrote.
//
// Compression (--compress zstd|gzip). Each shard's tar, the same bytes as
// without it, is written to an unnamed temporary file in OUT_DIR, then cut
// into groups of whole samples and compressed into NAME.tmp so that every
// group decodes alone (tools/pack/shard_compress.h); the index gets the shard's
// codec and one seek point per group, with no window. --shard-size counts
// the tar.
//
// The parts, in pack/: pack_options (the options and the report),
// source_tree (the scan), pack_plan (order, samples, shard cuts),
// source_prefetch (the reader threads), shard_writer (the shards),
// shard_compress (groups and codecs), shard_name and output_dir (names and
// leftovers of OUT_DIR), pack_part (--part) and pack_from_index
// (--from-index); verify is `shardfs verify`, a pack against its source.
//
// Parts (--part K/N, K 0-based, as `index build --part`). One task of a job
// array packs part K of the source (tools/pack/pack_part.h: units of whole
// samples cut into N runs) into its own shards and index in
// OUT_DIR/part-K; `index manifest OUT_DIR/part-*/index` joins the parts. The
// split needs the whole source's list: each task scans the whole tree
// (metadata only), or, with --from-list FILE (written once, e.g. by
// --list-only), splits FILE's lines and scans only its own. With --shuffle,
// a part's samples come in the order the whole tree's shuffle gives them. A part is
// written into a hidden OUT_DIR/.part-K.tmp-HOST-PID-* and renamed to
// OUT_DIR/part-K only once complete, never over one that appeared
// meanwhile; a task that is killed leaves only that hidden directory, which
// a re-run on the same host removes once its maker is gone. The index
// records "K/N" and the unit count (kMetaPartition, kMetaPartitionShards).
//
// Thread safety: Pack is self-contained; call it from one thread.
#ifndef SHARDFS_TOOLS_PACK_PACK_H_
#define SHARDFS_TOOLS_PACK_PACK_H_

#include "base/status.h"
#include "tools/pack/pack_options.h"
#include "tools/pack/shard_name.h"  // ParseShardName checks a --name early.

namespace shardfs::pack {

// Packs options.src into shards and an index in options.out. On failure
// returns a non-ok Status (report->errors then lists every unreadable or
// unsupported entry found, each with its reason) and publishes no index:
// InvalidArgument for bad options or entries that cannot be packed, for
// SRC_DIR and OUT_DIR holding one another, or with force for an OUT_DIR
// holding what no pack wrote (nothing is written then), AlreadyExists if
// OUT_DIR/index or a file named like a shard exists and !force (nothing is
// written then), IoError if writing fails,
// Corruption if a file changed while it was packed (from an index: a source
// shard changed since indexing, or the packed tree differs from the view;
// report->errors lists the differences and nothing is left published).
Status Pack(const PackOptions& options, PackReport* report);

// pack --list-only: scans options.src (with its excludes and
// follow_symlinks) and writes its leaves (files, symlinks, special files,
// unreadable entries and empty directories; not the directories above them)
// to options.list_only, one path per line in tree order, atomically: the
// list a --from-list of a --part pack takes. InvalidArgument naming a path
// with a newline (a line cannot hold it).
Status ListSource(const PackOptions& options, PackReport* report);

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_PACK_H_
