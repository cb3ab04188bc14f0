#include "src/erofs/check.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <set>
#include <unordered_set>

#include "base/coding.h"

namespace shardfs::erofs {

using index::EntryType;

namespace {

// The format's numbers, written down again from the specification rather
// than shared with the writer, so that a mistake in one is not in both.
constexpr uint64_t kBlock = 512;
constexpr uint64_t kSuperOffset = 1024;
constexpr uint32_t kMagic = 0xE0F5E1E2;
constexpr uint32_t kKnownIncompat = 0x4 | 0x8;  // chunked files, device table
constexpr uint64_t kSlot = 32;
constexpr uint64_t kDeviceSlot = 128;
constexpr uint64_t kDirent = 12;
constexpr uint32_t kNull = 0xFFFFFFFF;
constexpr uint64_t kMaxSymlink = 4095;

Status Bad(uint64_t at, std::string_view what) {
  return Status::Corruption(fmt::format("image byte {}: {}", at, what));
}

struct Inode {
  uint64_t nid = 0;
  uint64_t pos = 0;
  uint64_t isize = 0;
  unsigned layout = 0;
  uint32_t mode = 0, uid = 0, gid = 0, nlink = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t u = 0;
};

class Checker {
 public:
  Checker(std::string_view image, const std::vector<uint64_t>& devices)
      : img_(image), devices_(devices) {}

  Result<std::vector<ErofsEntry>> Run() {
    SHARDFS_RETURN_IF_ERROR(Superblock());
    SHARDFS_ASSIGN_OR_RETURN(Inode root, ReadInode(root_nid_));
    if (!S_ISDIR(root.mode)) return Bad(root.pos, "the root is not a directory");
    std::vector<ErofsEntry> out;
    SHARDFS_RETURN_IF_ERROR(Visit(root, root.nid, "", &out));
    return out;
  }

 private:
  bool Has(uint64_t pos, uint64_t len) const {
    return pos <= img_.size() && len <= img_.size() - pos;
  }
  const char* At(uint64_t pos) const { return img_.data() + pos; }

  Status Superblock() {
    if (!Has(kSuperOffset, 128)) return Bad(0, "shorter than a superblock");
    const char* sb = At(kSuperOffset);
    if (DecodeFixed32(sb) != kMagic) return Bad(kSuperOffset, "no EROFS magic");
    if (static_cast<uint8_t>(sb[12]) != 9) return Bad(kSuperOffset + 12, "blocks are not 512 B");
    if (sb[13] != 0) return Bad(kSuperOffset + 13, "superblock extension slots");
    root_nid_ = DecodeFixed16(sb + 14);
    build_time_ns_ =
        static_cast<int64_t>(DecodeFixed64(sb + 24)) * 1'000'000'000 + DecodeFixed32(sb + 32);
    uint64_t blocks = DecodeFixed32(sb + 36);
    if (blocks * kBlock > img_.size()) return Bad(kSuperOffset + 36, "more blocks than bytes");
    if (DecodeFixed32(sb + 40) != 0) return Bad(kSuperOffset + 40, "meta_blkaddr is not 0");
    uint32_t incompat = DecodeFixed32(sb + 80);
    if (incompat & ~kKnownIncompat) return Bad(kSuperOffset + 80, "unknown incompat features");
    uint64_t extra = (incompat & 0x8) ? DecodeFixed16(sb + 86) : 0;
    if (extra != devices_.size()) {
      return Bad(kSuperOffset + 86, fmt::format("{} devices, {} given", extra, devices_.size()));
    }
    uint64_t table = uint64_t{DecodeFixed16(sb + 88)} * kDeviceSlot;
    if (extra > 0 && (table < kSuperOffset + 128 || !Has(table, extra * kDeviceSlot))) {
      return Bad(kSuperOffset + 88, "device table outside the image");
    }
    for (uint64_t d = 0; d < extra; ++d) {
      const char* slot = At(table + d * kDeviceSlot);
      uint64_t want = (devices_[d] + kBlock - 1) / kBlock;
      if (DecodeFixed32(slot + 64) != want || DecodeFixed32(slot + 68) != 0) {
        return Bad(table + d * kDeviceSlot, fmt::format("device {}: blocks or address", d + 1));
      }
    }
    image_blocks_ = blocks;
    return Status::Ok();
  }

  Result<Inode> ReadInode(uint64_t nid) {
    Inode in;
    in.nid = nid;
    in.pos = nid * kSlot;
    if (nid > img_.size() / kSlot || !Has(in.pos, 32)) return Bad(in.pos, "inode outside");
    const char* p = At(in.pos);
    uint16_t format = DecodeFixed16(p);
    bool extended = format & 1;
    in.layout = (format >> 1) & 0x7;
    if (format >> 4) return Bad(in.pos, "unknown i_format bits");
    if (DecodeFixed16(p + 2) != 0) return Bad(in.pos + 2, "xattrs");
    in.isize = extended ? 64 : 32;
    if (in.pos % kBlock + in.isize > kBlock) return Bad(in.pos, "inode across a block");
    if (!Has(in.pos, in.isize)) return Bad(in.pos, "inode outside");
    in.mode = DecodeFixed16(p + 4);
    in.u = DecodeFixed32(p + 16);
    if (extended) {
      in.size = DecodeFixed64(p + 8);
      in.uid = DecodeFixed32(p + 24);
      in.gid = DecodeFixed32(p + 28);
      in.mtime_ns =
          static_cast<int64_t>(DecodeFixed64(p + 32)) * 1'000'000'000 + DecodeFixed32(p + 40);
      if (DecodeFixed32(p + 40) >= 1'000'000'000) return Bad(in.pos + 40, "nanoseconds");
      in.nlink = DecodeFixed32(p + 44);
    } else {
      in.nlink = DecodeFixed16(p + 6);
      in.size = DecodeFixed32(p + 8);
      in.uid = DecodeFixed16(p + 24);
      in.gid = DecodeFixed16(p + 26);
      in.mtime_ns = build_time_ns_;
      if (DecodeFixed32(p + 12) != 0) return Bad(in.pos + 12, "compact mtime offset");
    }
    if (in.nlink == 0) return Bad(in.pos, "no links");
    if (in.layout != 0 && in.layout != 2 && in.layout != 4) return Bad(in.pos, "layout");
    return in;
  }

  // The bytes of a flat inode's data (plain: in blocks from i_u; inline:
  // after the inode, within its block).
  Result<std::string_view> FlatData(const Inode& in) {
    if (in.layout == 2) {
      uint64_t at = in.pos + in.isize;
      if (in.size >= kBlock || at % kBlock + in.size > kBlock || !Has(at, in.size)) {
        return Bad(in.pos, "inline data across a block");
      }
      return std::string_view(At(at), in.size);
    }
    if (in.layout != 0) return Bad(in.pos, "not a flat inode");
    uint64_t at = uint64_t{in.u} * kBlock;
    if (in.size > 0 &&
        (!Has(at, in.size) || (at + in.size + kBlock - 1) / kBlock > image_blocks_)) {
      return Bad(in.pos, "data outside the image");
    }
    return std::string_view(img_.data() + std::min<uint64_t>(at, img_.size()),
                            in.size > 0 ? in.size : 0);
  }

  Status Visit(const Inode& dir, uint64_t parent, const std::string& path,
               std::vector<ErofsEntry>* out) {
    if (!dirs_.insert(dir.nid).second) return Bad(dir.pos, "a directory reached twice");
    out->push_back(Entry(dir, path, EntryType::kDir));
    if (dir.layout != 0) return Bad(dir.pos, "directory not plain");
    SHARDFS_ASSIGN_OR_RETURN(std::string_view data, FlatData(dir));
    std::string last;
    bool first = true, dot = false, dotdot = false;
    for (uint64_t b = 0; b * kBlock < data.size(); ++b) {
      std::string_view block = data.substr(b * kBlock, kBlock);
      uint64_t at = uint64_t{dir.u} * kBlock + b * kBlock;
      if (block.size() < kDirent) return Bad(at, "a directory block without entries");
      uint64_t count = DecodeFixed16(block.data() + 8);
      if (count < kDirent || count % kDirent != 0 || count >= block.size()) {
        return Bad(at, "first name offset");
      }
      count /= kDirent;
      for (uint64_t k = 0; k < count; ++k) {
        const char* d = block.data() + k * kDirent;
        uint64_t off = DecodeFixed16(d + 8);
        uint64_t end = k + 1 < count ? DecodeFixed16(d + kDirent + 8) : block.size();
        if (off < count * kDirent || end < off || end > block.size()) {
          return Bad(at + k * kDirent, "name offsets out of order");
        }
        std::string_view name = block.substr(off, end - off);
        if (k + 1 == count) name = name.substr(0, name.find('\0'));
        if (name.empty() || name.find('/') != std::string_view::npos ||
            name.find('\0') != std::string_view::npos) {
          return Bad(at + off, "an empty name, or one with '/' or NUL");
        }
        if (!first && !(last < name)) return Bad(at + off, "names out of order");
        first = false;
        last = name;
        uint64_t nid = DecodeFixed64(d);
        uint8_t type = static_cast<uint8_t>(d[10]);
        if (name == ".") {
          if (nid != dir.nid || type != 2) return Bad(at + k * kDirent, "'.' is not the dir");
          dot = true;
          continue;
        }
        if (name == "..") {
          if (nid != parent || type != 2) return Bad(at + k * kDirent, "'..' is not the parent");
          dotdot = true;
          continue;
        }
        SHARDFS_ASSIGN_OR_RETURN(Inode child, ReadInode(nid));
        std::string child_path = path.empty() ? std::string(name) : path + "/" + std::string(name);
        uint8_t want = S_ISDIR(child.mode)   ? 2
                       : S_ISLNK(child.mode) ? 7
                       : S_ISREG(child.mode) ? 1
                                             : 0;
        if (want == 0 || type != want) return Bad(at + k * kDirent, "entry type");
        if (want == 2) {
          SHARDFS_RETURN_IF_ERROR(Visit(child, dir.nid, child_path, out));
        } else if (want == 7) {
          SHARDFS_RETURN_IF_ERROR(Symlink(child, child_path, out));
        } else {
          SHARDFS_RETURN_IF_ERROR(File(child, child_path, out));
        }
      }
    }
    if (!dot || !dotdot) return Bad(dir.pos, "no '.' or '..'");
    return Status::Ok();
  }

  Status Symlink(const Inode& in, const std::string& path, std::vector<ErofsEntry>* out) {
    if (in.size == 0 || in.size > kMaxSymlink) return Bad(in.pos, "symlink length");
    SHARDFS_ASSIGN_OR_RETURN(std::string_view target, FlatData(in));
    ErofsEntry e = Entry(in, path, EntryType::kSymlink);
    e.target = std::string(target);
    out->push_back(std::move(e));
    return Status::Ok();
  }

  Status File(const Inode& in, const std::string& path, std::vector<ErofsEntry>* out) {
    ErofsEntry e = Entry(in, path, EntryType::kFile);
    if (in.layout == 0) {
      if (in.size != 0) return Bad(in.pos, "a plain file with data");
      out->push_back(std::move(e));
      return Status::Ok();
    }
    if (in.layout != 4) return Bad(in.pos, "a file neither empty nor chunk-based");
    uint32_t format = in.u & 0xFFFF;
    if ((format & ~0x3Fu) != 0 || !(format & 0x20)) return Bad(in.pos + 16, "chunk format");
    uint64_t chunk = kBlock << (format & 0x1F);
    uint64_t chunks = (in.size + chunk - 1) / chunk;
    uint64_t at = in.pos + in.isize;  // Already 8-aligned: inodes are 32-aligned.
    if (!Has(at, chunks * 8)) return Bad(at, "chunk indexes outside");
    for (uint64_t c = 0; c < chunks; ++c) {
      const char* ci = At(at + 8 * c);
      uint16_t device = DecodeFixed16(ci + 2);
      uint32_t block = DecodeFixed32(ci + 4);
      if (DecodeFixed16(ci) != 0) return Bad(at + 8 * c, "chunk advise bits");
      if (block == kNull) continue;
      uint64_t logical = c * chunk;
      uint64_t len = std::min(chunk, in.size - logical);
      uint64_t physical = uint64_t{block} * kBlock;
      uint64_t limit = device == 0                 ? image_blocks_ * kBlock
                       : device <= devices_.size() ? devices_[device - 1]
                                                   : 0;
      if (device > devices_.size() || physical > limit || len > limit - physical) {
        return Bad(at + 8 * c, fmt::format("chunk {} outside device {}", c, device));
      }
      if (!e.pieces.empty() && e.pieces.back().device == device &&
          e.pieces.back().logical + e.pieces.back().length == logical &&
          e.pieces.back().physical + e.pieces.back().length == physical) {
        e.pieces.back().length += len;
      } else {
        e.pieces.push_back({logical, len, device, physical});
      }
    }
    out->push_back(std::move(e));
    return Status::Ok();
  }

  ErofsEntry Entry(const Inode& in, const std::string& path, EntryType type) const {
    ErofsEntry e;
    e.path = path;
    e.type = type;
    e.mode = in.mode;
    e.uid = in.uid;
    e.gid = in.gid;
    e.nlink = in.nlink;
    e.size = in.size;
    e.mtime_ns = in.mtime_ns;
    e.nid = in.nid;
    return e;
  }

  std::string_view img_;
  const std::vector<uint64_t>& devices_;
  uint64_t root_nid_ = 0;
  int64_t build_time_ns_ = 0;
  uint64_t image_blocks_ = 0;
  std::unordered_set<uint64_t> dirs_;
};

}  // namespace

Result<std::vector<ErofsEntry>> CheckErofsImage(std::string_view image,
                                                const std::vector<uint64_t>& device_bytes) {
  return Checker(image, device_bytes).Run();
}

}  // namespace shardfs::erofs
