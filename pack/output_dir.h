// Pack's output directory before a pack: what an earlier pack (finished or
// interrupted) may have left there. Without --force such files are refused;
// with it, the output is replaced whole, and only if it holds nothing a pack
// did not write. A pack replaces no file it did not write itself unless
// forced, and deletes no file a pack did not write at all.
#ifndef SHARDFS_PACK_OUTPUT_DIR_H_
#define SHARDFS_PACK_OUTPUT_DIR_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "pack/shard_name.h"

namespace shardfs::pack {

// Without --force: AlreadyExists naming the first file in `out_dir` that
// has a shard's name or a shard's NAME.tmp name (whoever wrote it), shown as
// `out_shown` + its name. Adds a warning per index.tmp-* directory (an
// interrupted index publish) to `warnings` if not null. A missing `out_dir`
// holds nothing.
Status RefuseLeftovers(const std::string& out_dir, const ShardNamePattern& pattern,
                       const std::string& out_shown, std::vector<std::string>* warnings);

// --force: the names of the entries of `out_dir` that an earlier pack wrote
// (none if it is missing or empty): "index" if it is a shardfs index, the
// files that index lists as its shards in `out_dir` (written under any
// --name), files named like a shard or NAME.tmp by `pattern`, and
// index.tmp-* and index.old-* directories (an interrupted publish). The
// directories count only if they hold nothing but the files an index (or a
// build's temporary directory) has (index/index_files.h). InvalidArgument
// naming (as `out_shown` + name, or + DIR/name inside one of them) the first
// other entry, or `out_dir` if it is not a directory: pack --force replaces
// an earlier output only, so a directory holding anything else is left
// untouched.
Result<std::vector<std::string>> ListEarlierOutput(const std::string& out_dir,
                                                   const ShardNamePattern& pattern,
                                                   const std::string& out_shown);

// Removes `names` (ListEarlierOutput's, from the directory that was at the
// output) from `dir`, then `dir`; of the directories among them only their
// own files (index::RemoveOwnFiles), never descending further. An "index"
// that is no longer a shardfs index, a directory where a file was listed, or
// anything that appeared since is kept: IoError naming what is left and
// where.
Status RemoveEarlierOutput(const std::string& dir, const std::vector<std::string>& names);

}  // namespace shardfs::pack

#endif  // SHARDFS_PACK_OUTPUT_DIR_H_
