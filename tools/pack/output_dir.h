// Pack's output directory before a pack: what an earlier pack (finished or
// interrupted) may have left there. Without --force such files are refused;
// with it, the output is replaced whole, and only if it holds nothing a pack
// did not write. A pack replaces no file it did not write itself unless
// forced, and deletes no file a pack did not write at all.
//
// Which files a pack wrote is known from its own records, never from a
// name: a finished pack's index (created_by kPackCreatedBy) lists its
// shards, and while a pack writes, its kPackRecordName file lists the
// shards it is about to write (a pack killed half way leaves it behind
// with them). An index another command made (`index build` over a user's
// shards beside it) records no shard of a pack's, nor does a file merely
// named like one.
#ifndef SHARDFS_TOOLS_PACK_OUTPUT_DIR_H_
#define SHARDFS_TOOLS_PACK_OUTPUT_DIR_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tools/pack/shard_name.h"

namespace shardfs::pack {

// An index's meta created_by when a pack wrote it (index/schema.h).
inline constexpr std::string_view kPackCreatedBy = "shardfs pack";

// The record a pack keeps in the directory it writes into while it writes:
// the names of the shards it is about to write, one a line. Written and
// synced before the first shard, removed once the index is published (the
// index is the record then).
inline constexpr std::string_view kPackRecordName = ".shardfs-pack-in-progress";

// Writes `dir`/kPackRecordName listing `names`, atomically, and syncs `dir`.
Status WritePackRecord(const std::string& dir, const std::vector<std::string>& names);
// Removes `dir`/kPackRecordName; Ok if it is missing, else IoError naming it.
Status RemovePackRecord(const std::string& dir);

// Without --force: AlreadyExists naming the first file in `out_dir` that
// has a shard's name or a shard's NAME.tmp name (whoever wrote it), shown as
// `out_shown` + its name, or else an interrupted pack's kPackRecordName.
// Adds a warning per index.tmp-* directory (an interrupted index publish) to
// `warnings` if not null. A missing `out_dir` holds nothing.
Status RefuseLeftovers(const std::string& out_dir, const ShardNamePattern& pattern,
                       const std::string& out_shown, std::vector<std::string>* warnings);

// --force: the names of the entries of `out_dir` that an earlier pack wrote
// (none if it is missing or empty): "index" if it is a shardfs index a pack
// made (created_by kPackCreatedBy) that no `index add` has changed since,
// the files that index lists as its shards in `out_dir` (written under any
// --name), an interrupted pack's kPackRecordName and the files it lists
// (and their NAME.tmp), and index.tmp-* and index.old-* directories (an
// interrupted publish). The directories count only if they hold nothing
// but the files an index (or a build's temporary directory) has
// (index/index_files.h). InvalidArgument naming (as `out_shown` + name, or
// + DIR/name inside one of them) the first other entry, a file named like a
// shard that no record lists among them, and why an "index" is not a
// pack's (another maker, none recorded, shards added since), or naming
// `out_dir` if it is not a directory: pack --force replaces an earlier
// output only, so a directory holding anything else is left untouched.
Result<std::vector<std::string>> ListEarlierOutput(const std::string& out_dir,
                                                   const std::string& out_shown);

// Removes `names` (ListEarlierOutput's, from the directory that was at the
// output) from `dir`, then `dir`; of the directories among them only their
// own files (index::RemoveOwnFiles), never descending further. An "index"
// that is no longer a shardfs index, a directory where a file was listed, or
// anything that appeared since is kept: IoError naming what is left and
// where.
Status RemoveEarlierOutput(const std::string& dir, const std::vector<std::string>& names);

}  // namespace shardfs::pack

#endif  // SHARDFS_TOOLS_PACK_OUTPUT_DIR_H_
