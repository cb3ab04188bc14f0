// `pack --part K/N`: which entries of a source tree part K of N packs, so
// that N tasks of a job array, each packing its own part into its own shards
// and index, together pack the tree once; `index manifest` joins their
// indexes into one tree.
//
// Units. The source is cut into units, never split between parts: the
// leaves of the tree (files, symlinks, special files and empty directories;
// with a list, the listed paths) grouped by their SampleKey, the directory
// plus the name's SampleGroup (tools/pack/pack_plan.h). The files of a
// sample ("a/img1.jpg", "a/img1.cls") share their key, so a sample is never
// split; a directory entry or an empty directory whose name shares it stays
// with them too (harmless: it only joins more to one unit).
//
// The split. The distinct keys, sorted bytewise, are cut into N contiguous
// runs of near-equal counts, as `index build --part` cuts its shard list
// (ShardPartRange: run K is [floor(K*u/N), floor((K+1)*u/N)) of u units).
// Every task computes the same cut from the same list; nothing is shared
// between tasks but the source (and a list file, if one is given).
//
// Directories. A part holds its leaves and every directory above them, as
// scanned (mode, owner, mtime): the root and shared directories are in every
// part that needs them, with the same record, so the union of the parts is
// the tree.
//
// Hard links. Without a list, the units holding names of one file are put in
// one part (the part of the first such unit), so the file stays one inode
// with all its names. With a list, each part stores its own names of such a
// file; names in different parts become separate files of the union.
#ifndef SHARDFS_TOOLS_PACK_PACK_PART_H_
#define SHARDFS_TOOLS_PACK_PACK_PART_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tools/builder/index_build.h"  // ShardPart, ParseShardPart, ShardPartRange
#include "tools/pack/pack_options.h"    // PartCut
#include "tools/pack/source_tree.h"

namespace shardfs::pack {

// The name of part `part`'s output directory under pack's --out: "part-K",
// K padded with zeros to the digits of N-1, so that the parts sort in order
// by name ("part-07" before "part-10").
// REQUIRES: part.count > 0.
std::string PartDirName(const builder::ShardPart& part);

// The paths of a --from-list list (normalized) that part `part` takes:
// duplicates and paths below another listed path (which takes everything
// below it) dropped, grouped into units by key and cut as above; returned
// sorted. Empty if the part takes nothing.
std::vector<std::string> TakeListPart(std::vector<std::string> paths,
                                      const builder::ShardPart& part, PartCut* cut);

// The leaves of `scan` (indexes into its entries, in its order): every
// entry but the root and the directories that hold an entry of the scan.
std::vector<uint32_t> SourceLeaves(const TreeScan& scan);

// Keeps in `scan` only the entries part `part` takes (its leaves and the
// directories above them, the root always), in their order. Files that are
// names of one file (same dev and inode: a file with nlink > 1, or any file
// if `followed_symlinks`, as the scan may reach one through a symlink) are
// kept in one part with their units.
void TakeScanPart(TreeScan* scan, const builder::ShardPart& part, bool followed_symlinks,
                  PartCut* cut);

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_PACK_PART_H_
