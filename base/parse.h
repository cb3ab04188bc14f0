// Parsers for the numbers users type: sizes and counts, one grammar each for
// every command and mount option.
#ifndef SHARDFS_BASE_PARSE_H_
#define SHARDFS_BASE_PARSE_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace shardfs {

// A byte count: digits, then an optional suffix B, K/KiB, M/MiB, G/GiB or
// T/TiB (powers of 1024; a lower-case k is accepted too). Nothing else: no
// sign, no spaces, no fraction. False on anything else or on overflow.
bool ParseSize(std::string_view text, uint64_t* out);

// A whole decimal number below 2^64: digits only, leading zeros allowed (no
// sign, space, fraction or base prefix; "" is refused). Every 20-digit value
// up to 18446744073709551615 is accepted. nullopt on anything else or on
// overflow. The one digit reader behind every parser of decimal numbers.
std::optional<uint64_t> ParseDecimal(std::string_view text);

// A whole decimal number in [min, max]: digits only ("4x", "+4", " 4" and
// "" are refused).
bool ParseCount(std::string_view text, uint64_t min, uint64_t max, uint64_t* out);

// A thread count for -j: 1 to 4096.
bool ParseJobs(std::string_view text, int* out);

}  // namespace shardfs

#endif  // SHARDFS_BASE_PARSE_H_
