// Counters of network requests: what `shardfs stats` shows about the remote
// side (requests, retries, errors by kind, latency percentiles, in flight).
#ifndef SHARDFS_SRC_REMOTE_REQUEST_STATS_H_
#define SHARDFS_SRC_REMOTE_REQUEST_STATS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace shardfs::remote {

// Why one request (one attempt) failed.
enum class ErrorKind : int {
  kServer = 0,    // 5xx.
  kThrottle,      // 429 (and S3's SlowDown).
  kConnect,       // Connection refused, no route, name not resolved.
  kReset,         // Connection reset or closed mid-response, short body.
  kTimeout,       // No connection in time, no byte for stall_timeout, budget.
  kTls,           // Certificate or handshake failure.
  kPrecondition,  // 412, 416, wrong total: the object changed on the server.
  kNotFound,      // 404.
  kDenied,        // 401, 403.
  kBadResponse,   // A status or headers that cannot be right for the request.
  kOther,
};
inline constexpr int kErrorKinds = static_cast<int>(ErrorKind::kOther) + 1;
// "5xx", "throttle", "connect", "reset", "timeout", "tls", "precondition",
// "not_found", "denied", "bad_response", "other": stable names for --json.
std::string_view ErrorKindName(ErrorKind kind);

// A plain copy of the counters at one moment.
struct RequestStatsSnapshot {
  uint64_t requests = 0;        // Requests sent (each attempt counts).
  uint64_t retries = 0;         // Attempts after the first of a call.
  uint64_t bytes_received = 0;  // Response body bytes.
  // Responses with bytes that lacked the ETag (or Last-Modified) the index
  // holds: refused, or accepted with trust_responses_without_etag.
  uint64_t unverified = 0;
  int64_t in_flight = 0;                       // Requests under way now.
  std::array<uint64_t, kErrorKinds> errors{};  // Indexed by ErrorKind.
  uint64_t latency_count = 0;
  // Request latency (first byte sent to last byte received or failure), in
  // microseconds. Percentiles are the upper bound of a log bucket (at most
  // 25% above the true value, never below it); max is exact.
  uint64_t latency_p50_us = 0;
  uint64_t latency_p90_us = 0;
  uint64_t latency_p99_us = 0;
  uint64_t latency_max_us = 0;

  uint64_t errors_total() const;
};

// Thread-safe: every member is a relaxed atomic, no lock; many HttpClients
// (one per thread) may share one RequestStats. A snapshot taken while
// requests run is not one atomic cut, only each counter is exact.
class RequestStats {
 public:
  void AddRequest() { requests_.fetch_add(1, std::memory_order_relaxed); }
  void AddRetry() { retries_.fetch_add(1, std::memory_order_relaxed); }
  void AddBytes(uint64_t n) { bytes_.fetch_add(n, std::memory_order_relaxed); }
  void AddUnverified() { unverified_.fetch_add(1, std::memory_order_relaxed); }
  void AddInFlight(int64_t delta) { in_flight_.fetch_add(delta, std::memory_order_relaxed); }
  void AddError(ErrorKind kind) {
    errors_[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed);
  }
  void AddLatency(std::chrono::microseconds latency);

  RequestStatsSnapshot Snapshot() const;

  // Exposed for tests: the bucket of a latency, and a bucket's upper bound.
  // Buckets grow by 2^(1/4): 4 per power of two.
  static int BucketOf(uint64_t us);
  static uint64_t BucketUpperBound(int bucket);
  static constexpr int kBuckets = 4 * 40;  // Up to 2^40 us, about 12 days.

 private:
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> unverified_{0};
  std::atomic<int64_t> in_flight_{0};
  std::array<std::atomic<uint64_t>, kErrorKinds> errors_{};
  std::array<std::atomic<uint64_t>, kBuckets> latency_{};
  std::atomic<uint64_t> latency_max_{0};
};

}  // namespace shardfs::remote

#endif  // SHARDFS_SRC_REMOTE_REQUEST_STATS_H_
