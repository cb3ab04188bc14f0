#include "src/remote/s3_list.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <utility>

#include "base/parse.h"
#include "src/remote/url.h"

namespace shardfs::remote {
namespace {

// The text of the first <name>...</name> in `xml` at or after `from`; found
// false when absent. Enough for S3's flat, attribute-free listing elements.
struct Element {
  bool found = false;
  std::string_view text;
  size_t end = 0;  // Just past the closing tag.
};

Element FindElement(std::string_view xml, std::string_view name, size_t from = 0) {
  const std::string open = fmt::format("<{}>", name);
  const std::string close = fmt::format("</{}>", name);
  Element e;
  const size_t a = xml.find(open, from);
  if (a == std::string_view::npos) return e;
  const size_t b = xml.find(close, a + open.size());
  if (b == std::string_view::npos) return e;
  e.found = true;
  e.text = xml.substr(a + open.size(), b - a - open.size());
  e.end = b + close.size();
  return e;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

Result<std::string> DecodeXmlText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text[i] != '&') {
      out.push_back(text[i++]);
      continue;
    }
    const size_t semi = text.find(';', i);
    if (semi == std::string_view::npos || semi - i > 12) {
      return Status::InvalidArgument(fmt::format("XML text at byte {}: '&' without a ';'", i));
    }
    const std::string_view ent = text.substr(i + 1, semi - i - 1);
    if (ent == "amp") {
      out.push_back('&');
    } else if (ent == "lt") {
      out.push_back('<');
    } else if (ent == "gt") {
      out.push_back('>');
    } else if (ent == "quot") {
      out.push_back('"');
    } else if (ent == "apos") {
      out.push_back('\'');
    } else if (ent.size() >= 2 && ent[0] == '#') {
      const bool hex = ent[1] == 'x' || ent[1] == 'X';
      const std::string_view digits = ent.substr(hex ? 2 : 1);
      uint32_t cp = 0;
      bool ok = !digits.empty();
      for (char c : digits) {
        int d;
        if (c >= '0' && c <= '9') {
          d = c - '0';
        } else if (hex && c >= 'a' && c <= 'f') {
          d = c - 'a' + 10;
        } else if (hex && c >= 'A' && c <= 'F') {
          d = c - 'A' + 10;
        } else {
          ok = false;
          break;
        }
        cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(d);
        if (cp > 0x10FFFF) ok = false;
      }
      if (!ok || cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return Status::InvalidArgument(
            fmt::format("XML text at byte {}: bad character reference &{};", i, ent));
      }
      AppendUtf8(cp, &out);
    } else {
      return Status::InvalidArgument(
          fmt::format("XML text at byte {}: unknown entity &{};", i, ent));
    }
    i = semi + 1;
  }
  return out;
}

Result<ListPage> ParseListObjectsV2(std::string_view xml) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    return Status::InvalidArgument("S3 listing: no <ListBucketResult> in the answer");
  }
  ListPage page;
  for (size_t at = 0;;) {
    const Element contents = FindElement(xml, "Contents", at);
    if (!contents.found) break;
    at = contents.end;
    const size_t n = page.objects.size();
    const Element key = FindElement(contents.text, "Key");
    if (!key.found) {
      return Status::InvalidArgument(fmt::format("S3 listing: object {} has no <Key>", n));
    }
    ListedObject obj;
    SHARDFS_ASSIGN_OR_RETURN(obj.key, DecodeXmlText(key.text));
    const Element size = FindElement(contents.text, "Size");
    const std::optional<uint64_t> bytes = size.found ? ParseDecimal(size.text) : std::nullopt;
    if (!bytes) {
      return Status::InvalidArgument(
          fmt::format("S3 listing: object {} has no valid <Size>", obj.key));
    }
    obj.size = *bytes;
    const Element etag = FindElement(contents.text, "ETag");
    if (etag.found) {
      SHARDFS_ASSIGN_OR_RETURN(obj.etag, DecodeXmlText(etag.text));
    }
    page.objects.push_back(std::move(obj));
  }
  const Element truncated = FindElement(xml, "IsTruncated");
  page.is_truncated = truncated.found && truncated.text == "true";
  if (page.is_truncated) {
    const Element token = FindElement(xml, "NextContinuationToken");
    if (!token.found || token.text.empty()) {
      return Status::InvalidArgument(
          "S3 listing: truncated, but no <NextContinuationToken> to go on with");
    }
    SHARDFS_ASSIGN_OR_RETURN(page.next_continuation_token, DecodeXmlText(token.text));
  }
  return page;
}

Result<std::vector<ListedObject>> ListS3(HttpClient& client, std::string_view bucket,
                                         std::string_view prefix, uint64_t max_pages) {
  RemoteUrl url;
  url.scheme = RemoteUrl::Scheme::kS3;
  url.bucket = std::string(bucket);
  std::vector<ListedObject> out;
  std::string token;
  // Every token sent so far, with the page that brought it: a server that
  // sends one again (a cycle of any length) would be listed forever.
  std::unordered_map<std::string, uint64_t> seen;
  std::string body;
  for (uint64_t page_no = 1;; ++page_no) {
    if (page_no > max_pages) {
      return Status::IoError(fmt::format(
          "s3://{}/{}: the listing goes on past {} pages ({} objects so far); --max-list-pages "
          "raises the limit",
          bucket, prefix, max_pages, out.size()));
    }
    std::vector<std::pair<std::string, std::string>> params = {{"list-type", "2"}};
    if (!prefix.empty()) params.emplace_back("prefix", std::string(prefix));
    if (!token.empty()) params.emplace_back("continuation-token", token);
    const std::string query = S3Query(std::move(params));
    SHARDFS_RETURN_IF_ERROR(client.GetText(url, query, &body));
    Result<ListPage> page = ParseListObjectsV2(body);
    if (!page.ok()) {
      return page.status().WithContext(fmt::format("s3://{}/{}: page {}", bucket, prefix, page_no));
    }
    for (ListedObject& o : page->objects) out.push_back(std::move(o));
    if (!page->is_truncated) break;
    const auto [it, fresh] = seen.try_emplace(page->next_continuation_token, page_no);
    if (!fresh) {
      return Status::IoError(fmt::format(
          "s3://{}/{}: page {}: the server sent again the continuation token of page {}; "
          "its listing would never end",
          bucket, prefix, page_no, it->second));
    }
    token = std::move(page->next_continuation_token);
  }
  // S3 lists in key order already; S3-compatible servers may not.
  std::sort(out.begin(), out.end(),
            [](const ListedObject& a, const ListedObject& b) { return a.key < b.key; });
  return out;
}

}  // namespace shardfs::remote
