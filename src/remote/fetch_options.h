// The plain data an HttpClient call takes and gives (src/remote/http_client.h):
// how it fetches (FetchOptions), what the index recorded of the object
// (ExpectedObject), what the server said of it (ObjectInfo), and where a body
// goes (Sink). Shared by the client and its transfer machinery
// (src/remote/http_transfer.h); no behaviour here.
#ifndef SHARDFS_SRC_REMOTE_FETCH_OPTIONS_H_
#define SHARDFS_SRC_REMOTE_FETCH_OPTIONS_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace shardfs::remote {

struct FetchOptions {
  // Total time one call may spend, retries and waits included. The last
  // attempt is cut off at the budget's end.
  std::chrono::milliseconds retry_budget{30'000};
  std::chrono::milliseconds connect_timeout{5'000};
  // An attempt that receives no byte for this long fails as a stall and is
  // retried. Counted from the end of connect_timeout for the first byte.
  std::chrono::milliseconds stall_timeout{10'000};
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{2'000};
  // CA bundle for https. Empty: env CURL_CA_BUNDLE, else env SSL_CERT_FILE,
  // else the system bundle.
  std::string ca_file;
  // When set and true, a call stops within about 20 ms (between attempts, in
  // a backoff wait, or mid-transfer) and returns IoError "... cancelled".
  // Must outlive the client.
  const std::atomic<bool>* cancel = nullptr;
  // Accept a response that has no ETag although the index holds one (or no
  // Last-Modified, for an object indexed with only that) on its size and
  // range alone: a replaced object of the same size is then served. A
  // Last-Modified that differs still fails. -o trust_responses_without_etag.
  bool trust_responses_without_etag = false;
};

// What the index recorded of a remote object. Every response with its bytes
// must show it is still that object.
struct ExpectedObject {
  uint64_t size = 0;
  std::string_view etag;  // Sent as If-Match; "" when the index has none.
  int64_t mtime_ns = 0;   // Last-Modified when indexed; 0 when it had none.
};

struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;      // As the server sent it, quotes included; may be empty.
  int64_t mtime_ns = 0;  // From Last-Modified; 0 when absent.
};

// Receives a body in order; a non-ok Status stops the transfer and is
// returned by the call.
using Sink = std::function<Status(const char* data, size_t len)>;

}  // namespace shardfs::remote

#endif  // SHARDFS_SRC_REMOTE_FETCH_OPTIONS_H_
