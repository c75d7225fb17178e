// SPDX-License-Identifier: MIT
// ferryd's reading of NVIDIA's MPS processes, on /proc trees made here: the
// per-user control daemon (no -M) and another user's server are told apart
// from the multi-user server and from nothing to see.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "device/mps.hpp"

using ferry::ferryd::mps_user_warning;
namespace fs = std::filesystem;

namespace {

struct FakeProc {
  fs::path root;
  FakeProc() {
    char tmpl[] = "/tmp/ferry-proc-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    root = tmpl;
  }
  ~FakeProc() { fs::remove_all(root); }
  // argv: NUL-separated, as /proc/<pid>/cmdline.
  void add(int pid, const std::string& comm, const std::string& argv, unsigned uid) {
    const fs::path d = root / std::to_string(pid);
    fs::create_directories(d);
    std::ofstream(d / "comm") << comm << "\n";
    std::ofstream(d / "cmdline", std::ios::binary) << argv;
    std::ofstream(d / "status") << "Name:\t" << comm << "\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t" << uid << "\t"
                                << uid << "\t" << uid << "\t" << uid << "\nGid:\t0\t0\t0\t0\n";
  }
};

const std::string control_per_user("nvidia-cuda-mps-control\0-d\0", 27);
const std::string control_multi("/usr/local/nvidia/bin/nvidia-cuda-mps-control\0-d\0-M\0", 52);
const std::string server("nvidia-cuda-mps-server\0", 23);

}  // namespace

TEST_CASE("no MPS process visible: nothing to say") {
  FakeProc p;
  p.add(1, "systemd", std::string("/sbin/init\0", 11), 0);
  CHECK(mps_user_warning(p.root, 998).empty());
  CHECK(mps_user_warning("/nonexistent-proc", 998).empty());
}

TEST_CASE("the multi-user server (-M) serves every user: nothing to say") {
  FakeProc p;
  p.add(100, "nvidia-cuda-mps", control_multi, 0);
  p.add(200, "nvidia-cuda-mps", server, 0);
  CHECK(mps_user_warning(p.root, 998).empty());
}

TEST_CASE("a per-user control daemon: other users' clients would queue behind ferryd") {
  FakeProc p;
  p.add(100, "nvidia-cuda-mps", control_per_user, 0);
  const std::string w = mps_user_warning(p.root, 998);
  CHECK_THAT(w, Catch::Contains("pid 100"));
  CHECK_THAT(w, Catch::Contains("no -M"));
  CHECK_THAT(w, Catch::Contains("uid 998"));
  CHECK_THAT(w, Catch::Contains("nvidia-cuda-mps-control -d -M"));
  // ferryd's own server running: still per user, still the same advice.
  p.add(300, "nvidia-cuda-mps", server, 998);
  CHECK_THAT(mps_user_warning(p.root, 998), Catch::Contains("will wait behind ferryd's MPS server"));
}

TEST_CASE("a per-user control daemon serving another uid: ferryd's context would wait") {
  FakeProc p;
  p.add(100, "nvidia-cuda-mps", control_per_user, 0);
  p.add(4242, "nvidia-cuda-mps", server, 0);
  const std::string w = mps_user_warning(p.root, 998);
  CHECK_THAT(w, Catch::Contains("serves uid 0 now (server pid 4242)"));
  CHECK_THAT(w, Catch::Contains("waits until that server exits"));
  CHECK_THAT(w, Catch::Contains("-d -M"));
}

TEST_CASE("malformed /proc entries are skipped, not trusted") {
  FakeProc p;
  p.add(100, "nvidia-cuda-mps", control_per_user, 0);
  // A server whose status has no Uid line, and one with an empty cmdline.
  fs::create_directories(p.root / "7");
  std::ofstream(p.root / "7" / "comm") << "nvidia-cuda-mps\n";
  std::ofstream(p.root / "7" / "cmdline", std::ios::binary) << server;
  std::ofstream(p.root / "7" / "status") << "Name:\tx\n";
  p.add(8, "nvidia-cuda-mps", "", 5);
  p.add(9, "not-mps", server, 5);  // another program's argv[0] is not a server
  const std::string w = mps_user_warning(p.root, 998);
  CHECK_THAT(w, Catch::Contains("will wait behind ferryd's MPS server"));
}

TEST_CASE("another user's process named like the control daemon is not taken for it") {
  FakeProc p;
  p.add(100, "nvidia-cuda-mps", control_per_user, 1234);
  CHECK(mps_user_warning(p.root, 998).empty());
  p.add(101, "nvidia-cuda-mps", control_multi, 0);  // root's real one, multi-user
  CHECK(mps_user_warning(p.root, 998).empty());
}
