// src/mount/mount_options.h: every -o option into MountOptions, bad values refused
// with a message naming the option, the deprecated aliases, and options
// shardfs does not know passed on to libfuse.
#include "src/mount/mount_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace shardfs::mount {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

MountOptions Parse(std::vector<std::string> lists) {
  MountOptions o;
  Status s = ParseMountOptions(lists, &o);
  EXPECT_TRUE(s.ok()) << s.message();
  return o;
}

// The message of a refused list.
std::string Refused(const std::string& list) {
  MountOptions o;
  Status s = ParseMountOptions({list}, &o);
  EXPECT_FALSE(s.ok()) << list;
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << list;
  return s.message();
}

TEST(MountOptionsTest, NoOptionsKeepTheDefaults) {
  MountOptions d;
  MountOptions o = Parse({});
  EXPECT_EQ(o.entry_timeout, d.entry_timeout);
  EXPECT_EQ(o.threads, d.threads);
  EXPECT_EQ(o.push.sequential_bytes, d.push.sequential_bytes);
  EXPECT_EQ(o.push.shard_readahead, d.push.shard_readahead);
  EXPECT_TRUE(o.reader.preload);
  EXPECT_TRUE(o.prefill_dirs);
  EXPECT_EQ(o.prefill_entries, 0u);  // DefaultPrefillEntries() at mount.
  EXPECT_TRUE(o.push_random_auto);
  EXPECT_THAT(o.fuse_args, IsEmpty());
  EXPECT_THAT(o.warnings, IsEmpty());
}

TEST(MountOptionsTest, EveryOption) {
  MountOptions o =
      Parse({"entry_timeout=2.5,attr_timeout=0,threads=3,idle_threads=2,clone_fd=0,kernel_open=no",
             "splice=off,block_cache=32M,preload_index=0,prefill_dirs=false,push_ahead=1M",
             "prefill_entries=5000",
             "drop_behind=0,push_random=2M,push_threads=5,shard_readahead=0,max_open_shards=7",
             "verify=always,uid=1000,gid=100,umask=027,nonempty,ro"});
  EXPECT_EQ(o.entry_timeout, 2.5);
  EXPECT_EQ(o.attr_timeout, 0);
  EXPECT_EQ(o.threads, 3u);
  EXPECT_EQ(o.idle_threads, 2u);
  EXPECT_FALSE(o.clone_fd);
  EXPECT_FALSE(o.kernel_open);
  EXPECT_FALSE(o.splice);
  EXPECT_EQ(o.reader.block_cache_bytes, size_t{32} << 20);
  EXPECT_EQ(Parse({"block_cache=auto"}).reader.block_cache_bytes, 0u);  // Sized at open.
  EXPECT_FALSE(o.reader.preload);
  EXPECT_FALSE(o.prefill_dirs);
  EXPECT_EQ(o.prefill_entries, 5000u);
  EXPECT_EQ(o.push.sequential_bytes, 1u << 20);
  EXPECT_FALSE(o.push.drop_behind);
  EXPECT_FALSE(o.push_random_auto);
  EXPECT_EQ(o.push.random_bytes, 2u << 20);
  EXPECT_EQ(o.push.threads, 5u);
  EXPECT_EQ(o.push.shard_readahead, 0u);
  EXPECT_EQ(o.fs.max_open_shards, 7u);
  EXPECT_EQ(o.fs.verify, reader::VerifyMode::kAlways);
  EXPECT_EQ(o.fs.uid, 1000);
  EXPECT_EQ(o.fs.gid, 100);
  EXPECT_EQ(o.fs.umask, 027);
  EXPECT_TRUE(o.nonempty);
  EXPECT_FALSE(o.debug);
  // All of them were shardfs' own, ro too.
  EXPECT_THAT(o.fuse_args, IsEmpty());
  EXPECT_THAT(o.warnings, IsEmpty());
}

TEST(MountOptionsTest, BooleansTakeEveryOnAndOffSpelling) {
  for (const char* on : {"1", "yes", "on", "true"}) {
    MountOptions o;
    o.splice = false;
    ASSERT_TRUE(ParseMountOptions({std::string("splice=") + on}, &o).ok()) << on;
    EXPECT_TRUE(o.splice) << on;
  }
  for (const char* off : {"0", "no", "off", "false"}) {
    EXPECT_FALSE(Parse({std::string("splice=") + off}).splice) << off;
  }
}

TEST(MountOptionsTest, VerifyModesAndPushRandomAuto) {
  EXPECT_EQ(Parse({"verify=off"}).fs.verify, reader::VerifyMode::kOff);
  EXPECT_EQ(Parse({"verify=first"}).fs.verify, reader::VerifyMode::kFirst);
  MountOptions o = Parse({"push_random=0,push_random=auto"});
  EXPECT_TRUE(o.push_random_auto);
  o = Parse({"push_random=0"});
  EXPECT_FALSE(o.push_random_auto);
  EXPECT_EQ(o.push.random_bytes, 0u);
}

TEST(MountOptionsTest, ViewAndRankGoToTheIndexReadersOptions) {
  MountOptions d = Parse({});
  EXPECT_EQ(d.reader.view, "");
  EXPECT_EQ(d.reader.world, 0u);
  EXPECT_FALSE(d.reader.rank_keep_dirs);
  MountOptions o = Parse({"view=train@3,rank=1,world=4,seed=7,rank_dirs=keep"});
  EXPECT_EQ(o.reader.view, "train@3");
  EXPECT_EQ(o.reader.rank, 1u);
  EXPECT_EQ(o.reader.world, 4u);
  EXPECT_EQ(o.reader.seed, 7u);
  EXPECT_TRUE(o.reader.rank_keep_dirs);
  EXPECT_FALSE(Parse({"rank=0,world=2,rank_dirs=prune"}).reader.rank_keep_dirs);
  EXPECT_EQ(Refused("rank=1"), "-o rank=K and -o world=N go together");
  EXPECT_EQ(Refused("world=2"), "-o rank=K and -o world=N go together");
  EXPECT_EQ(Refused("rank=2,world=2"), "-o rank=2: expected a rank below world=2");
  EXPECT_EQ(Refused("rank_dirs=some"), "-o rank_dirs=some: expected prune or keep");
}

TEST(MountOptionsTest, LaterValuesWin) {
  MountOptions o = Parse({"threads=2", "threads=9"});
  EXPECT_EQ(o.threads, 9u);
}

TEST(MountOptionsTest, DeprecatedAliasesSetTheNewOptionsAndSaySo) {
  MountOptions o = Parse({"readahead=1M,prefetch_index=0"});
  EXPECT_EQ(o.push.shard_readahead, 1u << 20);
  EXPECT_FALSE(o.reader.preload);
  EXPECT_THAT(o.warnings, ElementsAre("-o readahead is deprecated; use shard_readahead",
                                      "-o prefetch_index is deprecated; use preload_index"));
  EXPECT_THAT(o.fuse_args, IsEmpty());
  // Bad values are refused under the name given.
  EXPECT_THAT(Refused("readahead=lots"), HasSubstr("-o readahead=lots: expected a size"));
  EXPECT_THAT(Refused("prefetch_index=2"), HasSubstr("-o prefetch_index=2: expected 0 or 1"));
}

TEST(MountOptionsTest, BadValuesAreRefusedWithWhatWasExpected) {
  struct Case {
    const char* list;
    const char* expected;
  };
  for (const Case& c : std::vector<Case>{
           {"entry_timeout=-1", "-o entry_timeout=-1: expected seconds"},
           {"attr_timeout=", "-o attr_timeout=: expected seconds"},
           {"attr_timeout=1s", "-o attr_timeout=1s: expected seconds"},
           {"threads=0", "-o threads=0: expected a thread count 1..1024"},
           {"threads=1025", "-o threads=1025: expected a thread count 1..1024"},
           {"idle_threads=x", "-o idle_threads=x: expected a thread count 1..1024"},
           {"clone_fd=2", "-o clone_fd=2: expected 0 or 1"},
           {"kernel_open=maybe", "-o kernel_open=maybe: expected 0 or 1"},
           {"splice=", "-o splice=: expected 0 or 1"},
           {"preload_index=yes please", "-o preload_index=yes please: expected 0 or 1"},
           {"prefill_dirs=-1", "-o prefill_dirs=-1: expected 0 or 1"},
           {"prefill_entries=1.5",
            "-o prefill_entries=1.5: expected a whole number of entries, "
            "or 0 for the default"},
           {"prefill_entries=1e30",
            "-o prefill_entries=1e30: expected a whole number of entries, "
            "or 0 for the default"},
           {"push_ahead=big", "-o push_ahead=big: expected a size such as 4M, or 0"},
           {"drop_behind=on2", "-o drop_behind=on2: expected 0 or 1"},
           {"push_random=sometimes",
            "-o push_random=sometimes: expected a size such as 1M, 0, "
            "or auto"},
           {"push_threads=65", "-o push_threads=65: expected a thread count 1..64"},
           {"block_cache=16Q", "-o block_cache=16Q: expected a size such as 16M, or auto"},
           {"shard_readahead=-4M", "-o shard_readahead=-4M: expected a size such as 8M, or 0"},
           {"max_open_shards=0", "-o max_open_shards=0: expected a count 1..1048576"},
           {"verify=sometimes", "-o verify=sometimes: expected off, first or always"},
           {"uid=-1", "-o uid=-1: expected a number"},
           {"gid=root", "-o gid=root: expected a number"},
           {"umask=8", "-o umask=8: expected an octal mask"},
           {"umask=17777", "-o umask=17777: expected an octal mask"},
           {"rw", "-o rw: shardfs is read-only"},
       }) {
    EXPECT_EQ(Refused(c.list), c.expected);
  }
}

TEST(MountOptionsTest, TheFirstBadOptionIsReported) {
  EXPECT_EQ(Refused("threads=2,splice=7,verify=bad"), "-o splice=7: expected 0 or 1");
}

TEST(MountOptionsTest, UnknownOptionsArePassedOnToLibfuse) {
  MountOptions o = Parse({"allow_other,threads=4,max_read=131072", "fsname=data"});
  EXPECT_EQ(o.threads, 4u);
  EXPECT_THAT(o.fuse_args, ElementsAre("-o", "allow_other,max_read=131072,fsname=data"));
}

// `shardfs mount --help` lists MountOptionDocs(), and the parser takes those
// names and no others. Each listed option, with a value it accepts, is taken
// (not passed on to libfuse); with a bad value it is refused by name, so the
// parser itself knows it. An option added to the parser but not to the list
// is passed on to libfuse, and its own test fails.
TEST(MountOptionsTest, EveryListedOptionIsParsed) {
  // Per option: a value it takes and one it refuses ("" for a flag: none).
  const std::map<std::string, std::pair<std::string, std::string>> kValues = {
      {"kernel", {"auto", "sideways"}},
      {"kernel_devices", {"loop", "disk"}},
      {"kernel_directio", {"", ""}},
      {"unsafe_shard_paths", {"", ""}},
      {"entry_timeout", {"2", "-1"}},
      {"attr_timeout", {"0.5", "soon"}},
      {"threads", {"4", "0"}},
      {"idle_threads", {"2", "0"}},
      {"clone_fd", {"0", "2"}},
      {"kernel_open", {"1", "maybe"}},
      {"splice", {"off", "7"}},
      {"block_cache", {"auto", "lots"}},
      {"preload_index", {"0", "x"}},
      {"max_open_shards", {"7", "0"}},
      {"shard_readahead", {"1M", "far"}},
      {"push_ahead", {"0", "-"}},
      {"push_random", {"auto", "some"}},
      {"push_threads", {"3", "65"}},
      {"drop_behind", {"0", "2"}},
      {"prefill_dirs", {"1", "2"}},
      {"prefill_entries", {"5000", "1.5"}},
      {"verify", {"first", "twice"}},
      {"view", {"clean@2", "a@b@c"}},
      {"rank", {"1,world=2", "x"}},
      {"world", {"2,rank=1", "0"}},
      {"seed", {"9", "-3"}},
      {"rank_dirs", {"keep", "drop"}},
      {"max_index_size", {"1G", "0"}},
      {"cache_dir", {"/x", ""}},
      {"storage", {"network", "cloud"}},
      {"cache_size", {"2G", "0"}},
      {"decode_cache", {"0", "big"}},
      {"chunk_size", {"1M", "1"}},
      {"fetch_threads", {"2", "0"}},
      {"fetch_ahead", {"0", "2000"}},
      {"retry_budget", {"1m", "0"}},
      {"connect_timeout", {"500ms", "never"}},
      {"stall_timeout", {"3s", "0"}},
      {"ca_file", {"/ca.pem", ""}},
      {"trust_responses_without_etag", {"1", "maybe"}},
      {"uid", {"1000", "-1"}},
      {"gid", {"100", "root"}},
      {"umask", {"027", "9"}},
      {"nonempty", {"", ""}},
      {"ro", {"", ""}},
      {"debug", {"", ""}},
      {"prefetch_index", {"1", "2"}},
      {"readahead", {"0", "x"}},
  };
  std::set<std::string> listed;
  for (const MountOptionDoc& d : MountOptionDocs()) {
    const std::string name = d.name;
    EXPECT_TRUE(listed.insert(name).second) << name << " is listed twice";
    EXPECT_STRNE(d.help, "") << name;
    auto it = kValues.find(name);
    ASSERT_NE(it, kValues.end()) << "-o " << name << " is listed: give it values in this test";
    const auto& [good, bad] = it->second;
    MountOptions o = Parse({good.empty() ? name : name + "=" + good});
    if (name == "debug") {
      EXPECT_TRUE(o.debug);
    } else {
      EXPECT_THAT(o.fuse_args, IsEmpty()) << name << " was passed on to libfuse";
    }
    if (!bad.empty()) {
      EXPECT_THAT(Refused(name + "=" + bad), HasSubstr("-o " + name + "=")) << name;
    }
  }
  for (const auto& [name, values] : kValues) {
    EXPECT_TRUE(listed.count(name)) << "-o " << name << " is not in MountOptionDocs()";
  }
}

TEST(MountOptionsTest, DebugIsOursAndLibfuses) {
  MountOptions o = Parse({"debug"});
  EXPECT_TRUE(o.debug);
  EXPECT_THAT(o.fuse_args, ElementsAre("-o", "debug"));
}

TEST(MountOptionsTest, KernelMountOptions) {
  EXPECT_EQ(Parse({}).kernel, KernelMode::kOff);
  EXPECT_EQ(Parse({"kernel"}).kernel, KernelMode::kOn);
  EXPECT_EQ(Parse({"kernel=on"}).kernel, KernelMode::kOn);
  EXPECT_EQ(Parse({"kernel=auto"}).kernel, KernelMode::kAuto);
  EXPECT_EQ(Parse({"kernel,kernel=off"}).kernel, KernelMode::kOff);
  EXPECT_THAT(Refused("kernel=maybe"), HasSubstr("on, auto or off"));
  EXPECT_EQ(Parse({}).kernel_devices, KernelDevices::kAuto);
  EXPECT_EQ(Parse({"kernel_devices=loop"}).kernel_devices, KernelDevices::kLoop);
  EXPECT_EQ(Parse({"kernel_devices=files"}).kernel_devices, KernelDevices::kFiles);
  EXPECT_THAT(Refused("kernel_devices=nbd"), HasSubstr("auto, files or loop"));
  EXPECT_FALSE(Parse({}).kernel_directio);
  EXPECT_TRUE(Parse({"kernel_directio"}).kernel_directio);
  EXPECT_FALSE(Parse({}).unsafe_shard_paths);
  EXPECT_TRUE(Parse({"unsafe_shard_paths"}).unsafe_shard_paths);
  EXPECT_EQ(Parse({"verify=first"}).fs.verify, reader::VerifyMode::kFirst);
  // None of them reaches libfuse.
  EXPECT_THAT(
      Parse({"kernel=auto,kernel_devices=loop,kernel_directio,unsafe_shard_paths"}).fuse_args,
      IsEmpty());
}

TEST(MountOptionsTest, DecodeCacheTakesASizeAndZero) {
  EXPECT_EQ(Parse({}).decode_cache, MountOptions::kDefaultDecodeCache);
  EXPECT_EQ(Parse({"decode_cache=64M"}).decode_cache, uint64_t{64} << 20);
  EXPECT_EQ(Parse({"decode_cache=0"}).decode_cache, 0u);
  MountOptions o;
  Status s = ParseMountOptions({"decode_cache=lots"}, &o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("decode_cache"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shardfs::mount
