// `shardfs view create|ls|log|rm|tag` and `shardfs index add`: the named
// views and versions of an index (index/view_store.h).
#include <getopt.h>

#include <cstdint>
#include <ctime>

#include <fmt/format.h>

#include "base/log.h"
#include "index/index_reader.h"
#include "index/view_store.h"
#include "src/command.h"
#include "src/json_writer.h"
#include "base/parse.h"
#include "tools/index_add.h"
#include "tools/progress.h"
#include "tools/view_create.h"

namespace shardfs::cli {
namespace {

int Fail(const Status& s) {
  log::Error("{}", s.message());
  return kExitFailure;
}

std::string Utc(int64_t ns) {
  if (ns == 0) return "-";
  std::time_t t = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string JsonStrings(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ",";
    AppendJsonString(&out, items[i]);
  }
  return out + "]";
}

// Opens `index` read-only (the base view): what listing commands need.
Result<std::unique_ptr<index::IndexReader>> OpenIndex(const std::string& path) {
  return index::IndexReader::Open(path);
}

}  // namespace

int RunViewCreate(int argc, char** argv) {
  static const option kLong[] = {
      {"from", required_argument, nullptr, 'f'},
      {"include", required_argument, nullptr, 'i'},
      {"exclude", required_argument, nullptr, 'x'},
      {"include-list", required_argument, nullptr, 'I'},
      {"exclude-list", required_argument, nullptr, 'X'},
      {"rename-map", required_argument, nullptr, 'r'},
      {"ignore-missing", no_argument, nullptr, 'g'},
      {"message", required_argument, nullptr, 'm'},
      {"json", no_argument, nullptr, 'J'},
      {nullptr, 0, nullptr, 0}};
  tools::ViewCreateOptions o;
  bool json = false;
  optind = 0;
  for (int c; (c = getopt_long(argc, argv, "m:", kLong, nullptr)) != -1;) {
    switch (c) {
      case 'f': o.from = optarg; break;
      case 'i': o.include_globs.push_back(optarg); break;
      case 'x': o.exclude_globs.push_back(optarg); break;
      case 'I':
        if (!o.include_list.empty()) return UsageError("view create", "one --include-list");
        o.include_list = optarg;
        break;
      case 'X':
        if (!o.exclude_list.empty()) return UsageError("view create", "one --exclude-list");
        o.exclude_list = optarg;
        break;
      case 'r': o.rename_map = optarg; break;
      case 'g': o.ignore_missing = true; break;
      case 'm': o.message = optarg; break;
      case 'J': json = true; break;
      default: return UsageError("view create", "unknown option");
    }
  }
  if (argc - optind != 2) return UsageError("view create", "expected INDEX NAME");
  o.index = argv[optind];
  o.name = argv[optind + 1];
  Result<tools::ViewCreateReport> r = tools::CreateView(o);
  if (!r.ok()) return Fail(r.status().WithContext("view create"));
  const auto& s = r->summary;
  if (json) {
    JsonObject j;
    j.Str("view", r->created.label())
        .Str("from", r->from)
        .UNum("files", s.files)
        .UNum("dirs", s.dirs)
        .UNum("symlinks", s.symlinks)
        .UNum("bytes", s.bytes)
        .UNum("removed", s.removed)
        .UNum("added", s.added)
        .UNum("renamed", s.moved)
        .UNum("index_bytes_added", r->index_bytes_added)
        .Raw("seconds", fmt::format("{:.3f}", r->seconds));
    fmt::print("{}\n", j.Finish());
  } else {
    fmt::print("{}: {} files, {} dirs, {} bytes (from {}: -{} +{} ~{})\n", r->created.label(),
               s.files, s.dirs, s.bytes, r->from, s.removed, s.added, s.moved);
  }
  return kExitOk;
}

int RunViewLs(int argc, char** argv) {
  static const option kLong[] = {{"json", no_argument, nullptr, 'J'}, {nullptr, 0, nullptr, 0}};
  bool json = false;
  optind = 0;
  for (int c; (c = getopt_long(argc, argv, "", kLong, nullptr)) != -1;) {
    if (c != 'J') return UsageError("view ls", "unknown option");
    json = true;
  }
  if (argc - optind != 1) return UsageError("view ls", "expected INDEX");
  auto reader = OpenIndex(argv[optind]);
  if (!reader.ok()) return Fail(reader.status());
  const index::Catalog& catalog = (*reader)->catalog();
  auto names = catalog.Names();
  if (!names.ok()) return Fail(names.status());
  std::string views = "[";
  for (const std::string& name : *names) {
    auto versions = catalog.Versions(name);
    if (!versions.ok()) return Fail(versions.status());
    std::string tags_json = "{";
    std::vector<std::string> tags_text;
    for (const auto& v : *versions) {
      for (const std::string& t : v.tags) {
        if (tags_json.size() > 1) tags_json += ",";
        AppendJsonString(&tags_json, t);
        tags_json += fmt::format(":{}", v.version);
        tags_text.push_back(fmt::format("{}={}", t, v.version));
      }
    }
    tags_json += "}";
    const auto& latest = versions->back();
    if (json) {
      JsonObject j;
      j.Str("name", name)
          .UNum("latest", latest.version)
          .UNum("versions", versions->size())
          .UNum("files", latest.record.files)
          .UNum("bytes", latest.record.bytes)
          .Raw("tags", tags_json);
      if (views.size() > 1) views += ",";
      views += j.Finish();
    } else {
      fmt::print("{:<20} latest {}@{}  {} version(s)  {} files  {}{}\n", name, name,
                 latest.version, versions->size(), latest.record.files,
                 tools::HumanBytes(latest.record.bytes),
                 tags_text.empty() ? "" : fmt::format("  tags: {}", fmt::join(tags_text, ",")));
    }
  }
  if (json) fmt::print("{{\"views\":{}]}}\n", views);
  return kExitOk;
}

int RunViewLog(int argc, char** argv) {
  static const option kLong[] = {{"json", no_argument, nullptr, 'J'}, {nullptr, 0, nullptr, 0}};
  bool json = false;
  optind = 0;
  for (int c; (c = getopt_long(argc, argv, "", kLong, nullptr)) != -1;) {
    if (c != 'J') return UsageError("view log", "unknown option");
    json = true;
  }
  if (argc - optind != 2) return UsageError("view log", "expected INDEX NAME");
  if (Status s = index::CheckViewName(argv[optind + 1], "view"); !s.ok()) return Fail(s);
  auto reader = OpenIndex(argv[optind]);
  if (!reader.ok()) return Fail(reader.status());
  auto versions = (*reader)->catalog().Versions(argv[optind + 1]);
  if (!versions.ok()) return Fail(versions.status());
  std::string items = "[";
  for (auto v = versions->rbegin(); v != versions->rend(); ++v) {
    const auto& r = v->record;
    if (json) {
      JsonObject j;
      j.UNum("version", v->version)
          .Str("created", Utc(r.created_ns))
          .Str("from", r.from)
          .Str("message", r.message)
          .Str("kind", r.kind == index::VersionKind::kAdd ? "add" : "create")
          .UNum("files", r.files)
          .UNum("dirs", r.dirs)
          .UNum("symlinks", r.symlinks)
          .UNum("bytes", r.bytes)
          .UNum("shards", r.shard_count)
          .Raw("tags", JsonStrings(v->tags));
      if (items.size() > 1) items += ",";
      items += j.Finish();
    } else {
      fmt::print("{}  {}  {} files {} bytes  from {}{}  {}\n", v->label(), Utc(r.created_ns),
                 r.files, r.bytes, r.from.empty() ? "-" : r.from,
                 v->tags.empty() ? "" : fmt::format("  [{}]", fmt::join(v->tags, ",")),
                 r.message);
    }
  }
  if (json) {
    JsonObject j;
    j.Str("name", argv[optind + 1]).Raw("versions", items + "]");
    fmt::print("{}\n", j.Finish());
  }
  return kExitOk;
}

int RunViewRm(int argc, char** argv) {
  optind = 0;
  if (getopt_long(argc, argv, "", nullptr, nullptr) != -1) {
    return UsageError("view rm", "unknown option");
  }
  if (argc - optind != 2) return UsageError("view rm", "expected INDEX NAME[@N]");
  auto spec = index::ParseViewSpec(argv[optind + 1]);
  if (!spec.ok()) return Fail(spec.status());
  if (spec->name == index::kDefaultViewName) {
    return Fail(Status::InvalidArgument(
        "view rm: 'default' is the full tree and cannot be removed"));
  }
  auto editor = index::IndexEditor::Open(argv[optind]);
  if (!editor.ok()) return Fail(editor.status());
  auto reader = OpenIndex(argv[optind]);
  if (!reader.ok()) return Fail(reader.status());
  auto versions = (*reader)->catalog().Versions(spec->name);
  if (!versions.ok()) return Fail(versions.status());
  std::vector<index::VersionInfo> gone;
  if (spec->version == 0 && spec->tag.empty()) {
    gone = *versions;
  } else {
    auto one = (*reader)->catalog().Resolve(*spec);
    if (!one.ok()) return Fail(one.status());
    gone.push_back(*one);
  }
  reader->reset();
  if (Status s = (*editor)->Remove(gone); !s.ok()) return Fail(s);
  for (const auto& v : gone) fmt::print("removed {}\n", v.label());
  return kExitOk;
}

int RunViewTag(int argc, char** argv) {
  static const option kLong[] = {{"force", no_argument, nullptr, 'F'}, {nullptr, 0, nullptr, 0}};
  bool force = false;
  optind = 0;
  for (int c; (c = getopt_long(argc, argv, "", kLong, nullptr)) != -1;) {
    if (c != 'F') return UsageError("view tag", "unknown option");
    force = true;
  }
  if (argc - optind != 3) return UsageError("view tag", "expected INDEX NAME@N TAG");
  auto spec = index::ParseViewSpec(argv[optind + 1]);
  if (!spec.ok()) return Fail(spec.status());
  if (Status s = index::CheckTagName(argv[optind + 2]); !s.ok()) return Fail(s);
  auto editor = index::IndexEditor::Open(argv[optind]);
  if (!editor.ok()) return Fail(editor.status());
  auto reader = OpenIndex(argv[optind]);
  if (!reader.ok()) return Fail(reader.status());
  auto version = (*reader)->catalog().Resolve(*spec);
  if (!version.ok()) return Fail(version.status());
  reader->reset();
  if (Status s = (*editor)->Tag(*version, argv[optind + 2], force); !s.ok()) return Fail(s);
  fmt::print("{}@{} -> {}\n", version->name, argv[optind + 2], version->label());
  return kExitOk;
}

int RunIndexAdd(int argc, char** argv) {
  static const option kLong[] = {{"no-checksum", no_argument, nullptr, 'n'},
                                 {"jobs", required_argument, nullptr, 'j'},
                                 {"message", required_argument, nullptr, 'm'},
                                 {"quiet", no_argument, nullptr, 'q'},
                                 {"max-shard-size", required_argument, nullptr, 'S'},
                                 {"max-list-pages", required_argument, nullptr, 'P'},
                                 {nullptr, 0, nullptr, 0}};
  tools::IndexAddOptions o;
  optind = 0;
  for (int c; (c = getopt_long(argc, argv, "j:m:q", kLong, nullptr)) != -1;) {
    switch (c) {
      case 'n': o.checksum = false; break;
      case 'j':
        if (!ParseJobs(optarg, &o.jobs)) return UsageError("index add", "-j needs a count 1..4096");
        break;
      case 'm': o.message = optarg; break;
      case 'q': o.quiet = true; break;
      case 'S':
        if (!ParseSize(optarg, &o.remote.max_shard_size) || o.remote.max_shard_size == 0) {
          return UsageError("index add", "--max-shard-size needs a size such as 64G");
        }
        break;
      case 'P':
        if (!ParseCount(optarg, 1, UINT64_MAX, &o.remote.max_list_pages)) {
          return UsageError("index add", "--max-list-pages needs a count of at least 1");
        }
        break;
      default: return UsageError("index add", "unknown option");
    }
  }
  if (argc - optind < 2) return UsageError("index add", "expected INDEX SHARD...");
  o.index = argv[optind];
  for (int i = optind + 1; i < argc; ++i) o.inputs.push_back(argv[i]);
  if (o.quiet) log::SetLevel(log::Level::kWarning);
  Result<tools::IndexAddReport> r = tools::AddShards(o);
  if (!r.ok()) return Fail(r.status().WithContext("index add"));
  const auto& rep = r->replay;
  if (rep.replaced) {
    log::Warning("{} entries replaced by a later member of the same path (the later shard wins, "
                 "as with tar extraction), e.g.: {}",
                 rep.replaced, fmt::join(rep.replaced_examples, ", "));
  }
  if (!rep.refusals.empty()) {
    log::Warning("{} member(s) could not be placed in the tree, e.g.: {}", rep.refusals.size(),
                 rep.refusals.front().reason);
  }
  if (r->scan.rejected) {
    log::Warning("{} member(s) left out (unsafe names or unsupported types), e.g.: {}",
                 r->scan.rejected, fmt::join(r->scan.rejected_examples, "; "));
  }
  const auto& s = r->summary;
  fmt::print("{}: {} files, {} dirs, {} bytes (from {}: -{} +{}); {} shard(s) scanned in {:.2f}s, "
             "{:.2f}s in all\n",
             r->created.label(), s.files, s.dirs, s.bytes, r->from, s.removed, s.added,
             r->scan.shards, r->scan_seconds, r->seconds);
  return kExitOk;
}

}  // namespace shardfs::cli
