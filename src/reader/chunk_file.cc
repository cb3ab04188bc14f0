#include "src/reader/chunk_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack.
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "base/coding.h"
#include "base/fd.h"
#include "base/io.h"
#include "base/log.h"
#include "src/reader/cache_dir.h"

namespace shardfs::reader {

namespace {

constexpr char kMagic[8] = {'S', 'H', 'F', 'S', 'C', 'H', 'N', 'K'};
constexpr size_t kHeaderSumOffset = 56;

}  // namespace

void EncodeChunkHeader(const ChunkHeader& h, char* out) {
  std::memset(out, 0, kChunkHeaderSize);
  std::memcpy(out, kMagic, sizeof(kMagic));
  EncodeFixed32(out + 8, kChunkFormatVersion);
  EncodeFixed32(out + 12, h.len);
  EncodeFixed64(out + 16, h.id_hash);
  EncodeFixed64(out + 24, h.index);
  EncodeFixed64(out + 32, h.xxh3);
  EncodeFixed64(out + kHeaderSumOffset, XXH3_64bits(out, kHeaderSumOffset));
}

bool DecodeChunkHeader(const char* in, ChunkHeader* h) {
  if (std::memcmp(in, kMagic, sizeof(kMagic)) != 0) return false;
  if (DecodeFixed32(in + 8) != kChunkFormatVersion) return false;
  if (DecodeFixed64(in + kHeaderSumOffset) != XXH3_64bits(in, kHeaderSumOffset)) return false;
  h->len = DecodeFixed32(in + 12);
  h->id_hash = DecodeFixed64(in + 16);
  h->index = DecodeFixed64(in + 24);
  h->xxh3 = DecodeFixed64(in + 32);
  return true;
}

bool ReadChunkHeader(int fd, const struct stat& st, uint64_t id_hash, uint64_t index,
                     ChunkHeader* h) {
  char raw[kChunkHeaderSize];
  return S_ISREG(st.st_mode) && PreadExact(fd, raw, kChunkHeaderSize, 0).ok() &&
         DecodeChunkHeader(raw, h) && h->id_hash == id_hash && h->index == index && h->len != 0 &&
         static_cast<uint64_t>(st.st_size) == kChunkHeaderSize + h->len;
}

bool ReadCheckedChunk(int fd, uint64_t id_hash, uint64_t index, uint32_t len, uint64_t offset,
                      size_t n, char* buf, std::string* why) {
  char raw[kChunkHeaderSize];
  ChunkHeader h;
  if (!PreadExact(fd, raw, kChunkHeaderSize, 0).ok() || !DecodeChunkHeader(raw, &h) ||
      h.len != len || h.index != index || h.id_hash != id_hash) {
    *why = "header damaged since the chunk was listed";
    return false;
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  char piece[32 << 10];
  for (uint64_t pos = 0; pos < len;) {
    size_t got = static_cast<size_t>(std::min<uint64_t>(sizeof(piece), len - pos));
    Status st = PreadExact(fd, piece, got, kChunkHeaderSize + pos);
    if (!st.ok()) {
      *why = st.message();
      return false;
    }
    XXH3_64bits_update(&state, piece, got);
    uint64_t lo = std::max(pos, offset);
    uint64_t hi = std::min<uint64_t>(pos + got, offset + n);
    if (lo < hi) std::memcpy(buf + (lo - offset), piece + (lo - pos), hi - lo);
    pos += got;
  }
  const uint64_t sum = XXH3_64bits_digest(&state);
  if (sum != h.xxh3) {
    *why = fmt::format("payload XXH3 {:016x}, header says {:016x}", sum, h.xxh3);
    return false;
  }
  return true;
}

ClaimFile TryClaimFile(int dir_fd, const std::string& name) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    UniqueFd fd(
        ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (fd.valid()) {
      const std::string stamp = FormatStamp(ThisProcess());
      (void)WriteFully(fd.get(), stamp.data(), stamp.size());
      return ClaimFile::kMine;
    }
    if (errno != EEXIST) return ClaimFile::kFailed;
    if (!LeftByTheDead(dir_fd, name.c_str())) return ClaimFile::kHeld;
    ::unlinkat(dir_fd, name.c_str(), 0);  // Its fetch died with its holder.
  }
  return ClaimFile::kHeld;
}

namespace {

// Sorts entry `c_name` of the chunk directory `dir_fd` into `out`.
void ListChunkDirEntry(int dir_fd, const char* c_name, bool check_headers, ChunkDirListing* out) {
  std::string_view name = c_name;
  // A file shardfs wrote has one of its names and is a regular file of
  // this user; in a directory of this user that no one else may write to,
  // nobody else can have put it there.
  struct stat st;
  const bool mine = ::fstatat(dir_fd, c_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
  uint64_t id_hash, index;
  ProcessStamp writer;
  const bool chunk_name = ParseChunkName(name, &id_hash, &index);
  const bool tmp_name = !chunk_name && (ParseOwnedTmpName(name, &writer) || ParseClaimName(name));
  if (!mine || (!chunk_name && !tmp_name)) {
    out->others.emplace_back(name);
    return;
  }
  if (!chunk_name) {
    // An Insert or a fetch cut short by a crash; a live process's is its own.
    if (LeftByTheDead(dir_fd, c_name)) out->bad.emplace_back(name);
    return;
  }
  ChunkHeader h;
  if (check_headers) {
    UniqueFd fd(::openat(dir_fd, c_name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0 ||
        !ReadChunkHeader(fd.get(), st, id_hash, index, &h)) {
      out->bad.emplace_back(name);
      return;
    }
  }
  out->found.push_back({std::string(name), id_hash, index, static_cast<uint64_t>(st.st_ino),
                        static_cast<uint64_t>(st.st_size), h.len,
                        int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec});
}

}  // namespace

Status ListChunkDir(int dir_fd, const std::string& dir, bool check_headers, ChunkDirListing* out) {
  int list_fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = list_fd < 0 ? nullptr : ::fdopendir(list_fd);
  if (d == nullptr) {
    int err = errno;
    if (list_fd >= 0) ::close(list_fd);
    return Status::FromErrno(err, fmt::format("cache_dir {}", dir));
  }
  while (true) {
    errno = 0;
    struct dirent* e = ::readdir(d);
    if (e == nullptr) break;
    std::string_view name = e->d_name;
    if (name == "." || name == ".." || name == kCacheMarker || name == kCacheLock) continue;
    ListChunkDirEntry(dir_fd, e->d_name, check_headers, out);
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) return Status::FromErrno(err, fmt::format("cache_dir {}: listing", dir));
  return Status::Ok();
}

}  // namespace shardfs::reader
