// Temporary directories a command makes beside its output while it writes
// it (a build's spill files, an index before its publish): their names,
// their removal when a signal ends the process, and telling which ones a
// process that is gone left behind.
//
// Names. OUT.tmp-HOST-PID-RANDOM: HOST this host's name (TempHostName),
// PID the maker's process id, RANDOM 8 hex digits. The host makes the PID
// mean something: a directory on a shared filesystem made by another host
// is never taken for one whose process is gone.
//
// Signals. The first MakeTempDir installs handlers for SIGINT, SIGTERM and
// SIGHUP, each only where its disposition is still the default (a program
// that handles or ignores one keeps it). The handler only writes the
// signal's number to a pipe (async-signal-safe); a thread waiting on the
// pipe removes every registered directory (its entries, never descending
// into a subdirectory, then the directory itself), restores the default
// disposition and raises the signal again, so that the process ends by it as
// it would have. From then on no directory is made (MakeTempDir blocks).
// In a child of fork() the handler raises the signal at once.
#ifndef SHARDFS_BASE_TEMP_DIRS_H_
#define SHARDFS_BASE_TEMP_DIRS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace shardfs {

// This host's name as temporary directories carry it: gethostname's, with
// characters other than [A-Za-z0-9._-] replaced by '_' ("unknown-host" if
// there is none).
const std::string& TempHostName();

// A fresh name for a temporary directory beside `out` (a path without a
// trailing '/'): `out`.tmp-HOST-PID-RANDOM, this process's.
std::string TempPathBeside(std::string_view out);

// What the name of a temporary directory says about its maker.
struct TempDirMaker {
  std::string host;
  pid_t pid = 0;
};

// Parses `name` (an entry of the output's directory) as a name
// TempPathBeside gives beside an output named `out_name`; nullopt if it is
// not one (another output's, an older name without a host, a ".old" aside).
std::optional<TempDirMaker> ParseTempDirName(std::string_view name, std::string_view out_name);

// True if no process `pid` exists here: kill(pid, 0) fails with ESRCH (a
// process of another user exists: EPERM).
bool ProcessGone(pid_t pid);

// Makes the directory `path` (mkdir with `mode`) and registers it for
// removal if a signal ends the process (see above). IoError naming `path`.
Status MakeTempDir(const std::string& path, mode_t mode = 0777);

// Unregisters `path`: call once it is removed, or before renaming it into
// place. A signal in between leaves it, for ParseTempDirName to recognise.
void ForgetTempDir(const std::string& path);

// Returns at once unless a signal's cleanup has begun; then waits for it to
// end the process. For main(): a command that failed because its temporary
// directory was removed under it ends by the signal, not by exit status 1.
void AwaitSignalCleanup();

}  // namespace shardfs

#endif  // SHARDFS_BASE_TEMP_DIRS_H_
