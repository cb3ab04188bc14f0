#include "src/fuse_adapter.h"

#define FUSE_USE_VERSION 314
#include <fcntl.h>
#include <fuse_lowlevel.h>

#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstring>
#include <memory>
#include <vector>

#include "index/log.h"
#include "src/dir_prefill.h"

namespace shardfs::mount {
namespace {

struct Context {
  Filesystem* fs;
  MountOptions options;
  bool kernel_open = false;  // Set in init when the kernel can open alone.
  bool splice = false;
  fuse_session* se = nullptr;
  DirPrefill* prefill = nullptr;  // Null with -o prefill_dirs=0.
};

// A directory's listing, loaded once at opendir (one prefix scan) and served
// by offset to readdir/readdirplus. Owned by the open directory handle.
struct DirListing {
  struct Entry {
    std::string name;
    EntryRecord rec;  // rec.target is cleared: it pointed into the scan.
  };
  EntryRecord self;
  std::vector<Entry> entries;
};

Context& Ctx(fuse_req_t req) { return *static_cast<Context*>(fuse_req_userdata(req)); }

// A buffer per worker thread for replies built in user space.
char* ThreadBuffer(size_t size) {
  thread_local std::vector<char> buf;
  if (buf.size() < size) buf.resize(size);
  return buf.data();
}

void FillEntry(const Context& c, const EntryRecord& rec, fuse_entry_param* e) {
  *e = {};
  e->ino = rec.inode.value;
  e->generation = 1;
  c.fs->ToStat(rec, &e->attr);
  e->attr_timeout = c.options.attr_timeout;
  e->entry_timeout = c.options.entry_timeout;
}

void OpInit(void* userdata, fuse_conn_info* conn) noexcept {
  auto* c = static_cast<Context*>(userdata);
  c->kernel_open = c->options.kernel_open && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT);
  if (c->options.splice && (conn->capable & FUSE_CAP_SPLICE_WRITE)) {
    conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
    c->splice = true;
  } else {
    conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  }
  // Always readdirplus: attributes come from the same scan as the names, and
  // a walker that lists a directory before it stats the entries (find, du,
  // ls -l, os.walk) then needs no LOOKUP per entry. The "auto" mode would
  // drop to plain readdir after the first chunk of a large directory.
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  if (conn->capable & FUSE_CAP_CACHE_SYMLINKS) conn->want |= FUSE_CAP_CACHE_SYMLINKS;
  // The content never changes: no need to drop cached pages on mtime checks.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  conn->time_gran = 1;
  log::Debug("init: kernel_open={} splice={} max_readahead={} max_write={}", c->kernel_open,
             c->splice, conn->max_readahead, conn->max_write);
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept {
  Context& c = Ctx(req);
  size_t len = std::strlen(name);
  if (len > index::kMaxNameLength) {
    fuse_reply_err(req, ENAMETOOLONG);
    return;
  }
  EntryRecord rec;
  index::RecordHolder holder;
  Status s = c.fs->Lookup(InodeId{parent}, std::string_view(name, len), &rec, &holder);
  fuse_entry_param e;
  if (s.code() == Status::Code::kNotFound) {
    // A negative entry: the kernel remembers that the name does not exist
    // (the tree never changes) and answers the next lookup of it itself.
    e = {};
    e.entry_timeout = c.options.entry_timeout;
    fuse_reply_entry(req, &e);
  } else if (!s.ok()) {
    fuse_reply_err(req, ToErrno(s));
    return;
  } else {
    FillEntry(c, rec, &e);
    fuse_reply_entry(req, &e);
  }
  if (c.prefill) c.prefill->NoteMiss(InodeId{parent});
}

void OpForget(fuse_req_t req, fuse_ino_t, uint64_t) noexcept {
  // Inodes are assigned, not allocated: nothing to free.
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t, fuse_forget_data*) noexcept { fuse_reply_none(req); }

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) noexcept {
  Context& c = Ctx(req);
  EntryRecord rec;
  index::RecordHolder holder;
  Status s = c.fs->GetAttr(InodeId{ino}, &rec, &holder);
  if (!s.ok()) {
    fuse_reply_err(req, ToErrno(s));
    return;
  }
  struct stat st;
  c.fs->ToStat(rec, &st);
  fuse_reply_attr(req, &st, c.options.attr_timeout);
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) noexcept {
  Context& c = Ctx(req);
  std::string_view target;
  index::RecordHolder holder;
  Status s = c.fs->ReadLink(InodeId{ino}, &target, &holder);
  if (!s.ok()) {
    fuse_reply_err(req, ToErrno(s));
    return;
  }
  char* buf = ThreadBuffer(target.size() + 1);
  std::memcpy(buf, target.data(), target.size());
  buf[target.size()] = '\0';
  fuse_reply_readlink(req, buf);
}

void OpOpen(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) noexcept {
  Context& c = Ctx(req);
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
    fuse_reply_err(req, EROFS);
    return;
  }
  if (c.kernel_open) {
    // The kernel treats ENOSYS as success and stops sending OPEN at all.
    fuse_reply_err(req, ENOSYS);
    return;
  }
  fi->keep_cache = 1;
  fi->noflush = 1;
  fuse_reply_open(req, fi);
}

// After a read that finished file `ino` of a sequentially read shard: hands
// the files that follow it in the shard to the kernel's page cache
// (FUSE_NOTIFY_STORE), so the reader's next opens and reads of them are
// served by the kernel without a round trip each. Only files the kernel
// already knows (looked up, or listed by readdirplus or the dentry prefill)
// can be stored; the first unknown one ends the push.
void PushAhead(Context& c, fuse_ino_t ino, const ReadRange& range) noexcept {
  const FilesystemOptions& o = c.fs->options();
  const bool sequential = range.sequential_to_eof;
  uint64_t window = sequential ? o.push_ahead : range.whole_file ? o.push_random : 0;
  if (window == 0) return;
  ShardCache& shards = c.fs->shards();
  // One sequential push per shard at a time: a reader that overtakes it
  // would otherwise start another over the same files. Pushes after random
  // reads run side by side; the pushed bits keep them apart.
  if (sequential && !shards.BeginPush(range.shard_id)) return;
  uint64_t end = 0;
  size_t pushed = 0;
  try {
    thread_local std::vector<AheadFile> files;
    thread_local std::unique_ptr<char[]> buf(new char[Filesystem::kMaxAheadFile]);
    Status s = c.fs->PlanAhead(InodeId{ino}, window, !sequential, &files);
    if (s.ok() && !sequential && !files.empty()) {
      // One request for the run instead of readahead ramping up per file.
      uint64_t from = files.front().position;
      uint64_t to = files.back().position + files.back().size;
      ::posix_fadvise(range.shard->fd(), static_cast<off_t>(from), static_cast<off_t>(to - from),
                      POSIX_FADV_WILLNEED);
    }
    for (size_t i = 0; s.ok() && i < files.size(); ++i) {
      const AheadFile& f = files[i];
      // The reader overtook the push (its read of a file not yet pushed
      // reached another thread): skip ahead of it.
      if (sequential && f.position < shards.LastReadEnd(range.shard_id)) continue;
      s = c.fs->ReadAheadFile(f, range.shard, buf.get());
      if (!s.ok()) break;
      fuse_bufvec bv{};
      bv.count = 1;
      bv.buf[0].size = f.size;
      bv.buf[0].mem = buf.get();
      int rc = fuse_lowlevel_notify_store(c.se, f.inode.value, 0, &bv, fuse_buf_copy_flags{});
      if (rc != 0) {
        log::Debug("push-ahead: inode {}: {}", f.inode.value, std::strerror(-rc));
        break;
      }
      c.fs->MarkPushed(f.inode);
      end = f.position + f.size;
      ++pushed;
    }
    if (sequential && pushed > 0) c.fs->DeliveredUpTo(range, end);
    if (!s.ok()) log::Debug("push-ahead after inode {}: {}", ino, s.message());
    log::Debug("push-ahead after inode {}: {} of {} files", ino, pushed, files.size());
  } catch (const std::bad_alloc&) {
  }
  if (sequential) shards.EndPush(range.shard_id, end);
}

// After a read reply (`replied` is fuse_reply_*'s result): the kernel now
// holds the range, so a sequential reader's shard pages behind it can go;
// then the files that follow are pushed.
void AfterReply(Context& c, fuse_ino_t ino, const ReadRange& range, int replied) noexcept {
  if (replied == 0 && range.sequential_to_eof) {
    c.fs->DeliveredUpTo(range, range.position + range.length);
  }
  PushAhead(c, ino, range);
}

void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) noexcept {
  Context& c = Ctx(req);
  if (off < 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  if (c.splice) {
    ReadRange range;
    Status s = c.fs->ResolveRead(InodeId{ino}, static_cast<uint64_t>(off), size, &range);
    if (!s.ok()) {
      fuse_reply_err(req, ToErrno(s));
      return;
    }
    if (range.length == 0) {
      fuse_reply_buf(req, nullptr, 0);
      return;
    }
    fuse_bufvec buf{};
    buf.count = 1;
    buf.buf[0].size = range.length;
    buf.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    buf.buf[0].fd = range.shard->fd();
    buf.buf[0].pos = static_cast<off_t>(range.position);
    AfterReply(c, ino, range, fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE));
    return;
  }
  char* buf = ThreadBuffer(size);
  ReadRange range;
  Status s = c.fs->Read(InodeId{ino}, static_cast<uint64_t>(off), size, buf, &range);
  if (!s.ok()) {
    fuse_reply_err(req, ToErrno(s));
    return;
  }
  AfterReply(c, ino, range, fuse_reply_buf(req, buf, range.length));
}

void OpFlush(fuse_req_t req, fuse_ino_t, fuse_file_info*) noexcept {
  // ENOSYS once and the kernel stops sending FLUSH.
  fuse_reply_err(req, ENOSYS);
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info*) noexcept { fuse_reply_err(req, 0); }

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept {
  Context& c = Ctx(req);
  try {
    auto listing = std::make_unique<DirListing>();
    index::RecordHolder holder;
    Status s = c.fs->GetAttr(InodeId{ino}, &listing->self, &holder);
    if (s.ok() && listing->self.type != index::EntryType::kDir) {
      s = Status::InvalidArgument("not a directory");
    }
    if (s.ok()) {
      s = c.fs->ReadDir(InodeId{ino}, "", [&](std::string_view name, const EntryRecord& rec) {
        listing->entries.push_back({std::string(name), rec});
        listing->entries.back().rec.target = {};
        return true;
      });
    }
    if (!s.ok()) {
      fuse_reply_err(req, s.code() == Status::Code::kInvalidArgument ? ENOTDIR : ToErrno(s));
      return;
    }
    listing->self.target = {};
    fi->fh = reinterpret_cast<uint64_t>(listing.release());
    fi->keep_cache = 1;
    fi->cache_readdir = 1;
    fuse_reply_open(req, fi);
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
  }
}

void DoReaddir(fuse_req_t req, size_t size, off_t off, fuse_file_info* fi, bool plus) noexcept {
  Context& c = Ctx(req);
  auto* listing = reinterpret_cast<DirListing*>(fi->fh);
  char* buf = ThreadBuffer(size);
  size_t used = 0;
  // Offsets: 0 ".", 1 "..", then 2 + i for entries[i]; an entry's offset
  // field is the offset of the next one.
  size_t total = listing->entries.size() + 2;
  for (size_t i = static_cast<size_t>(off < 0 ? 0 : off); i < total; ++i) {
    const char* name;
    fuse_entry_param e{};
    if (i < 2) {
      name = i == 0 ? "." : "..";
      e.attr.st_ino = i == 0 ? listing->self.inode.value : listing->self.parent.value;
      e.attr.st_mode = S_IFDIR;
    } else {
      const DirListing::Entry& entry = listing->entries[i - 2];
      name = entry.name.c_str();
      if (plus) {
        FillEntry(c, entry.rec, &e);
      } else {
        e.attr.st_ino = entry.rec.inode.value;
        e.attr.st_mode = entry.rec.mode;
      }
    }
    size_t want = plus ? fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
                                                static_cast<off_t>(i + 1))
                       : fuse_add_direntry(req, buf + used, size - used, name, &e.attr,
                                           static_cast<off_t>(i + 1));
    if (want > size - used) break;
    used += want;
  }
  fuse_reply_buf(req, buf, used);
}

void OpReaddir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) noexcept {
  DoReaddir(req, size, off, fi, false);
}

void OpReaddirplus(fuse_req_t req, fuse_ino_t, size_t size, off_t off,
                   fuse_file_info* fi) noexcept {
  DoReaddir(req, size, off, fi, true);
}

void OpReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) noexcept {
  delete reinterpret_cast<DirListing*>(fi->fh);
  fuse_reply_err(req, 0);
}

void OpStatfs(fuse_req_t req, fuse_ino_t) noexcept {
  struct statvfs st;
  Ctx(req).fs->StatFs(&st);
  fuse_reply_statfs(req, &st);
}

// Archives' extended attributes are not shown. ENOSYS (rather than ENODATA
// per call) makes the kernel remember that and answer every later getxattr
// and listxattr itself, with EOPNOTSUPP and no round trip: `ls -l` asks for
// ACLs and capabilities on every file it lists.
void OpGetxattr(fuse_req_t req, fuse_ino_t, const char*, size_t) noexcept {
  fuse_reply_err(req, ENOSYS);
}

void OpListxattr(fuse_req_t req, fuse_ino_t, size_t) noexcept { fuse_reply_err(req, ENOSYS); }

void OpAccess(fuse_req_t req, fuse_ino_t, int mask) noexcept {
  // Permission bits are checked by the kernel (default_permissions).
  fuse_reply_err(req, (mask & W_OK) ? EROFS : 0);
}

// Every write-type operation.
void Erofs(fuse_req_t req) noexcept { fuse_reply_err(req, EROFS); }
void OpSetattr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) noexcept {
  Erofs(req);
}
void OpMknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) noexcept { Erofs(req); }
void OpMkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) noexcept { Erofs(req); }
void OpUnlink(fuse_req_t req, fuse_ino_t, const char*) noexcept { Erofs(req); }
void OpSymlink(fuse_req_t req, const char*, fuse_ino_t, const char*) noexcept { Erofs(req); }
void OpRename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*,
              unsigned int) noexcept {
  Erofs(req);
}
void OpLink(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) noexcept { Erofs(req); }
void OpWrite(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) noexcept {
  Erofs(req);
}
void OpCreate(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) noexcept {
  Erofs(req);
}
void OpSetxattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) noexcept {
  Erofs(req);
}
void OpRemovexattr(fuse_req_t req, fuse_ino_t, const char*) noexcept { Erofs(req); }
void OpFallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) noexcept {
  Erofs(req);
}

void LibfuseLog(enum fuse_log_level level, const char* fmt, va_list ap) {
  char buf[1024];
  int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  if (n < 0) return;
  std::string_view msg(buf, std::min<size_t>(static_cast<size_t>(n), sizeof buf - 1));
  while (!msg.empty() && msg.back() == '\n') msg.remove_suffix(1);
  log::Level l = level <= FUSE_LOG_ERR       ? log::Level::kError
                 : level <= FUSE_LOG_WARNING ? log::Level::kWarning
                 : level <= FUSE_LOG_INFO    ? log::Level::kInfo
                                             : log::Level::kDebug;
  if (log::Enabled(l)) log::Write(l, fmt::format("fuse: {}", msg));
}

std::string EscapeOption(std::string_view s) {
  std::string out;
  for (char ch : s) {
    if (ch == ',' || ch == '\\') out.push_back('\\');
    out.push_back(ch);
  }
  return out;
}

}  // namespace

int ToErrno(const Status& s) {
  switch (s.code()) {
    case Status::Code::kOk: return 0;
    case Status::Code::kNotFound: return ENOENT;
    case Status::Code::kInvalidArgument: return EINVAL;
    default: return EIO;
  }
}

Status ServeFuse(Filesystem* fs, const MountOptions& options, const std::string& mountpoint,
                 const std::string& fsname, const std::function<void()>& on_mounted) {
  fuse_set_log_func(&LibfuseLog);
  fuse_lowlevel_ops ops{};
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetattr;
  ops.readlink = OpReadlink;
  ops.open = OpOpen;
  ops.read = OpRead;
  ops.flush = OpFlush;
  ops.release = OpRelease;
  ops.opendir = OpOpendir;
  ops.readdir = OpReaddir;
  ops.readdirplus = OpReaddirplus;
  ops.releasedir = OpReleasedir;
  ops.statfs = OpStatfs;
  ops.getxattr = OpGetxattr;
  ops.listxattr = OpListxattr;
  ops.access = OpAccess;
  ops.setattr = OpSetattr;
  ops.mknod = OpMknod;
  ops.mkdir = OpMkdir;
  ops.unlink = OpUnlink;
  ops.rmdir = OpUnlink;
  ops.symlink = OpSymlink;
  ops.rename = OpRename;
  ops.link = OpLink;
  ops.write = OpWrite;
  ops.create = OpCreate;
  ops.setxattr = OpSetxattr;
  ops.removexattr = OpRemovexattr;
  ops.fallocate = OpFallocate;

  Context ctx{fs, options};
  std::vector<std::string> arg_store = {
      "shardfs", "-o",
      fmt::format("ro,default_permissions,noatime,subtype=shardfs,fsname={}",
                  EscapeOption(fsname))};
  for (const std::string& a : options.fuse_args) arg_store.push_back(a);
  if (options.debug) arg_store.push_back("-d");
  std::vector<char*> argv;
  for (auto& a : arg_store) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  // Declared before the session so that it is destroyed after it: closing
  // the session's descriptor ends a listing the prefill thread is in.
  std::unique_ptr<DirPrefill> prefill;
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, &ctx);
  fuse_opt_free_args(&args);  // Parsing may have copied them.
  if (!se) return Status::InvalidArgument("cannot create the FUSE session (bad -o option?)");
  std::unique_ptr<fuse_session, decltype(&fuse_session_destroy)> session(se,
                                                                          &fuse_session_destroy);
  if (fuse_set_signal_handlers(se) != 0) {
    return Status::IoError("cannot install signal handlers");
  }
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    return Status::IoError(fmt::format("cannot mount at {}", mountpoint));
  }
  ctx.se = se;
  if (options.prefill_dirs) {
    prefill = std::make_unique<DirPrefill>(&fs->reader(), mountpoint);
    ctx.prefill = prefill.get();
  }
  on_mounted();
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, options.clone_fd ? 1 : 0);
  fuse_loop_cfg_set_max_threads(cfg, options.threads);
  fuse_loop_cfg_set_idle_threads(cfg, std::min(options.idle_threads, options.threads));
  int rc = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  if (rc != 0 && rc != SIGINT && rc != SIGTERM && rc != SIGHUP) {
    return Status::IoError(fmt::format("FUSE session loop ended with {}", rc));
  }
  return Status::Ok();
}

}  // namespace shardfs::mount
