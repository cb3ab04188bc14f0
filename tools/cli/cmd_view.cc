// `shardfs view create|ls|log|rm|tag` and `shardfs index add`: the named
// views and versions of an index (index/view_store.h).
#include <fmt/format.h>

#include <cstdint>
#include <ctime>
#include <iterator>

#include "base/json_writer.h"
#include "base/log.h"
#include "base/progress.h"
#include "index/index_reader.h"
#include "index/view_store.h"
#include "tools/builder/index_add.h"
#include "tools/builder/view_create.h"
#include "tools/cli/command.h"

namespace shardfs::cli {

using cli::AppendString;
using cli::CommandLine;
using cli::SetFlag;
using cli::SetJobs;
using cli::SetString;

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

// Opens `index` read-only (the latest version of "default"): what listing
// commands need; `ro` says how a manifest's partitions are found.
Result<std::unique_ptr<index::IndexReader>> OpenIndex(const std::string& path,
                                                      const index::ReaderOptions& ro = {}) {
  return index::IndexReader::Open(path, ro);
}

}  // namespace

int RunViewCreate(int argc, char** argv) {
  builder::ViewCreateOptions o;
  bool json = false;
  auto one_list = [](std::string* list, const char* error) {
    return [list, error](const char* arg) {
      if (!list->empty()) return Status::InvalidArgument(error);
      *list = arg;
      return Status::Ok();
    };
  };
  const CommandLine cl{
      "view create",
      "INDEX NAME",
      {{"from", 0, "SPEC", "the version to start from (default: default)", SetString(&o.from)},
       {"include", 0, "GLOB", "keep what matches (repeatable)", AppendString(&o.include_globs)},
       {"exclude", 0, "GLOB", "drop what matches (repeatable)", AppendString(&o.exclude_globs)},
       {"include-list", 0, "FILE", "keep the paths FILE lists",
        one_list(&o.include_list, "one --include-list")},
       {"exclude-list", 0, "FILE", "drop the paths FILE lists",
        one_list(&o.exclude_list, "one --exclude-list")},
       {"rename-map", 0, "FILE", "rename by FILE's OLD<TAB>NEW lines", SetString(&o.rename_map)},
       {"ignore-missing", 0, nullptr, "listed paths that are not there are no error",
        SetFlag(&o.ignore_missing)},
       {"message", 'm', "MESSAGE", "the version's message", SetString(&o.message)},
       {"json", 0, nullptr, "one JSON object", SetFlag(&json)}}};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 2) return UsageError("view create", "expected INDEX NAME");
  if (!WritableIndexArg("view create", args[0])) return kExitFailure;
  o.index = args[0];
  o.name = args[1];
  Result<builder::ViewCreateReport> r = builder::CreateView(o);
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
  bool json = false;
  indexref::IndexCacheOptions co;
  CommandLine cl{"view ls", "INDEX", {{"json", 0, nullptr, "one JSON object", SetFlag(&json)}}};
  std::ranges::move(IndexCacheOptions(&co), std::back_inserter(cl.options));
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 1) return UsageError("view ls", "expected INDEX");
  indexref::IndexRef ref;
  index::ReaderOptions ro;
  if (!ResolveIndexArg("view ls", &args[0], co, &ro, &ref)) return kExitFailure;
  auto reader = OpenIndex(args[0], ro);
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
      fmt::print("{:<20} latest {}@{}  {} version(s)  {} files  {}{}\n", name, name, latest.version,
                 versions->size(), latest.record.files, HumanBytes(latest.record.bytes),
                 tags_text.empty() ? "" : fmt::format("  tags: {}", fmt::join(tags_text, ",")));
    }
  }
  if (json) fmt::print("{{\"views\":{}]}}\n", views);
  return kExitOk;
}

int RunViewLog(int argc, char** argv) {
  bool json = false;
  indexref::IndexCacheOptions co;
  CommandLine cl{
      "view log", "INDEX NAME", {{"json", 0, nullptr, "one JSON object", SetFlag(&json)}}};
  std::ranges::move(IndexCacheOptions(&co), std::back_inserter(cl.options));
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 2) return UsageError("view log", "expected INDEX NAME");
  indexref::IndexRef ref;
  index::ReaderOptions ro;
  if (!ResolveIndexArg("view log", &args[0], co, &ro, &ref)) return kExitFailure;
  if (Status s = index::CheckViewName(args[1], "view"); !s.ok()) return Fail(s);
  auto reader = OpenIndex(args[0], ro);
  if (!reader.ok()) return Fail(reader.status());
  auto versions = (*reader)->catalog().Versions(args[1]);
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
                 v->tags.empty() ? "" : fmt::format("  [{}]", fmt::join(v->tags, ",")), r.message);
    }
  }
  if (json) {
    JsonObject j;
    j.Str("name", args[1]).Raw("versions", items + "]");
    fmt::print("{}\n", j.Finish());
  }
  return kExitOk;
}

int RunViewRm(int argc, char** argv) {
  const CommandLine cl{"view rm", "INDEX NAME[@N]", {}};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 2) return UsageError("view rm", "expected INDEX NAME[@N]");
  if (!WritableIndexArg("view rm", args[0])) return kExitFailure;
  auto spec = index::ParseViewSpec(args[1]);
  if (!spec.ok()) return Fail(spec.status());
  if (spec->name == index::kDefaultViewName) {
    return Fail(
        Status::InvalidArgument("view rm: 'default' is the full tree and cannot be removed"));
  }
  auto editor = index::IndexEditor::Open(args[0]);
  if (!editor.ok()) return Fail(editor.status());
  auto reader = OpenIndex(args[0]);
  if (!reader.ok()) return Fail(reader.status());
  auto versions = (*reader)->catalog().Versions(spec->name);
  if (!versions.ok()) return Fail(versions.status());
  std::vector<index::VersionInfo> gone;
  if (spec->version == 0 && spec->tag.empty()) {
    gone = *versions;
  } else {
    auto one = (*reader)->catalog().FindVersion(*spec);
    if (!one.ok()) return Fail(one.status());
    gone.push_back(*one);
  }
  reader->reset();
  if (Status s = (*editor)->Remove(gone); !s.ok()) return Fail(s);
  for (const auto& v : gone) fmt::print("removed {}\n", v.label());
  return kExitOk;
}

int RunViewTag(int argc, char** argv) {
  bool force = false;
  const CommandLine cl{
      "view tag",
      "INDEX NAME@N TAG",
      {{"force", 0, nullptr, "move the tag if it names another version", SetFlag(&force)}}};
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() != 3) return UsageError("view tag", "expected INDEX NAME@N TAG");
  if (!WritableIndexArg("view tag", args[0])) return kExitFailure;
  auto spec = index::ParseViewSpec(args[1]);
  if (!spec.ok()) return Fail(spec.status());
  if (Status s = index::CheckTagName(args[2]); !s.ok()) return Fail(s);
  auto editor = index::IndexEditor::Open(args[0]);
  if (!editor.ok()) return Fail(editor.status());
  auto reader = OpenIndex(args[0]);
  if (!reader.ok()) return Fail(reader.status());
  auto version = (*reader)->catalog().FindVersion(*spec);
  if (!version.ok()) return Fail(version.status());
  reader->reset();
  if (Status s = (*editor)->Tag(*version, args[2], force); !s.ok()) return Fail(s);
  fmt::print("{}@{} -> {}\n", version->name, args[2], version->label());
  return kExitOk;
}

int RunIndexAdd(int argc, char** argv) {
  builder::IndexAddOptions o;
  CommandLine cl{
      "index add",
      "INDEX SHARD...",
      {{"no-checksum", 0, nullptr, "read headers only, no content checksums",
        SetFlag(&o.checksum, false)},
       {"jobs", 'j', "N", "shards scanned at once (default: one per core)", SetJobs(&o.jobs)},
       {"message", 'm', "MESSAGE", "the new version's message", SetString(&o.message)},
       {"quiet", 'q', nullptr, "no progress; warnings and errors only", SetFlag(&o.quiet)}}};
  std::ranges::move(RemoteLimitOptions(&o.remote), std::back_inserter(cl.options));
  std::ranges::move(NestOptionTable(&o.nest), std::back_inserter(cl.options));
  std::vector<std::string> args;
  if (int rc = ParseArgs(cl, argc, argv, &args); rc >= 0) return rc;
  if (args.size() < 2) return UsageError("index add", "expected INDEX SHARD...");
  if (std::string e = CheckNestOptions(o.nest); !e.empty()) return UsageError("index add", e);
  if (!WritableIndexArg("index add", args[0])) return kExitFailure;
  o.index = args[0];
  o.inputs.assign(args.begin() + 1, args.end());
  if (o.quiet) log::SetLevel(log::Level::kWarning);
  Result<builder::IndexAddReport> r = builder::AddShards(o);
  if (!r.ok()) return Fail(r.status().WithContext("index add"));
  const auto& rep = r->replay;
  if (rep.replaced) {
    log::Warning(
        "{} entries replaced by a later member of the same path (the later shard wins, "
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
  fmt::print(
      "{}: {} files, {} dirs, {} bytes (from {}: -{} +{}); {} shard(s) scanned in {:.2f}s, "
      "{:.2f}s in all\n",
      r->created.label(), s.files, s.dirs, s.bytes, r->from, s.removed, s.added, r->scan.shards,
      r->scan_seconds, r->seconds);
  return kExitOk;
}

}  // namespace shardfs::cli
