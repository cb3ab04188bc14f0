// A chunk file of the chunk cache's directory (its layout and the rules of
// the directory: src/reader/chunk_cache.h): the 64-byte header before the
// payload, and the listing of the directory that sorts its files into
// chunks, leftovers to delete and files to leave alone.
#ifndef SHARDFS_SRC_READER_CHUNK_FILE_H_
#define SHARDFS_SRC_READER_CHUNK_FILE_H_

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace shardfs::reader {

inline constexpr uint32_t kChunkFormatVersion = 1;
inline constexpr size_t kChunkHeaderSize = 64;

struct ChunkHeader {
  uint32_t len = 0;  // Payload bytes.
  uint64_t id_hash = 0;
  uint64_t index = 0;
  uint64_t xxh3 = 0;  // Of the payload.
};

// Writes the kChunkHeaderSize bytes of `h` to `out`.
void EncodeChunkHeader(const ChunkHeader& h, char* out);
// False if the bytes are not a header this version wrote.
bool DecodeChunkHeader(const char* in, ChunkHeader* h);

// Reads the header of the open chunk file `fd` (whose fstat is `st`) into
// `h`; true if it is intact, names chunk `index` of `id_hash`, and the file
// is a regular file of exactly the header and a non-empty payload.
bool ReadChunkHeader(int fd, const struct stat& st, uint64_t id_hash, uint64_t index,
                     ChunkHeader* h);

// Reads bytes [offset, offset + n) of the payload of the open chunk file
// `fd` into `buf`, checking on the way its header (chunk `index` of
// `id_hash`, `len` payload bytes) and its whole payload's XXH3, with no
// allocation. False, with *why saying what failed, if it is not intact.
bool ReadCheckedChunk(int fd, uint64_t id_hash, uint64_t index, uint32_t len, uint64_t offset,
                      size_t n, char* buf, std::string* why);

// Claims chunk file `name` (FormatClaimName) in `dir_fd`: kMine if this
// process made the claim file (O_EXCL, with its ProcessStamp in it), kHeld
// if a live process holds it; a claim whose holder is gone is deleted and
// the claim made again. kFailed if the file cannot be made.
enum class ClaimFile { kMine, kHeld, kFailed };
ClaimFile TryClaimFile(int dir_fd, const std::string& name);

// What the chunk directory holds.
struct ChunkDirListing {
  struct Chunk {
    std::string name;
    uint64_t id_hash;
    uint64_t index;
    uint64_t ino;
    uint64_t file_bytes;
    uint32_t len;  // The header's (0 when headers are not read).
    int64_t mtime_ns;
  };
  std::vector<Chunk> found;
  std::vector<std::string> bad;     // Shardfs's names, but leftovers or damaged: to delete.
  std::vector<std::string> others;  // Files shardfs cannot prove it wrote: left alone.
};

// Lists the chunk directory `dir_fd` (shown as `dir`) into `out`: regular
// files of this user with a chunk's name are chunks; temp and claim files
// whose writer is gone (LeftByTheDead) are bad, a live writer's are skipped;
// the marker and the lock are skipped; the rest are others. With
// `check_headers` each chunk's header is read (ReadChunkHeader), and one
// that fails is bad.
Status ListChunkDir(int dir_fd, const std::string& dir, bool check_headers, ChunkDirListing* out);

}  // namespace shardfs::reader

#endif  // SHARDFS_SRC_READER_CHUNK_FILE_H_
