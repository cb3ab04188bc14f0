// `index build --recursive`: a member of a tar or zip shard that is itself
// an uncompressed tar or a zip is shown as a directory holding the inner
// archive's tree.
//
// What counts as a nested tar: a regular (not sparse) member of at least one
// 512-byte block whose data starts with a tar header carrying the ustar magic
// ("ustar\0" of POSIX ustar and pax, "ustar  \0" of GNU) and a valid header
// checksum (the unsigned sum, or the signed one of some old writers). The
// member's name does not matter; a v7 tar (no magic) stays a file. Such a
// member whose inner tar is damaged fails the build (naming the shard, the
// member and the inner offset): the tree never silently changes shape.
//
// The inner tree is what GNU tar extracts with `tar -xf inner.tar -C DIR`,
// DIR being the member's own path (or, with strip_extension, that path less
// a final ".tar", any case: `n01440764.tar` -> `n01440764`):
//   - inner names are joined under DIR as the archive spells them, so the
//     usual rules apply within it: a leading '/' is dropped, a name with a
//     ".." component is left out with a message, as in any shard;
//   - hard links inside the inner tar name members of the inner tar: their
//     targets are joined under DIR too, so they resolve within it, and one
//     that would leave it ("..") is left out with a message;
//   - symlink targets are kept as written, as tar extracts them;
//   - DIR itself is a directory member at the nested member's position in the
//     outer archive: owner and mtime the member's, mode its permission bits
//     plus search (x) wherever they grant read (0644 -> 0755). Like any
//     directory member it merges with a directory of that name met earlier
//     or later (the later member's attributes win), replaces a file of that
//     name met earlier, and a later file of that name is refused as tar
//     refuses it (index/tree_builder.h). An inner "./" member describes DIR.
//   - a hard link of the outer archive to a nested tar (an earlier member of
//     the same shard) is the same tar under the link's name: it is shown as a
//     second directory with the same tree (the same byte ranges).
// Inner members are byte ranges of the outer shard (the inner data offset
// plus the member's data offset), so reads stay zero-copy and checksums are
// computed as for any member; nothing in the index schema changes.
//
// Zips nest too (src/archive/nested_zip.h). What counts as a nested zip is the
// content, not the name: a regular member that starts with a local header
// (or, an empty zip, the end record) and ends with an end of central
// directory record (LooksLikeZip), so an .npz or .jar is one as well. Its tree
// is what `unzip -o inner.zip -d DIR` extracts (src/archive/zip_scanner.h's rules),
// DIR being the member's path (less a final ".zip" with strip_zip_extension;
// strip_extension, ratarmount's option, strips ".tar" only), a directory
// member made as for a tar. A stored inner member is a byte range of the
// outer shard; a deflated one an encoded member whose compressed offset is in
// the outer shard, so the mount inflates it as it does a top-level zip's. The
// refusals of a top-level zip apply, naming the shard, the nested member and
// the inner member; and a zip bomb is refused before its members are scanned
// (src/archive/zip_scanner.h, as for a shard).
// In the other direction, a stored tar (or zip) inside a zip shard nests the
// same way. A tar or zip stored deflated inside a zip is refused: its members
// would not be byte ranges of the shard (this also ends a quine, which needs
// a compressed copy of itself).
//
// Nesting applies again inside, down to max_depth archive levels below the
// shard (1: only archives directly in the shard are opened); a deeper one
// stays a file, with a warning. Each level lies strictly inside its parent's
// data, so nesting always ends; the count of nested entries of one shard is
// bounded all the same (max_entries), against an archive made to explode.
//
// Compressed tars nest as slice shards (index/schema.h, "Slice shards"). A
// member whose content is a gzip, bzip2, zstd or xz stream whose start
// decodes to a tar header (an xz stream also by its name, *.tar.xz or
// *.txz) is decoded whole at build time, with seek points as for a
// top-level compressed shard; it becomes a shard of its own, a slice of the
// outer file (its data range), and its tree is what `tar -xf inner.tar.gz
// -C DIR` extracts, DIR named as for a tar (with strip_extension less a
// final .tar.gz, .tgz, .tar.zst, .tar.zstd, .tzst, .tar.xz, .txz, .tar.bz2,
// .tbz2, .tbz or .tar, any case). Its members are members of the slice
// (ScannedMember::slice), at their decoded offsets, in the outer archive's
// order. Tars and stored zips inside the slice nest in turn, as inside a
// top-level compressed shard (one more level each). Refused, naming the
// shard and the member: a compressed tar inside a compressed tar (a slice
// of a decoded stream, or a top-level compressed shard's member), a sparse
// member in the slice, and an inner stream that is corrupt, truncated or
// carries trailing garbage, and a compression bomb: a stream that decodes to
// more than kZipRatioFloor and kDefaultMaxZipRatio times its size
// (src/archive/zip_scanner.h's default bound), stopped as it decodes. A quine needs a
// compressed tar inside a compressed tar: refused. A hard link to a compressed tar is that tar
// again: a second slice of the same range. Other compressed files
// (.json.gz) are ordinary files. Without --recursive all of them stay
// files.
#ifndef SHARDFS_SRC_ARCHIVE_NESTED_SCAN_H_
#define SHARDFS_SRC_ARCHIVE_NESTED_SCAN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "src/archive/ctar_scanner.h"
#include "src/archive/tar_scanner.h"

namespace shardfs::archive {

struct NestOptions {
  bool recursive = false;              // --recursive
  int max_depth = 4;                   // --recursive-depth, at least 1.
  bool strip_extension = false;        // --strip-recursive-tar-extension
  bool strip_zip_extension = false;    // --strip-recursive-zip-extension
  uint64_t max_entries = 100'000'000;  // --recursive-max-entries, per shard.
  uint64_t seek_spacing = 0;           // --seek-spacing for slices (0: default).
  // --max-zip-ratio: the zip bomb bound (src/archive/zip_scanner.h) of every zip,
  // a shard or nested; the only one of these that applies without
  // --recursive.
  uint64_t max_zip_ratio = kDefaultMaxZipRatio;
  bool depth_given = false;  // For the command line's checks only.
  bool max_entries_given = false;
};

// What a nested member's content is (see the header comment).
enum class NestedKind { kNone, kTar, kCompressedTar, kZip };
NestedKind ClassifyMember(std::string_view name, const char* data, uint64_t size);

// Expands the nested tars of one shard's members. Not thread-safe: one per
// shard scan.
class NestedScanner {
 public:
  using Emit = std::function<Status(ScannedMember&&)>;

  // `shown`: the shard's name in messages; `checksum`: hash inner members.
  NestedScanner(const NestOptions& options, std::string shown, bool checksum);

  // The shard's bytes, which must stay mapped while members are handed in
  // (ScanOptions::on_mapped).
  void SetShardBytes(const char* data, size_t size) {
    data_ = data;
    size_ = size;
  }

  // Hands member `m` of the shard (in archive order) to `emit`, or, for a
  // nested tar, its directory member and then its inner members (recursively)
  // with offsets in the shard. Returns the refusals described above and
  // whatever `emit` returns.
  Status Member(ScannedMember&& m, const Emit& emit);

  // The shard is a compressed tar: the bytes given are its decoded stream,
  // and offsets are in it. A deflated member of a zip in it is refused (a
  // read would inflate from the shard's raw bytes).
  void SetDecodedStream() { decoded_stream_ = true; }

  // The scan of the shard starts again from its first member
  // (ScanOptions::restart): forget what was seen.
  void Restart();

  // Members of nested tars handed to `emit` (their directories not counted).
  uint64_t nested_members() const { return nested_members_; }
  // Tars shown as directories.
  uint64_t nested_archives() const { return nested_archives_; }

  // A compressed tar found in the shard: a slice of it.
  struct Slice {
    uint64_t base = 0;  // The member's data offset in the shard.
    uint64_t length = 0;
    CompressedScan scan;
  };
  // The slices found so far; slice k of ScannedMember::slice is
  // slices()[k - 1].
  std::vector<Slice>& slices() { return slices_; }

 private:
  struct Inner {
    uint64_t offset = 0;  // In the shard.
    uint64_t size = 0;
    ScannedMember attrs;  // Mode, owner, mtime.
  };
  Status Visit(ScannedMember&& m, int depth, const Emit& emit);
  Status Expand(ScannedMember&& m, std::string dir, int depth, const Emit& emit);
  Status ExpandZip(ScannedMember&& m, std::string dir, int depth, const Emit& emit);
  Status ExpandSlice(ScannedMember&& m, std::string dir, int depth, const Emit& emit);
  // NotSupported if deflated member `m` (of a zip) holds a tar or a zip.
  Status RefuseDeflatedArchive(const ScannedMember& m) const;
  // The directory member that shows nested archive `m`.
  static ScannedMember DirectoryOf(const ScannedMember& m, std::string dir);
  // Counts one nested entry against max_entries.
  Status CountNested(std::string_view dir);

  NestOptions options_;
  std::string shown_;
  bool checksum_;
  const char* data_ = nullptr;
  size_t size_ = 0;
  bool decoded_stream_ = false;
  uint64_t nested_members_ = 0;
  uint64_t nested_archives_ = 0;
  // Nested tars met so far, by normalised path, for hard links to them.
  std::unordered_map<std::string, Inner> tars_;
  std::vector<Slice> slices_;
};

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_NESTED_SCAN_H_
