// A minimal JSON object writer for JSON Lines output (`--json`).
//
// Paths and symlink targets are raw bytes and need not be UTF-8. Valid UTF-8
// is written as is; each byte of an invalid sequence is written as the escape
// \udcXX (0xDC00 + byte), Python's "surrogateescape" convention, so
// os.fsencode(json.loads(line)["path"]) gives back the exact bytes.
#ifndef SHARDFS_BASE_JSON_WRITER_H_
#define SHARDFS_BASE_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace shardfs {

class JsonObject {
 public:
  JsonObject& Str(std::string_view key, std::string_view value);
  JsonObject& Num(std::string_view key, int64_t value);
  JsonObject& UNum(std::string_view key, uint64_t value);
  JsonObject& Bool(std::string_view key, bool value);
  JsonObject& Null(std::string_view key);
  // `json` must already be a JSON value (an array of numbers, say).
  JsonObject& Raw(std::string_view key, std::string_view json);
  // Returns "{...}".
  std::string Finish() const { return body_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string body_ = "{";
};

void AppendJsonString(std::string* out, std::string_view bytes);

}  // namespace shardfs

#endif  // SHARDFS_BASE_JSON_WRITER_H_
