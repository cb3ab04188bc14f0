// `shardfs view export`: a view as the shards that hold its files and, per
// shard, the WebDataset sample keys of those files, so a WebDataset-style
// reader of the shards that keeps exactly those keys sees what the mount of
// the view shows.
//
// Tar paths. A view may rename, but the tar holds each file under its path in
// `default`. The view is walked once for its files (inode, shard, offset),
// then `default` (latest) is walked once and each of those inodes takes its
// paths there; a file `index add` has since replaced (its inode or its bytes
// are no longer in default latest) is looked up in the earlier versions of
// default, newest first. A file is matched only where shard and offset agree.
// A hard-linked file has one path per link in default; each gives a key (the
// tar holds the data under one of them, and the index does not say which).
//
// Keys (SampleKey): the tar path with the extension(s) of its basename
// removed, from the first '.' of the basename on. Leading dots of the
// basename belong to the name, not to an extension: ".hidden" keys as
// ".hidden" and "d/.cfg.json" as "d/.cfg" (WebDataset's own key rule skips
// such members, and members without an extension, altogether). Only regular
// files have keys: symlinks and directories hold no data in a shard.
#ifndef SHARDFS_TOOLS_BUILDER_VIEW_EXPORT_H_
#define SHARDFS_TOOLS_BUILDER_VIEW_EXPORT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "index/manifest.h"

namespace shardfs::builder {

// One file of a view as its shard holds it.
struct ShardFile {
  uint32_t shard = 0;
  uint64_t offset = 0;   // Of the file's data in the shard: tar order.
  std::string tar_path;  // Its path in default.
};

struct ExportShard {
  uint32_t shard_id = 0;
  std::string path;  // As `index info` prints it (IndexReader::ShardPath).
  // Unique, in the order of each key's first file in the shard.
  std::vector<std::string> keys;
};

struct ViewExport {
  std::string view;  // "NAME@N".
  // Every shard holding at least one file of the view, by shard id.
  std::vector<ExportShard> shards;
};

// The sample key of tar path `path` (see above).
std::string SampleKey(std::string_view path);

// Groups `files` by shard (ascending id) with their keys in offset order,
// each key once per shard. Leaves ExportShard::path empty.
std::vector<ExportShard> GroupKeys(std::vector<ShardFile> files);

// Opens view `spec` of the index at `index_path` (and default) and exports
// it. NotFound naming the index and the view when `spec` does not resolve;
// Corruption naming the index, the view and the inode when a file of the
// view is in no version of default. `resolve` finds a manifest's partitions
// (index/manifest.h; empty: local paths).
Result<ViewExport> ExportView(const std::string& index_path, const std::string& spec,
                              const index::PartitionResolver& resolve = {});

// "PATH\n" per shard of `ex`.
std::string FormatShardList(const ViewExport& ex);

// Replaces (or creates) `path` with `bytes` atomically: a temporary file in
// the same directory, fsynced, then renamed over `path`; removed on failure.
// The file's mode is 0666 less the umask.
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace shardfs::builder

#endif  // SHARDFS_TOOLS_BUILDER_VIEW_EXPORT_H_
