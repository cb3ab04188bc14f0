#include "src/archive/nested_scan.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "base/log.h"
#include "index/member_path.h"
#include "src/archive/format_sniff.h"
#include "src/archive/nested_zip.h"
#include "src/archive/tar_headers.h"
#include "src/archive/zip_scanner.h"

namespace shardfs::archive {
namespace {

constexpr size_t kMagicField = 257;

bool EndsWithNoCase(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (size_t i = 0; i < suffix.size(); ++i) {
    char c = s[s.size() - suffix.size() + i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != suffix[i]) return false;
  }
  return true;
}

// A ustar, GNU or pax header: the magic, and a checksum GNU tar takes.
bool IsTarHeader(const char* h) {
  if (std::memcmp(h + kMagicField, "ustar\0", 6) != 0 &&
      std::memcmp(h + kMagicField, "ustar  \0", 8) != 0) {
    return false;
  }
  return ValidTarChecksum(std::string_view(h, kTarBlock));
}

bool StartsWith(const char* d, uint64_t size, std::string_view magic) {
  return size >= magic.size() && std::memcmp(d, magic.data(), magic.size()) == 0;
}

constexpr std::string_view kGzipMagic("\x1f\x8b", 2), kBzip2Magic("BZh", 3),
    kZstdMagic("\x28\xb5\x2f\xfd", 4), kXzMagic("\xfd\x37\x7a\x58\x5a\x00", 6),
    kZipLocalMagic("PK\3\4", 4), kZipEndMagic("PK\5\6", 4);

// Past the zstd skippable frames that `d` starts with (pzstd writes one
// first): 0 if none, or if one runs past `size`.
uint64_t SkippableFrames(const char* d, uint64_t size) {
  uint64_t at = 0;
  while (size - at >= 8 && (static_cast<uint8_t>(d[at]) & 0xf0) == 0x50 &&
         std::memcmp(d + at + 1, "\x2a\x4d\x18", 3) == 0) {
    const uint64_t n = static_cast<uint8_t>(d[at + 4]) |
                       (uint64_t{static_cast<uint8_t>(d[at + 5])} << 8) |
                       (uint64_t{static_cast<uint8_t>(d[at + 6])} << 16) |
                       (uint64_t{static_cast<uint8_t>(d[at + 7])} << 24);
    if (n > size - at - 8) return 0;
    at += 8 + n;
  }
  return at;
}

bool CompressedMagic(const char* d, uint64_t size) {
  return StartsWith(d, size, kGzipMagic) || StartsWith(d, size, kBzip2Magic) ||
         StartsWith(d, size, kZstdMagic) || StartsWith(d, size, kXzMagic);
}

// What --strip-recursive-tar-extension strips from a compressed tar's
// directory name: the first that ends it, in this order.
constexpr std::string_view kCompressedTarSuffixes[] = {
    ".tar.gz", ".tgz",     ".tar.zst", ".tar.zstd", ".tzst", ".tar.xz",
    ".txz",    ".tar.bz2", ".tbz2",    ".tbz",      ".tar"};

// Whether the compressed stream `d` starts with a tar: libarchive decodes
// as much as its tar reader needs for the first header, no more.
bool CompressedTar(const char* d, uint64_t size) {
  std::unique_ptr<struct archive, decltype(&archive_read_free)> a(archive_read_new(),
                                                                  archive_read_free);
  if (!a) return false;
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_bzip2(a.get());
  archive_read_support_filter_zstd(a.get());
  archive_read_support_filter_xz(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  if (archive_read_open_memory(a.get(), d, size) != ARCHIVE_OK) return false;
  archive_entry* e = nullptr;
  const int rc = archive_read_next_header(a.get(), &e);
  return (rc == ARCHIVE_OK || rc == ARCHIVE_WARN) && archive_filter_count(a.get()) > 1;
}

// The directory that shows a nested tar: read becomes read and search.
uint32_t DirMode(uint32_t mode) { return (mode & 0777) | ((mode & 0444) >> 2); }

}  // namespace

NestedKind ClassifyMember(std::string_view name, const char* data, uint64_t size) {
  if (size >= kTarBlock && IsTarHeader(data)) return NestedKind::kTar;
  // A zip by its name and its content: a local header (or, empty, the end
  // record) first, and an end of central directory record that ends the
  // member. Formats built on zip (.npz, .jar, .docx, .whl) are files their
  // readers open whole: they stay files.
  if (EndsWithNoCase(name, ".zip") &&
      (StartsWith(data, size, kZipLocalMagic) || StartsWith(data, size, kZipEndMagic))) {
    if (LooksLikeZip(data, size)) return NestedKind::kZip;
  }
  if (CompressedMagic(data, size) && CompressedTar(data, size)) return NestedKind::kCompressedTar;
  // A zstd stream after skippable frames (pzstd's): libarchive looks at the
  // first frame that holds data.
  if (const uint64_t skip = SkippableFrames(data, size);
      skip > 0 && StartsWith(data + skip, size - skip, kZstdMagic) &&
      CompressedTar(data + skip, size - skip)) {
    return NestedKind::kCompressedTar;
  }
  // An xz stream also counts by its name (a libarchive without xz).
  if (StartsWith(data, size, kXzMagic) &&
      (EndsWithNoCase(name, ".tar.xz") || EndsWithNoCase(name, ".txz"))) {
    return NestedKind::kCompressedTar;
  }
  return NestedKind::kNone;
}

NestedScanner::NestedScanner(const NestOptions& options, std::string shown, bool checksum)
    : options_(options), shown_(std::move(shown)), checksum_(checksum) {}

void NestedScanner::Restart() {
  nested_members_ = 0;
  nested_archives_ = 0;
  tars_.clear();
  slices_.clear();
}

Status NestedScanner::Member(ScannedMember&& m, const Emit& emit) {
  return Visit(std::move(m), 0, emit);
}

Status NestedScanner::Visit(ScannedMember&& m, int depth, const Emit& emit) {
  // A hard link to a nested archive met earlier is that archive again.
  if (m.kind == MemberKind::kHardlink && !tars_.empty()) {
    Result<std::string> target = index::NormalizeMemberPath(m.link_target);
    auto it = target.ok() ? tars_.find(*target) : tars_.end();
    if (it != tars_.end()) {
      ScannedMember t = it->second.attrs;
      t.path = std::move(m.path);
      t.header_offset = m.header_offset;
      t.data_offset = it->second.offset;
      t.size = it->second.size;
      m = std::move(t);
    }
  }
  // A deflated zip member's data_offset starts compressed bytes: no candidate,
  // but an archive in it is refused rather than silently left a file.
  if (m.encoded && m.kind == MemberKind::kFile) SHARDFS_RETURN_IF_ERROR(RefuseDeflatedArchive(m));
  const bool candidate = m.kind == MemberKind::kFile && !m.sparse && !m.encoded && m.size > 0 &&
                         m.data_offset <= size_ && m.size <= size_ - m.data_offset;
  NestedKind kind = NestedKind::kNone;
  if (candidate) kind = ClassifyMember(m.path, data_ + m.data_offset, m.size);
  Result<std::string> norm = index::NormalizeMemberPath(m.path);
  if (kind == NestedKind::kNone || !norm.ok() || norm->empty()) {
    if (!tars_.empty() && norm.ok()) tars_.erase(*norm);  // The name is no longer a tar.
    return emit(std::move(m));
  }
  if (kind == NestedKind::kCompressedTar && decoded_stream_) {
    return Status::NotSupported(fmt::format(
        "shard {}: member '{}' at byte {}: a compressed tar inside a compressed tar is not "
        "supported with --recursive (its bytes are not a range of a file: store the inner tar "
        "uncompressed, or index without --recursive)",
        shown_, m.path, m.header_offset));
  }
  const std::string_view what = kind == NestedKind::kZip             ? "a zip"
                                : kind == NestedKind::kCompressedTar ? "a compressed tar"
                                                                     : "a tar";
  if (depth >= options_.max_depth) {
    log::Warning(
        "shard {}: member '{}' at byte {}: {} nested deeper than --recursive-depth {}; "
        "left as a file",
        shown_, m.path, m.header_offset, what, options_.max_depth);
    if (!tars_.empty()) tars_.erase(*norm);
    return emit(std::move(m));
  }
  std::string dir = *norm;
  const std::string_view base = index::BaseName(dir);
  const bool strip =
      kind == NestedKind::kZip ? options_.strip_zip_extension : options_.strip_extension;
  if (kind == NestedKind::kCompressedTar) {
    for (std::string_view suffix : kCompressedTarSuffixes) {
      if (strip && base.size() > suffix.size() && EndsWithNoCase(base, suffix)) {
        dir.resize(dir.size() - suffix.size());
        break;
      }
    }
  } else if (strip && base.size() > 4 &&
             EndsWithNoCase(base, kind == NestedKind::kZip ? ".zip" : ".tar")) {
    dir.resize(dir.size() - 4);
  }
  Inner& inner = tars_[*norm];
  inner.offset = m.data_offset;
  inner.size = m.size;
  inner.attrs.kind = MemberKind::kFile;
  inner.attrs.mode = m.mode;
  inner.attrs.uid = m.uid;
  inner.attrs.gid = m.gid;
  inner.attrs.mtime_ns = m.mtime_ns;
  if (kind == NestedKind::kZip) return ExpandZip(std::move(m), std::move(dir), depth, emit);
  if (kind == NestedKind::kCompressedTar) {
    return ExpandSlice(std::move(m), std::move(dir), depth, emit);
  }
  return Expand(std::move(m), std::move(dir), depth, emit);
}

Status NestedScanner::RefuseDeflatedArchive(const ScannedMember& m) const {
  const index::EncodedMember& e = m.encoding;
  if (e.method != index::kMethodDeflate || e.comp_offset > size_ ||
      e.comp_size > size_ - e.comp_offset) {
    return Status::Ok();
  }
  const std::string start =
      InflatePrefix(std::string_view(data_ + e.comp_offset, e.comp_size), kTarBlock);
  std::string_view what;
  if (start.size() >= kTarBlock && IsTarHeader(start.data())) {
    what = "a tar";
  } else if (StartsWith(start.data(), start.size(), kZipLocalMagic) ||
             StartsWith(start.data(), start.size(), kZipEndMagic)) {
    what = "a zip";
  } else {
    return Status::Ok();
  }
  return Status::NotSupported(fmt::format(
      "shard {}: member '{}' (local header at byte {}): {} stored deflated inside a zip cannot be "
      "shown as a directory with --recursive (its members would not be byte ranges of the "
      "shard); store it in the zip uncompressed (zip -0), or index without --recursive",
      shown_, m.path, m.header_offset, what));
}

ScannedMember NestedScanner::DirectoryOf(const ScannedMember& m, std::string dir) {
  ScannedMember d;
  d.path = std::move(dir);
  d.kind = MemberKind::kDir;
  d.mode = DirMode(m.mode);
  d.uid = m.uid;
  d.gid = m.gid;
  d.mtime_ns = m.mtime_ns;
  d.header_offset = m.header_offset;
  return d;
}

Status NestedScanner::CountNested(std::string_view dir) {
  if (++nested_members_ > options_.max_entries) {
    return Status::InvalidArgument(fmt::format(
        "shard {}: member '{}': the archives nested in this shard hold more than {} entries "
        "(--recursive-max-entries); refused as an archive made to explode",
        shown_, dir, options_.max_entries));
  }
  return Status::Ok();
}

Status NestedScanner::Expand(ScannedMember&& m, std::string dir, int depth, const Emit& emit) {
  ++nested_archives_;
  const uint64_t base = m.data_offset, size = m.size;
  const std::string where =
      fmt::format("{}: member '{}' at byte {} (a nested tar; offsets below from its start)", shown_,
                  m.path, m.header_offset);
  SHARDFS_RETURN_IF_ERROR(emit(DirectoryOf(m, dir)));
  ScanOptions so;
  so.checksum = checksum_;
  ShardInfo info;
  return ScanTarBytes(
      where, data_ + base, size, so,
      [&](ScannedMember&& in) -> Status {
        SHARDFS_RETURN_IF_ERROR(CountNested(dir));
        in.path = dir + "/" + in.path;
        if (in.sparse && decoded_stream_) {
          // Its extents would be ranges of the decoded stream, which a
          // mount reads as one range (as ScanCompressedTarFd refuses).
          return Status::NotSupported(fmt::format(
              "shard {}: member '{}' of the tar '{}': a sparse member in a compressed tar is not "
              "supported",
              shown_, in.path, m.path));
        }
        in.header_offset += base;
        if (in.data_offset != 0) in.data_offset += base;
        for (index::Extent& e : in.extents) e.physical += base;
        if (in.kind == MemberKind::kHardlink) in.link_target = dir + "/" + in.link_target;
        return Visit(std::move(in), depth + 1, emit);
      },
      &info);
}

Status NestedScanner::ExpandZip(ScannedMember&& m, std::string dir, int depth, const Emit& emit) {
  ++nested_archives_;
  const uint64_t base = m.data_offset, size = m.size;
  // Zip messages read "zip WHERE: member ...".
  const std::string where =
      fmt::format("{}, member '{}' at byte {} (a nested zip; offsets below from its start)", shown_,
                  m.path, m.header_offset);
  SHARDFS_RETURN_IF_ERROR(emit(DirectoryOf(m, dir)));
  // The scan refuses a zip bomb before it hands on any member.
  ScanOptions so;
  so.checksum = checksum_;
  so.max_zip_ratio = options_.max_zip_ratio;
  ShardInfo info;
  return ScanZipBytes(
      where, data_ + base, size, so,
      [&](ScannedMember&& in) -> Status {
        SHARDFS_RETURN_IF_ERROR(CountNested(dir));
        in.path = dir + "/" + in.path;
        in.header_offset += base;
        if (in.data_offset != 0) in.data_offset += base;
        if (in.encoded) {
          if (decoded_stream_) {
            return Status::NotSupported(fmt::format(
                "shard {}: member '{}' of the zip '{}': deflated, in a compressed tar shard: not "
                "supported with --recursive (only stored zip members can be read from a "
                "compressed shard's decoded stream); store the zip (zip -0)",
                shown_, in.path, m.path));
          }
          in.encoding.comp_offset += base;
        }
        return Visit(std::move(in), depth + 1, emit);
      },
      &info);
}

Status NestedScanner::ExpandSlice(ScannedMember&& m, std::string dir, int depth, const Emit& emit) {
  ++nested_archives_;
  const std::string where =
      fmt::format("{}: member '{}' at byte {} (a compressed tar; offsets below from its start)",
                  shown_, m.path, m.header_offset);
  const char* data = data_ + m.data_offset;
  const index::Codec codec =
      DetectCodec(std::string_view(data, std::min<uint64_t>(m.size, kCodecMagicBytes)));
  if (codec == index::Codec::kNone) {
    return Status::InvalidArgument(fmt::format("shard {}: no compressor magic", where));
  }
  Slice slice;
  slice.base = m.data_offset;
  slice.length = m.size;
  DecodedBytes decoded;
  // A compression bomb is stopped as it decodes, by the default bound on a
  // zip's declared sizes (src/archive/zip_scanner.h).
  const uint64_t max_decoded = m.size > UINT64_MAX / kDefaultMaxZipRatio
                                   ? UINT64_MAX
                                   : std::max(kZipRatioFloor, m.size * kDefaultMaxZipRatio);
  SHARDFS_RETURN_IF_ERROR(
      DecodeCompressedTar(where, data, m.size, codec,
                          options_.seek_spacing ? options_.seek_spacing : kDefaultSeekSpacing,
                          &slice.scan, &decoded, max_decoded));
  slices_.push_back(std::move(slice));
  const auto k = static_cast<uint32_t>(slices_.size());
  SHARDFS_RETURN_IF_ERROR(emit(DirectoryOf(m, dir)));
  // The slice's decoded stream is scanned as a top-level compressed shard's
  // is: nested tars and stored zips in it are ranges of that stream.
  NestOptions inner_options = options_;
  inner_options.max_entries -= std::min(nested_members_, options_.max_entries);
  NestedScanner inner(inner_options, where, checksum_);
  inner.SetShardBytes(decoded.data(), decoded.size());
  inner.SetDecodedStream();
  const Emit in_slice = [&](ScannedMember&& in) {
    in.slice = k;
    return emit(std::move(in));
  };
  ScanOptions so;
  so.checksum = checksum_;
  ShardInfo info;
  Status s = ScanTarBytes(
      where, decoded.data(), decoded.size(), so,
      [&](ScannedMember&& in) -> Status {
        SHARDFS_RETURN_IF_ERROR(CountNested(dir));
        in.path = dir + "/" + in.path;
        if (in.sparse) {
          return Status::NotSupported(fmt::format(
              "shard {}: member '{}' of the compressed tar '{}': a sparse member in a compressed "
              "tar is not supported",
              shown_, in.path, m.path));
        }
        if (in.kind == MemberKind::kHardlink) in.link_target = dir + "/" + in.link_target;
        return inner.Visit(std::move(in), depth + 1, in_slice);
      },
      &info);
  nested_members_ += inner.nested_members_;
  nested_archives_ += inner.nested_archives_;
  return s;
}

}  // namespace shardfs::archive
