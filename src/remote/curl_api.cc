#include "src/remote/curl_api.h"

#include <dlfcn.h>
#include <fmt/format.h>

namespace shardfs::remote {
namespace {

// The soname of libcurl 7.16 and later (the ABI shardfs is built against).
constexpr const char* kLibrary = "libcurl.so.4";

struct Loaded {
  CurlApi api{};
  std::string error;  // Empty when `api` is usable.
};

template <typename F>
bool Bind(void* lib, const char* name, F* slot, std::string* error) {
  void* sym = ::dlsym(lib, name);
  if (sym == nullptr) {
    *error = fmt::format("{} has no {}", kLibrary, name);
    return false;
  }
  *slot = reinterpret_cast<F>(sym);
  return true;
}

Loaded Load() {
  Loaded l;
  // Never unloaded: handles and libcurl's global state live until exit.
  void* lib = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    l.error = fmt::format("cannot load {} (needed for remote shards): {}", kLibrary,
                          why != nullptr ? why : "unknown error");
    return l;
  }
  CurlApi& a = l.api;
  std::string& e = l.error;
  const bool bound = Bind(lib, "curl_global_init", &a.global_init, &e) &&
                     Bind(lib, "curl_easy_init", &a.easy_init, &e) &&
                     Bind(lib, "curl_easy_cleanup", &a.easy_cleanup, &e) &&
                     Bind(lib, "curl_easy_reset", &a.easy_reset, &e) &&
                     Bind(lib, "curl_easy_setopt", &a.easy_setopt, &e) &&
                     Bind(lib, "curl_easy_strerror", &a.easy_strerror, &e) &&
                     Bind(lib, "curl_getdate", &a.getdate, &e) &&
                     Bind(lib, "curl_multi_init", &a.multi_init, &e) &&
                     Bind(lib, "curl_multi_cleanup", &a.multi_cleanup, &e) &&
                     Bind(lib, "curl_multi_add_handle", &a.multi_add_handle, &e) &&
                     Bind(lib, "curl_multi_remove_handle", &a.multi_remove_handle, &e) &&
                     Bind(lib, "curl_multi_perform", &a.multi_perform, &e) &&
                     Bind(lib, "curl_multi_poll", &a.multi_poll, &e) &&
                     Bind(lib, "curl_multi_info_read", &a.multi_info_read, &e) &&
                     Bind(lib, "curl_multi_strerror", &a.multi_strerror, &e) &&
                     Bind(lib, "curl_slist_append", &a.slist_append, &e) &&
                     Bind(lib, "curl_slist_free_all", &a.slist_free_all, &e);
  if (!bound) return l;
  if (a.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) e = "libcurl could not be initialised";
  return l;
}

}  // namespace

const CurlApi* Curl(std::string* error) {
  static const Loaded loaded = Load();  // Once, from whichever thread is first.
  if (!loaded.error.empty()) {
    if (error != nullptr) *error = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace shardfs::remote
