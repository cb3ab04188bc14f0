// libcurl, loaded when first needed instead of at program start.
//
// Linking libcurl makes the dynamic loader map and relocate some thirty
// libraries (TLS, Kerberos, LDAP, SSH, IDN, ...) every time shardfs starts,
// although only an index with remote shards ever uses them: that was most of
// the CPU a mount spends before it is ready. The functions shardfs calls are
// looked up here with dlopen/dlsym on the first remote request instead.
#ifndef SHARDFS_SRC_REMOTE_CURL_API_H_
#define SHARDFS_SRC_REMOTE_CURL_API_H_

#include <curl/curl.h>

#include <string>

namespace shardfs::remote {

struct CurlApi {
  decltype(&::curl_global_init) global_init;
  decltype(&::curl_easy_init) easy_init;
  decltype(&::curl_easy_cleanup) easy_cleanup;
  decltype(&::curl_easy_reset) easy_reset;
  // Variadic like curl_easy_setopt itself; the argument types are those of
  // the libcurl documentation for each option (long, pointer, off_t).
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  decltype(&::curl_easy_strerror) easy_strerror;
  decltype(&::curl_getdate) getdate;
  decltype(&::curl_multi_init) multi_init;
  decltype(&::curl_multi_cleanup) multi_cleanup;
  decltype(&::curl_multi_add_handle) multi_add_handle;
  decltype(&::curl_multi_remove_handle) multi_remove_handle;
  decltype(&::curl_multi_perform) multi_perform;
  decltype(&::curl_multi_poll) multi_poll;
  decltype(&::curl_multi_info_read) multi_info_read;
  decltype(&::curl_multi_strerror) multi_strerror;
  decltype(&::curl_slist_append) slist_append;
  decltype(&::curl_slist_free_all) slist_free_all;
};

// The loaded library with curl_global_init done, or null with `*error`
// saying why (the library or a symbol is missing, or the init failed).
// Loads once per process; thread-safe.
const CurlApi* Curl(std::string* error);

}  // namespace shardfs::remote

#endif  // SHARDFS_SRC_REMOTE_CURL_API_H_
