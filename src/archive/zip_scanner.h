// Scanning one zip archive as a shard: every member's metadata, and where
// its bytes are. A stored member is an exact byte range of the archive, like
// a tar member; a deflated one is an encoded member (index/schema.h): its
// compressed range, method and CRC-32, inflated whole when read.
//
// The central directory is the input: members are reported in its order,
// which is the order `unzip` extracts them in, so where two entries have one
// name the later one wins (as `unzip -o` leaves it, and as a later tar
// member does). Each member's local header is read too, for the data offset
// (its extra field may differ from the central one), and must agree with the
// central directory: signature, name bytes, method, and (without a data
// descriptor, flag bit 3) CRC-32 and both sizes.
//
// Parsed here rather than with libzip or minizip: the scan needs each
// member's exact data offset, the local headers cross-checked, and a pure
// function over bytes already mapped (the fuzzer calls it as is); libzip
// reads through its own file sources and hides the offsets, minizip keeps a
// stream position. The format parts involved are small: the end record
// (zip64's locator and end record too), central headers with their zip64
// (0x0001), Info-ZIP Unicode path (0x7075) and time extras, local headers.
//
// What a member becomes:
//   - names: UTF-8 when flag bit 11 says so or a valid Unicode path extra
//     (0x7075) gives one (as unzip takes it); otherwise, from an MS-DOS,
//     OS/2 or NTFS host (version made by 0, 6, 11, 14), CP437 converted to
//     UTF-8; from any other host (Unix) the bytes as they are.
//   - type and mode: from a Unix host (3) with mode bits in the external
//     attributes, S_IFLNK is a symlink (the member's content is the target),
//     S_IFDIR a directory, other non-regular types are refused like tar's;
//     permission bits & 0777 (unzip drops set-id and sticky bits without -K).
//     Otherwise a name ending in '/' is a directory (0755), a file 0644, or
//     0444 with the MS-DOS read-only attribute (unzip's defaults under umask
//     022).
//   - mtime: the extended timestamp (0x5455) of the local header, else of the
//     central one; else the NTFS extra (0x000a), the Info-ZIP Unix extra
//     (0x5855) or PKWARE's Unix extra (0x000d), in whole seconds as unzip
//     sets them; else the DOS date and time as local time of the building
//     machine (unzip's rule on the extracting one).
//   - owner: 0:0 (unzip does not restore owners without -X).
//
// Refused, with InvalidArgument naming the archive and the member:
// encryption (flag bit 0, 6 or 13), methods other than stored (0) and
// deflate (8), split or spanned archives (disk numbers other than 0), a
// central directory that disagrees with a local header or with itself, data
// past the central directory, names that cannot be in a tree (empty, NUL,
// '..', longer than a name may be), and a deflated member larger than
// kMaxDeflatedMember (a read inflates a member whole).
//
// A zip bomb is refused, also with InvalidArgument, after a first pass over
// the central directory and the local headers and before any member is
// handed on or any byte inflated (with checksums on, the scan inflates every
// member; a flat bomb would make it inflate one stream once per entry):
//   - overlap: each member's bytes (its local header through the end of its
//     compressed data) must lie apart from every other member's. Central
//     entries sharing one local header are how a flat zip bomb reaches its
//     ratio; no zip writer produces them. Two entries of one name with
//     local headers of their own are not that: the later wins, as above.
//     The message names both members and their local header offsets.
//   - ratio: the declared uncompressed sizes of the files, summed, may
//     exceed kZipRatioFloor only up to options.max_zip_ratio times the
//     archive's bytes; the message names --max-zip-ratio, which raises it.
//     Each size is checked when its member is inflated
//     (src/codec/encoded_member.h), so the declared sum is the real one.
//
// With options.checksum every member's content is read (deflated members
// inflated) and its CRC-32 checked: a corrupt member fails the build.
//
// Thread-safe: each call owns its state.
#ifndef SHARDFS_SRC_ARCHIVE_ZIP_SCANNER_H_
#define SHARDFS_SRC_ARCHIVE_ZIP_SCANNER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

#include "base/status.h"
#include "src/archive/scanned_member.h"
#include "src/codec/encoded_member.h"

namespace shardfs::archive {

// Deflated members above this many uncompressed bytes are refused: the
// decoder's bound, which the read path holds an index to as well.
using codec::kMaxDeflatedMember;

// Declared sizes up to this sum are accepted whatever the ratio (a small zip
// of one large, highly compressible file).
inline constexpr uint64_t kZipRatioFloor = uint64_t{256} << 20;

// Whether `data` (a whole file of `size` bytes) ends in a zip end of central
// directory record: its signature within the last 65,557 bytes, with a
// comment length that reaches the end of the file exactly. Sets *entries
// (if given) to the record's entry count (0xffff: zip64, at least that).
bool LooksLikeZip(const char* data, size_t size, uint64_t* entries = nullptr);

// Scans the zip archive in `data` (`size` bytes, the whole file) as above,
// calling `on_member` for each member in central directory order; a non-ok
// Status from `on_member` stops the scan and is returned. Sets info->zip and
// adds to info->members and info->data_bytes. `name` is used in messages.
Status ScanZipBytes(std::string_view name, const char* data, size_t size,
                    const ScanOptions& options,
                    const std::function<Status(ScannedMember&&)>& on_member, ShardInfo* info);

}  // namespace shardfs::archive

#endif  // SHARDFS_SRC_ARCHIVE_ZIP_SCANNER_H_
