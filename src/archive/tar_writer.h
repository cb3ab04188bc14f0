// Writing uncompressed POSIX tar (pax interchange format): the shards that
// `shardfs pack` produces.
//
// Every member is a 512-byte ustar header, preceded by a pax extended header
// ('x') only when ustar cannot say it all: a path or link target longer than
// ustar's fields, bytes that are not UTF-8 in such a long name (then the pax
// header also says hdrcharset=BINARY), a size of 8 GiB or more, a uid or gid
// above 2097151, an mtime before 1970 or after 2242, or a non-zero sub-second
// mtime (`mtime=SEC.NNNNNNNNN`). Data is padded to 512 bytes; the archive ends
// with two zero blocks. Nothing depends on the time of writing or the user
// running it (uname and gname are empty, the pax header's own fields are
// fixed), so the same members always give the same bytes. GNU tar, bsdtar,
// Python's tarfile and src/archive/tar_scanner.h read it.
//
// The writer counts every byte it emits, so it knows each member's data
// offset exactly as it writes it; the index is built from those offsets.
//
// Not thread-safe; one writer per shard, used from one thread.
#ifndef SHARDFS_SRC_ARCHIVE_TAR_WRITER_H_
#define SHARDFS_SRC_ARCHIVE_TAR_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "src/archive/tar_headers.h"

namespace shardfs::archive {

inline constexpr uint64_t kTarTrailer = 2 * kTarBlock;

enum class TarType : char { kFile = '0', kHardlink = '1', kSymlink = '2', kDir = '5' };

struct TarMember {
  // Relative, '/'-separated, no trailing '/'; "" is the archive's root and is
  // written as "./". Directories get a trailing '/' in the archive.
  std::string_view path;
  TarType type = TarType::kFile;
  uint32_t mode = 0;  // Permission bits (07777).
  uint64_t uid = 0;
  uint64_t gid = 0;
  int64_t mtime_ns = 0;
  uint64_t size = 0;             // Regular files only; 0 otherwise.
  std::string_view link_target;  // Symlink target, or the path a hard link names.
};

// Rounds `size` up to whole blocks.
inline uint64_t TarPadded(uint64_t size) { return (size + kTarBlock - 1) / kTarBlock * kTarBlock; }

// Appends the header block(s) of `m` to `out`: the pax extended header if one
// is needed, then the ustar header.
void AppendTarHeader(const TarMember& m, std::string* out);
// The number of bytes AppendTarHeader appends, without formatting them.
uint64_t TarHeaderBytes(const TarMember& m);
// Header bytes plus padded data: what `m` adds to an archive.
inline uint64_t TarMemberBytes(const TarMember& m) {
  return TarHeaderBytes(m) + TarPadded(m.type == TarType::kFile ? m.size : 0);
}

// Appends members to an open, empty file through a buffer.
class TarWriter {
 public:
  // REQUIRES: `fd` is open for writing on an empty regular file (regions
  // skipped by AppendZeros must read back as zeros). `name` is used in error
  // messages. The writer does not own `fd`. The buffer is small on purpose:
  // data copied into it is still in the CPU cache when write(2) copies it
  // again (with 1-4 MiB buffers, packing 1.2 GB of 12 KiB files took 1.6-2x
  // as long).
  TarWriter(int fd, std::string name, size_t buffer_bytes = 64 << 10);
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // Bytes of archive written so far (buffered or not): where the next member
  // starts.
  uint64_t offset() const { return offset_; }

  // Starts a member. Sets *data_offset to where its data begins.
  // REQUIRES: the previous member is ended.
  Status BeginMember(const TarMember& m, uint64_t* data_offset);
  // Appends `n` bytes of the current member's data.
  Status Append(const void* data, size_t n);
  // Space to read up to `max` bytes of data into directly: sets *space and
  // *len (1 <= *len <= max), valid until the next call. Commit(n) then
  // appends the first n of those bytes.
  Status DataSpace(size_t max, char** space, size_t* len);
  void Commit(size_t n);
  // Appends `n` zero bytes; long runs become a hole in the file rather than
  // written zeros (a sparse source stays sparse).
  Status AppendZeros(uint64_t n);
  // Ends the current member, padding its data to a block. Returns Corruption
  // if the data appended differs from the size the header announced.
  Status EndMember();
  // Discards everything from `offset` on (a member that could not be
  // completed): the file is cut back and writing resumes there.
  // REQUIRES: `offset` is a member boundary at or before offset().
  Status Rollback(uint64_t offset);
  // Writes the two zero blocks that end an archive and flushes everything.
  Status Finish();

 private:
  Status Flush();
  Status Write(const void* data, size_t n);

  const int fd_;
  const std::string name_;
  std::unique_ptr<char[]> buf_;
  const size_t cap_;
  size_t len_ = 0;        // Bytes in buf_.
  uint64_t flushed_ = 0;  // File offset of buf_[0].
  uint64_t offset_ = 0;   // flushed_ + len_.
  bool in_member_ = false;
  uint64_t expected_ = 0;  // Data bytes the current member announced.
  uint64_t data_start_ = 0;
  std::string header_;  // Scratch.
};

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_TAR_WRITER_H_
