#include "base/json_writer.h"

#include <fmt/format.h>

#include "base/strings.h"

namespace shardfs {
void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = Utf8SequenceLength(s, i);
    if (len == 0) {
      *out += fmt::format("\\u{:04x}", 0xdc00 + c);
      ++i;
      continue;
    }
    if (len > 1) {
      out->append(s.substr(i, len));
      i += len;
      continue;
    }
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\r':
        *out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          *out += fmt::format("\\u{:04x}", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out->push_back('"');
}

void JsonObject::Key(std::string_view key) {
  if (body_.size() > 1) body_.push_back(',');
  AppendJsonString(&body_, key);
  body_.push_back(':');
}

JsonObject& JsonObject::Str(std::string_view key, std::string_view value) {
  Key(key);
  AppendJsonString(&body_, value);
  return *this;
}
JsonObject& JsonObject::Num(std::string_view key, int64_t value) {
  Key(key);
  body_ += std::to_string(value);
  return *this;
}
JsonObject& JsonObject::UNum(std::string_view key, uint64_t value) {
  Key(key);
  body_ += std::to_string(value);
  return *this;
}
JsonObject& JsonObject::Bool(std::string_view key, bool value) {
  Key(key);
  body_ += value ? "true" : "false";
  return *this;
}
JsonObject& JsonObject::Null(std::string_view key) {
  Key(key);
  body_ += "null";
  return *this;
}

JsonObject& JsonObject::Raw(std::string_view key, std::string_view json) {
  Key(key);
  body_ += json;
  return *this;
}

}  // namespace shardfs
