#include "src/mount/fuse_adapter.h"

#define FUSE_USE_VERSION 314
#include <fcntl.h>
#include <fuse_lowlevel.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "src/mount/dir_prefill.h"
#include "src/mount/fuse_reply.h"
#include "src/mount/open_dirs.h"
#include "src/mount/push_ahead.h"
#include "src/mount/read_ahead.h"
#include "src/mount/signal_stop.h"

namespace shardfs::mount {

using mount::AttrPolicy;
using mount::DefaultPrefillEntries;
using mount::DirPrefill;
using mount::MountOptions;
using mount::PushAhead;
using mount::PushBytes;
using mount::ReadNote;
using mount::SignalStop;
using reader::DirCursor;
using reader::EntryRecord;
using reader::Filesystem;
using reader::InodeId;
using reader::ReadReply;

namespace {

struct Context {
  Filesystem* fs;
  MountOptions options;
  OpenDirs dirs{};           // Directories open in the kernel.
  bool kernel_open = false;  // Set in init when the kernel can open alone.
  bool splice = false;
  fuse_session* se = nullptr;
  PushAhead* push = nullptr;
  DirPrefill* prefill = nullptr;  // Null with -o prefill_dirs=0.
  AttrPolicy* attrs = nullptr;    // Which listings carry files' attributes.
  // Armed by INIT: the first request after it raises the mount's readahead.
  mount::MountReadAheadOnce readahead{};
};

Context& Ctx(fuse_req_t req) { return *static_cast<Context*>(fuse_req_userdata(req)); }

// Replies with `length` bytes of `fd` at `pos`, spliced into the kernel
// through the worker's ReplyPipe (src/mount/fuse_reply.h). Returns false, having
// sent nothing, if the file did not give them all.
bool ReplyFromFd(fuse_req_t req, int fd, uint64_t pos, size_t length, int* replied) noexcept {
  ReplyPipe& pipe = WorkerPipe();
  if (!pipe.Fill(fd, pos, length)) return false;
  fuse_bufvec buf{};
  buf.count = 1;
  buf.buf[0].size = length;
  buf.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_RETRY);
  buf.buf[0].fd = pipe.read_fd();
  *replied = fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
  pipe.AfterReply();
  return true;
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
  // a walker that lists a directory before it stats the entries (du, ls -l,
  // os.walk) then needs no LOOKUP per entry. Whether a reply carries files'
  // attributes is the daemon's choice per reply (AttrPolicy). The "auto"
  // mode would drop to plain readdir after the first chunk of a large
  // directory.
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  if (conn->capable & FUSE_CAP_CACHE_SYMLINKS) conn->want |= FUSE_CAP_CACHE_SYMLINKS;
  // The content never changes: no need to drop cached pages on mtime checks.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  conn->time_gran = 1;
  // max_readahead stays the kernel's offer: the kernel takes the smaller of
  // it and its own window, so INIT can only lower the window. It is raised
  // once INIT is done (mount::MountReadAheadOnce).
  c->readahead.Arm();
  log::Debug("init: kernel_open={} splice={} max_readahead={} max_write={}", c->kernel_open,
             c->splice, conn->max_readahead, conn->max_write);
}

// A file of `dir` was looked up: a program wants files' attributes there.
void NoteFileLookup(Context& c, InodeId dir) noexcept {
  if (c.attrs->Marked(dir)) return;
  log::Debug("attrs: directory inode {}: first file lookup (listed names-only: {})", dir.value,
             c.attrs->ListedNamesOnly(dir));
  EntryRecord self;
  index::RecordHolder holder;
  // Without its parent, the directory alone is marked.
  InodeId parent = dir;
  if (c.fs->GetAttr(dir, &self, &holder).ok()) parent = self.parent;
  c.attrs->NoteFileLookup(dir, parent);
  // The kernel has the rest of its names without inodes: list it again with
  // attributes now rather than after more lookups (a loader that listed the
  // tree first now opens its files; push-ahead needs their inodes).
  if (c.prefill && c.attrs->ListedNamesOnly(dir)) c.prefill->ListNow(dir);
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept {
  Context& c = Ctx(req);
  c.readahead.RaiseIfArmed();
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
    // Before the reply: the file's READ, and the push after it, may follow
    // at once, and the push needs the prefill under way (see StorePages).
    if (rec.type != index::EntryType::kDir) NoteFileLookup(c, InodeId{parent});
    FillEntry(c, rec, &e);
    fuse_reply_entry(req, &e);
  }
  if (c.prefill) c.prefill->NoteMiss(InodeId{parent});
}

// Inodes are assigned, not allocated: nothing to free. The kernel sends
// FORGET when it evicts an inode, and the inode's pages go with it: push-ahead
// may store the file again (a later epoch after the dentries were dropped).
void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t) noexcept {
  Ctx(req).push->Forgotten(InodeId{ino});
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) noexcept {
  PushAhead* push = Ctx(req).push;
  for (size_t i = 0; i < count; ++i) push->Forgotten(InodeId{forgets[i].ino});
  fuse_reply_none(req);
}

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) noexcept {
  Context& c = Ctx(req);
  c.readahead.RaiseIfArmed();
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
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
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

// Read, reply, tell push-ahead: Filesystem::Read decides how the bytes are
// read; this only sends them (a splice, or the buffer).
void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) noexcept {
  Context& c = Ctx(req);
  c.readahead.RaiseIfArmed();
  const InodeId inode{ino};
  char* buf = ThreadBuffer(size);
  if (off < 0 || !buf) {
    fuse_reply_err(req, off < 0 ? EINVAL : ENOMEM);
    return;
  }
  const uint64_t offset = static_cast<uint64_t>(off);
  Result<ReadReply> r = c.fs->Read(inode, offset, size, buf, c.splice);
  if (!r.ok()) {
    fuse_reply_err(req, ToErrno(r.status()));
    return;
  }
  if (r->length == 0) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  // Before the reply: the file counts as read before its reader can see it.
  const ReadNote note = c.push->NoteRead(inode, r->push);
  int replied = 0;
  if (!r->spliced() || !ReplyFromFd(req, r->fd, r->pos, r->length, &replied)) {
    if (r->spliced()) {
      // The descriptor gave fewer bytes: read into buf, which reports the
      // error (and marks the shard) or has them.
      r = c.fs->Read(inode, offset, size, buf, false);
      if (!r.ok()) {
        fuse_reply_err(req, ToErrno(r.status()));
        return;
      }
    }
    replied = fuse_reply_buf(req, buf, r->length);
  }
  // Hands work to the pushers; never waits for them.
  c.push->AfterReply(inode, r->push, note, replied == 0);
}

void OpFlush(fuse_req_t req, fuse_ino_t, fuse_file_info*) noexcept {
  // ENOSYS once and the kernel stops sending FLUSH.
  fuse_reply_err(req, ENOSYS);
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info*) noexcept { fuse_reply_err(req, 0); }

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept {
  Context& c = Ctx(req);
  c.readahead.RaiseIfArmed();
  Result<DirCursor> cursor = Status::IoError("out of memory");
  try {
    cursor = DirCursor::Open(*c.fs, InodeId{ino});
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  if (!cursor.ok()) {
    fuse_reply_err(req, ToErrno(cursor.status()));
    return;
  }
  DirHandle* handle = c.dirs.Open(std::move(cursor).value());
  if (!handle) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  fi->fh = reinterpret_cast<uint64_t>(handle);
  fi->keep_cache = 1;
  // The prefill's listing exists to give the kernel inodes and dentries: it
  // must reach the daemon as READDIRPLUS with attributes, not be served from
  // the kernel's readdir cache (which holds names only).
  handle->prefill = c.prefill && c.prefill->IsListingThread(fuse_req_ctx(req)->pid);
  fi->cache_readdir = handle->prefill ? 0 : 1;
  if (fuse_reply_open(req, fi) != 0) c.dirs.Release(handle);  // The kernel will not release it.
}

void DoReaddir(fuse_req_t req, size_t size, off_t off, fuse_file_info* fi, bool plus) noexcept {
  Context& c = Ctx(req);
  auto* handle = reinterpret_cast<DirHandle*>(fi->fh);
  char* buf = ThreadBuffer(size);
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  size_t used = 0;
  Status s;
  try {
    std::lock_guard<std::mutex> lock(handle->mu);
    // Decided per reply, so a stat that comes in the middle of a large
    // directory gives the rest of its listing attributes.
    const bool file_attrs =
        plus &&
        (handle->prefill || c.attrs->WantAttrs(handle->cursor.inode(), handle->cursor.parent()));
    if (plus && !file_attrs) c.attrs->NoteNamesOnly(handle->cursor.inode());
    s = handle->cursor.Read(
        *c.fs, static_cast<uint64_t>(off < 0 ? 0 : off),
        [&](uint64_t next_off, std::string_view name, const EntryRecord& rec) {
          // libfuse wants a NUL-terminated name.
          char cname[index::kMaxNameLength + 1];
          size_t n = std::min(name.size(), index::kMaxNameLength);
          std::memcpy(cname, name.data(), n);
          cname[n] = '\0';
          fuse_entry_param e{};
          bool dots = name == "." || name == "..";  // Children never have these names.
          if (plus && !dots && (file_attrs || rec.type == index::EntryType::kDir)) {
            FillEntry(c, rec, &e);
          } else {
            // Node id 0: the kernel makes no inode or dentry for the entry
            // (names and types only; a stat of it is a LOOKUP).
            e.attr.st_ino = rec.inode.value;
            e.attr.st_mode = rec.mode;
          }
          size_t want = plus ? fuse_add_direntry_plus(req, buf + used, size - used, cname, &e,
                                                      static_cast<off_t>(next_off))
                             : fuse_add_direntry(req, buf + used, size - used, cname, &e.attr,
                                                 static_cast<off_t>(next_off));
          if (want > size - used) return false;
          used += want;
          return true;
        });
  } catch (const std::bad_alloc&) {
    s = Status::IoError("out of memory");
    if (used == 0) {
      fuse_reply_err(req, ENOMEM);
      return;
    }
  }
  if (!s.ok() && used == 0) {
    fuse_reply_err(req, ToErrno(s));
    return;
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
  Ctx(req).dirs.Release(reinterpret_cast<DirHandle*>(fi->fh));
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

// Every operation shardfs answers; the write-type ones with EROFS.
// Ioctls are not served. The kernel forwards one (TCGETS) for every open()
// of Python before 3.14, which asks isatty(), and never remembers the
// answer: fuse_do_ioctl (fs/fuse/ioctl.c) sends every ioctl, and
// fuse_send_ioctl turns an ENOSYS into ENOTTY without a flag, unlike
// getxattr's; no INIT or FOPEN flag skips it (Linux 6.1 to 6.18). Counted,
// so that stats show what each file costs; shardfs.fastopen (the Python
// package) keeps Python's open() from asking.
void OpIoctl(fuse_req_t req, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned,
             const void*, size_t, size_t) noexcept {
  fuse_reply_err(req, ENOTTY);
}

// An op that counts its request (reader::KernelRequests) before it runs.
template <reader::KernelOp kOp, auto kFn>
struct Counted;
template <reader::KernelOp kOp, typename... Args, void (*kFn)(fuse_req_t, Args...) noexcept>
struct Counted<kOp, kFn> {
  static void Op(fuse_req_t req, Args... args) noexcept {
    Ctx(req).fs->kernel_requests().Count(kOp);
    kFn(req, args...);
  }
};

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops{};
  using K = reader::KernelOp;
  ops.init = OpInit;
  ops.lookup = Counted<K::kLookup, OpLookup>::Op;
  ops.forget = Counted<K::kForget, OpForget>::Op;
  ops.forget_multi = Counted<K::kForget, OpForgetMulti>::Op;
  ops.getattr = Counted<K::kGetattr, OpGetattr>::Op;
  ops.readlink = Counted<K::kReadlink, OpReadlink>::Op;
  ops.open = Counted<K::kOpen, OpOpen>::Op;
  ops.read = Counted<K::kRead, OpRead>::Op;
  ops.flush = Counted<K::kFlush, OpFlush>::Op;
  ops.release = Counted<K::kRelease, OpRelease>::Op;
  ops.opendir = Counted<K::kOpendir, OpOpendir>::Op;
  ops.readdir = Counted<K::kReaddir, OpReaddir>::Op;
  ops.readdirplus = Counted<K::kReaddirplus, OpReaddirplus>::Op;
  ops.releasedir = Counted<K::kReleasedir, OpReleasedir>::Op;
  ops.statfs = Counted<K::kStatfs, OpStatfs>::Op;
  ops.getxattr = Counted<K::kXattr, OpGetxattr>::Op;
  ops.listxattr = Counted<K::kXattr, OpListxattr>::Op;
  ops.access = Counted<K::kAccess, OpAccess>::Op;
  ops.setattr = Counted<K::kRefused, OpSetattr>::Op;
  ops.mknod = Counted<K::kRefused, OpMknod>::Op;
  ops.mkdir = Counted<K::kRefused, OpMkdir>::Op;
  ops.unlink = Counted<K::kRefused, OpUnlink>::Op;
  ops.rmdir = Counted<K::kRefused, OpUnlink>::Op;
  ops.symlink = Counted<K::kRefused, OpSymlink>::Op;
  ops.rename = Counted<K::kRefused, OpRename>::Op;
  ops.link = Counted<K::kRefused, OpLink>::Op;
  ops.write = Counted<K::kRefused, OpWrite>::Op;
  ops.create = Counted<K::kRefused, OpCreate>::Op;
  ops.setxattr = Counted<K::kRefused, OpSetxattr>::Op;
  ops.removexattr = Counted<K::kRefused, OpRemovexattr>::Op;
  ops.fallocate = Counted<K::kRefused, OpFallocate>::Op;
  ops.ioctl = Counted<K::kIoctl, OpIoctl>::Op;
  return ops;
}

// The push's Store: the file's content into the kernel's page cache, from
// the daemon's memory or straight from the shard's descriptor (libfuse
// splices it when the kernel allows, else reads it into a buffer).
int StorePages(const Context& c, InodeId inode, const PushBytes& bytes,
               const std::function<bool()>& still_wanted) {
  // A fresh bufvec per call: libfuse consumes the one it is given.
  auto store = [&] {
    fuse_bufvec bv{};
    bv.count = 1;
    bv.buf[0].size = bytes.size;
    if (bytes.data != nullptr) {
      bv.buf[0].mem = const_cast<char*>(bytes.data);
    } else {
      bv.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      bv.buf[0].fd = bytes.fd;
      bv.buf[0].pos = static_cast<off_t>(bytes.pos);
    }
    return fuse_lowlevel_notify_store(c.se, inode.value, 0, &bv, fuse_buf_copy_flags{});
  };
  int rc = store();
  if (rc != -ENOENT || !c.prefill) return rc;
  // No inode in the kernel: its directory was listed names-only. If the
  // prefill is listing it again with attributes, store once that is done.
  EntryRecord rec;
  index::RecordHolder holder;
  if (!c.fs->GetAttr(inode, &rec, &holder).ok()) return rc;
  constexpr int kWaitMs = 1000;
  if (!c.prefill->WaitListed(rec.parent, kWaitMs)) {
    log::Debug(
        "push: inode {} is not in the kernel, and no listing of directory inode {} "
        "gave it one",
        inode.value, rec.parent.value);
    return rc;
  }
  if (!still_wanted()) return -ECANCELED;
  return store();
}

// The argv libfuse's session parses: shardfs' fixed mount options, then the
// -o options shardfs passed on.
std::vector<std::string> SessionArgs(const MountOptions& options, const std::string& fsname) {
  std::vector<std::string> args = {
      "shardfs", "-o",
      fmt::format("ro,default_permissions,noatime,subtype=shardfs,fsname={}",
                  EscapeOption(fsname))};
  for (const std::string& a : options.fuse_args) args.push_back(a);
  if (options.debug) args.push_back("-d");
  return args;
}

// Serves until an unmount or a signal; returns the loop's result.
int RunLoop(fuse_session* se, const MountOptions& options, SignalStop& signals, PushAhead& push) {
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, options.clone_fd ? 1 : 0);
  fuse_loop_cfg_set_max_threads(cfg, options.threads);
  // Every worker kept by default: libfuse ends a worker that finds more
  // than this many idle and starts one for a request that finds none, so
  // fewer kept than run at once starts threads for every burst of requests.
  const unsigned idle = options.idle_threads == 0 ? options.threads : options.idle_threads;
  fuse_loop_cfg_set_idle_threads(cfg, std::min(idle, options.threads));
  // A signal stops the pushers while the workers still answer READs, then
  // ends the loop (see src/mount/signal_stop.h).
  signals.Watch([&push] { push.Stop(); }, [se] { fuse_session_exit(se); });
  int rc = fuse_session_loop_mt(se, cfg);
  signals.LoopEnded();
  fuse_loop_cfg_destroy(cfg);
  return rc;
}

}  // namespace

Status ServeFuse(Filesystem* fs, const MountOptions& options, const std::string& mountpoint,
                 const std::string& fsname, const std::function<Status()>& on_mounted) {
  fuse_set_log_func(&LibfuseLog);
  const fuse_lowlevel_ops ops = MakeOps();
  Context ctx{fs, options};
  mount::PushOptions push_options = options.push;
  push_options.store_from_fd = options.splice;
  PushAhead push(
      fs, push_options,
      [&ctx](InodeId inode, const PushBytes& bytes, const std::function<bool()>& still_wanted) {
        return StorePages(ctx, inode, bytes, still_wanted);
      });
  ctx.push = &push;
  AttrPolicy attrs(fs->reader().max_inode());
  ctx.attrs = &attrs;
  std::vector<std::string> arg_store = SessionArgs(options, fsname);
  std::vector<char*> argv;
  for (auto& a : arg_store) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  // Declared before the session so that it is destroyed after it: closing
  // the session's descriptor ends a listing the prefill thread is in.
  std::unique_ptr<DirPrefill> prefill;
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, &ctx);
  fuse_opt_free_args(&args);  // Parsing may have copied them.
  if (!se) return Status::InvalidArgument("cannot create the FUSE session (bad -o option?)");
  std::unique_ptr<fuse_session, decltype(&fuse_session_destroy)> session(se, &fuse_session_destroy);
  SHARDFS_ASSIGN_OR_RETURN(SignalStop signals, SignalStop::Install());
  if (char* real = ::realpath(mountpoint.c_str(), nullptr)) {
    ctx.readahead.set_mount_path(real);
    std::free(real);
  } else {
    ctx.readahead.set_mount_path(mountpoint);
  }
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    return Status::IoError(fmt::format("cannot mount at {}", mountpoint));
  }
  ctx.se = se;
  if (options.prefill_dirs) {
    prefill = std::make_unique<DirPrefill>(
        &fs->reader(), mountpoint,
        options.prefill_entries != 0 ? options.prefill_entries : DefaultPrefillEntries());
    ctx.prefill = prefill.get();
  }
  push.Start();
  if (Status s = on_mounted(); !s.ok()) {
    push.Stop();
    fuse_session_unmount(se);
    return s;
  }
  int rc = RunLoop(se, options, signals, push);
  ctx.dirs.FreeAll();  // No request runs any more.
  // Ended by an unmount: the connection is gone, so no store can be waiting.
  push.Stop();
  push.LogSummary();
  fuse_session_unmount(se);
  if (rc != 0 && rc != SIGINT && rc != SIGTERM && rc != SIGHUP) {
    return Status::IoError(fmt::format("FUSE session loop ended with {}", rc));
  }
  return Status::Ok();
}

}  // namespace shardfs::mount
