// Test helpers for remote/ tests: an environment guard, and an in-process
// loopback HTTP server whose answers each test scripts (206s, 503s, 429 +
// Retry-After, resets and stalls mid-body, 412s, wrong totals, S3 listing
// pages). No network beyond 127.0.0.1.
#ifndef SHARDFS_TESTS_UNIT_REMOTE_REMOTE_TEST_UTIL_H_
#define SHARDFS_TESTS_UNIT_REMOTE_REMOTE_TEST_UTIL_H_

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "src/remote/http_client.h"

namespace shardfs::remote {

// Sets environment variables for one test and restores every one it touched.
class EnvGuard {
 public:
  EnvGuard() {
    for (const char* name :
         {"HOME", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
          "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
          "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_NO_SIGN_REQUEST", "CURL_CA_BUNDLE",
          "SSL_CERT_FILE", "SHARDFS_S3_ALLOW_HTTP"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      if (std::string_view(name) != "HOME") unsetenv(name);
    }
  }
  ~EnvGuard() {
    for (const auto& s : saved_) {
      if (s.second) {
        setenv(s.first.c_str(), s.second->c_str(), 1);
      } else {
        unsetenv(s.first.c_str());
      }
    }
  }
  void Set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

struct HttpRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // Names lower-cased.
  int connection = 0;                          // 0 for the first accepted.
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// What the server does with the connection after a handler answered.
enum class After { kKeep, kClose, kReset, kStall };

inline void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// "HTTP/1.1 <status>" with headers (Content-Length added when missing) and
// a body, of which only `send_bytes` are written when given.
inline void Respond(int fd, std::string_view status, std::vector<std::string> headers,
                    std::string_view body, std::optional<size_t> send_bytes = std::nullopt,
                    bool head = false) {
  std::string out = fmt::format("HTTP/1.1 {}\r\n", status);
  bool has_length = false;
  for (const std::string& h : headers) {
    if (h.rfind("Content-Length:", 0) == 0) has_length = true;
    out += h + "\r\n";
  }
  if (!has_length) out += fmt::format("Content-Length: {}\r\n", body.size());
  out += "\r\n";
  if (!head) out.append(body.substr(0, send_bytes.value_or(body.size())));
  WriteAll(fd, out);
}

// A one-thread HTTP/1.1 server on 127.0.0.1 serving one connection at a time
// (each HttpClient uses one). Each request goes to the handler, which writes
// the answer and says what becomes of the connection.
class LoopbackServer {
 public:
  using Handler = std::function<After(int fd, const HttpRequest& req, int index)>;

  explicit LoopbackServer(Handler handler) : handler_(std::move(handler)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_fd_, 16) != 0) {
      ADD_FAILURE() << "loopback server: bind/listen failed";
    }
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~LoopbackServer() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }

  std::string Url(std::string_view path) const {
    return fmt::format("http://127.0.0.1:{}{}", port_, path);
  }
  std::string Endpoint() const { return fmt::format("http://127.0.0.1:{}", port_); }
  int connections() const { return connections_; }
  std::vector<HttpRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  // Waits for `fd` to be readable; false when stopping or after timeout_ms.
  bool WaitReadable(int fd, int timeout_ms) {
    for (int waited = 0; !stop_ && waited < timeout_ms; waited += 20) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) return true;
    }
    return false;
  }

  void Loop() {
    while (!stop_) {
      if (!WaitReadable(listen_fd_, 1 << 30)) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      const int conn = connections_++;
      Serve(fd, conn);
    }
  }

  void Serve(int fd, int conn) {
    std::string buf;
    for (;;) {
      size_t end;
      while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
        if (!WaitReadable(fd, 5000)) return (void)::close(fd);
        char tmp[4096];
        const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
        if (n <= 0) return (void)::close(fd);
        buf.append(tmp, static_cast<size_t>(n));
      }
      HttpRequest req;
      req.connection = conn;
      std::string_view head(buf.data(), end);
      size_t line_end = head.find("\r\n");
      std::string_view first = head.substr(0, line_end);
      req.method = std::string(first.substr(0, first.find(' ')));
      first.remove_prefix(first.find(' ') + 1);
      req.target = std::string(first.substr(0, first.find(' ')));
      while (line_end != std::string_view::npos) {
        head.remove_prefix(line_end + 2);
        line_end = head.find("\r\n");
        std::string_view line = head.substr(0, line_end);
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        std::string name(line.substr(0, colon));
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string_view value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        req.headers[name] = std::string(value);
      }
      buf.erase(0, end + 4);
      int index;
      {
        std::lock_guard<std::mutex> lock(mu_);
        index = static_cast<int>(requests_.size());
        requests_.push_back(req);
      }
      const After after = handler_(fd, req, index);
      if (after == After::kKeep) continue;
      if (after == After::kReset) {
        linger l{1, 0};  // Close with RST, as a dropped connection does.
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      } else if (after == After::kStall) {
        // Send nothing more until the client gives up and closes.
        char tmp[256];
        while (WaitReadable(fd, 5000) && ::recv(fd, tmp, sizeof(tmp), 0) > 0) {
        }
      }
      ::close(fd);
      return;
    }
  }

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  mutable std::mutex mu_;
  std::vector<HttpRequest> requests_;  // Guarded by mu_.
  std::thread thread_;
};

// Short timeouts and backoffs so that retry tests take milliseconds.
inline FetchOptions FastOptions() {
  FetchOptions o;
  o.retry_budget = std::chrono::milliseconds(3000);
  o.connect_timeout = std::chrono::milliseconds(1000);
  o.stall_timeout = std::chrono::milliseconds(300);
  o.initial_backoff = std::chrono::milliseconds(10);
  o.max_backoff = std::chrono::milliseconds(100);
  return o;
}

}  // namespace shardfs::remote

#endif  // SHARDFS_TESTS_UNIT_REMOTE_REMOTE_TEST_UTIL_H_
