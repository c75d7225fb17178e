// SPDX-License-Identifier: MIT
// ferry-run on the simulated device: an unmodified Level Zero program
// (tests/ze_upload.c) whose command list is held while it overwrites the
// source it just uploaded. Plain, the device receives the overwritten
// bytes (the hazard is real); under ferry-run, the original ones, at every
// size and however the program reaches the loader. Every copy ferry leaves
// to the driver behaves as it does without ferry, and is counted with its
// reason; ferryd absent, stopped or stingy costs the program nothing but
// speed. Also: the decision table, and a forked child's own lane.
#include <fcntl.h>
#include <ferry/ferry.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/property_tree/json_parser.hpp>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "daemon_fixture.hpp"
#include "lanes.hpp"
#include "policy.hpp"

using namespace ferry::test;
namespace fr = ferry::run;
namespace proto = ferry::proto;

namespace {

const std::vector<std::string> kSizes = {"1024", "65536", "1048576", "16777216", "67108864"};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

// What one run of ze_upload printed: "SIZE WHAT device D..." lines.
struct Outcome {
  int rc = -1;
  std::string out;
  std::vector<std::string> what;  // the second word of each result line
  size_t count(const std::string& w) const { return static_cast<size_t>(std::count(what.begin(), what.end(), w)); }
};

Outcome parse(int rc, const std::string& out) {
  Outcome o{rc, out, {}};
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string size, what;
    if (l >> size >> what && !size.empty() && std::isdigit(static_cast<unsigned char>(size[0]))) o.what.push_back(what);
  }
  return o;
}

std::string ferry_run() { return build_path("interpose/ferry-run"); }
std::string ze_upload() { return build_path("tests/ze_upload"); }

// Runs ze_upload, under ferry-run when `run` holds ferry-run's options.
Outcome upload(const std::string& socket, const std::string& args, const std::string* run, const std::string& env = "") {
  std::string cmd = "env FERRY_SOCKET=" + socket + " " + env + " ";
  if (run != nullptr) cmd += ferry_run() + " " + *run + " -- ";
  cmd += ze_upload() + " " + args;
  auto [rc, out] = run_command(cmd);
  return parse(rc, out);
}

// The report's lines (one per process), as JSON trees.
std::vector<boost::property_tree::ptree> report(const std::string& path) {
  std::vector<boost::property_tree::ptree> v;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    boost::property_tree::ptree t;
    boost::property_tree::read_json(s, t);
    v.push_back(t);
  }
  return v;
}

struct Report {
  std::string path = "/tmp/ferry-run-report-" + std::to_string(getpid()) + "-" + std::to_string(++n) + ".json";
  static inline int n = 0;
  ~Report() { ::unlink(path.c_str()); }
  std::string opt() const { return "--report " + path; }
  std::string text() const {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  boost::property_tree::ptree only() const {
    auto v = report(path);
    REQUIRE(v.size() == 1);
    return v.front();
  }
};

}  // namespace

TEST_CASE("ferry-run: the decision table", "[run]") {
  using fr::Mem;
  struct Row {
    uint64_t bytes, min;
    Mem src, dst;
    int queue;
    bool stage;
    int why;
  };
  const Row rows[] = {
      {1 << 20, 0, Mem::pageable, Mem::device, -1, true, -1},
      {1 << 20, 65536, Mem::pageable, Mem::device, -1, true, -1},
      {65535, 65536, Mem::pageable, Mem::device, -1, false, FERRY_PASS_SMALL},
      {0, 1, Mem::pageable, Mem::device, -1, false, FERRY_PASS_SMALL},
      {1 << 20, 0, Mem::pinned, Mem::device, -1, false, FERRY_PASS_PINNED},
      {1 << 20, 0, Mem::device, Mem::device, -1, false, FERRY_PASS_NOT_UPLOAD},
      {1 << 20, 0, Mem::pageable, Mem::pageable, -1, false, FERRY_PASS_NOT_UPLOAD},
      {1 << 20, 0, Mem::pageable, Mem::pinned, -1, false, FERRY_PASS_NOT_UPLOAD},
      {1 << 20, 0, Mem::pageable, Mem::other, -1, false, FERRY_PASS_NOT_UPLOAD},
      {1 << 20, 0, Mem::other, Mem::device, -1, false, FERRY_PASS_UNSUPPORTED},
      {1 << 20, 0, Mem::pageable, Mem::device, FERRY_PASS_CAPTURED, false, FERRY_PASS_CAPTURED},
      {1 << 20, 0, Mem::pageable, Mem::device, FERRY_PASS_REPLAYABLE, false, FERRY_PASS_REPLAYABLE},
      // The queue's reason before the source's: a captured pinned copy is "captured".
      {1 << 20, 0, Mem::pinned, Mem::device, FERRY_PASS_CAPTURED, false, FERRY_PASS_CAPTURED},
      // Small before anything else: nothing is looked up for it.
      {10, 64, Mem::pinned, Mem::pageable, FERRY_PASS_CAPTURED, false, FERRY_PASS_SMALL},
  };
  for (const Row& r : rows) {
    fr::Copy c;
    c.bytes = r.bytes;
    c.min_bytes = r.min;
    c.src = r.src;
    c.dst = r.dst;
    c.queue = r.queue;
    const fr::Verdict v = fr::decide(c);
    CAPTURE(r.bytes, r.min, static_cast<int>(r.src), static_cast<int>(r.dst), r.queue);
    CHECK(v.stage == r.stage);
    CHECK(v.why == r.why);
  }
}

TEST_CASE("ferry-run: every pass reason has the name ferryctl and the metrics show", "[run]") {
  CHECK(std::string(ferry_pass_reason_name(FERRY_PASS_SMALL)) == "small");
  CHECK(std::string(ferry_pass_reason_name(FERRY_PASS_NO_ROOM)) == "no_room");
  CHECK(std::string(ferry_pass_reason_name(FERRY_PASS_BUSY)) == "busy");
  std::set<std::string> names;
  for (int i = 0; i < FERRY_PASS_REASONS; ++i) {
    REQUIRE(ferry_pass_reason_name(i) != nullptr);
    names.insert(ferry_pass_reason_name(i));
  }
  CHECK(names.size() == FERRY_PASS_REASONS);  // no two alike
  CHECK(ferry_pass_reason_name(-1) == nullptr);
  CHECK(ferry_pass_reason_name(FERRY_PASS_REASONS) == nullptr);
}

TEST_CASE("ferry-run: the hazard is real, and ferry-run removes it at every size", "[run][interpose]") {
  Daemon d;
  for (const char* how : {"", "--dlopen "}) {
    SECTION(std::string("reached ") + (*how != '\0' ? "through dlopen + dlsym" : "linked")) {
      // Plain: the device reads the source when the copy runs, after the program overwrote it.
      const Outcome plain = upload(d.socket, std::string(how) + "--mode hazard " + join(kSizes), nullptr);
      INFO(plain.out);
      REQUIRE(plain.rc == 0);
      CHECK(plain.count("overwritten") == kSizes.size());
      Report r;
      const std::string opts = r.opt();
      const Outcome ferried = upload(d.socket, std::string(how) + "--mode hazard " + join(kSizes), &opts);
      INFO(ferried.out);
      REQUIRE(ferried.rc == 0);
      CHECK(ferried.count("original") == kSizes.size());
      const auto t = r.only();
      CHECK(t.get<uint64_t>("staged") == kSizes.size());
      CHECK(t.get<uint64_t>("passed.error") == 0);
      CHECK(t.get<uint64_t>("passed.no_room") == 0);
    }
  }
}

TEST_CASE("ferry-run: a Python program on the loader through ctypes", "[run][interpose]") {
  Daemon d;
  const std::string py = "/usr/bin/python3 " + std::string(FERRY_SOURCE_DIR) + "/tests/ze_upload.py " + join(kSizes);
  auto [rc0, plain] = run_command("env FERRY_SOCKET=" + d.socket + " " + py);
  INFO(plain);
  REQUIRE(rc0 == 0);
  CHECK(parse(0, plain).count("overwritten") == kSizes.size());
  Report r;
  auto [rc1, ferried] = run_command("env FERRY_SOCKET=" + d.socket + " " + ferry_run() + " " + r.opt() + " -- " + py);
  INFO(ferried);
  REQUIRE(rc1 == 0);
  CHECK(parse(0, ferried).count("original") == kSizes.size());
  CHECK(r.only().get<uint64_t>("staged") == kSizes.size());
}

TEST_CASE("ferry-run: a regular command list copies its source as it is at each execution", "[run][interpose]") {
  Daemon d;
  struct Case {
    const char* mode;
    const char* plain;   // what the device receives without ferry
    const char* ferried; // and under ferry-run
    uint64_t staged;     // executions' copies staged, a size each
  };
  const Case cases[] = {
      {"regular-hazard", "overwritten", "original", 1},  // overwritten after the execute returned: ferry's bytes
      {"regular-late", "overwritten", "overwritten", 1},  // before the execute: the driver's meaning, kept
      {"regular-again", "overwritten", "overwritten", 2},  // the second execution copies the source anew
      {"regular", "original", "original", 1},
  };
  const std::string sizes = " 1024 1048576 4194304";
  for (const Case& c : cases) {
    SECTION(c.mode) {
      const Outcome plain = upload(d.socket, std::string("--mode ") + c.mode + sizes, nullptr);
      Report r;
      const std::string opts = r.opt();
      const Outcome ferried = upload(d.socket, std::string("--mode ") + c.mode + sizes, &opts);
      INFO(plain.out << ferried.out);
      REQUIRE(plain.rc == 0);
      REQUIRE(ferried.rc == 0);
      CHECK(plain.count(c.plain) == 3);
      CHECK(ferried.count(c.ferried) == 3);
      const auto t = r.only();
      CHECK(t.get<uint64_t>("staged") == 3 * c.staged);
      CHECK(t.get<uint64_t>("passed.replayable") == 0);
    }
  }
  SECTION("a list a copy: one block serves them all, the next copy reuses it") {
    // As oneAPI.jl uploads (a list per copy, destroyed after): 12 of 4 MiB
    // fit in a bound of 5 MiB only if every destroyed list's block comes back.
    Report r;
    const std::string opts = r.opt() + " --list-bytes " + std::to_string(5 << 20);
    std::string many;
    for (int i = 0; i < 12; ++i) many += " 4194304";
    const Outcome o = upload(d.socket, "--mode regular" + many, &opts);
    INFO(o.out);
    REQUIRE(o.rc == 0);
    CHECK(o.count("original") == 12);
    const auto t = r.only();
    CHECK(t.get<uint64_t>("staged") == 12);
    CHECK(t.get<uint64_t>("passed.no_room") == 0);
  }
}

TEST_CASE("ferry-run: a region copy's rows arrive as they were when the call returned", "[run][interpose]") {
  // Two slices of 4 KiB rows from an origin inside a source with gaps
  // between rows and slices (ze_upload's region modes), held on an event
  // until the source was overwritten. On an immediate list the rows are cut
  // by the pieces' edges (1 MiB pieces; 32 MiB goes into an area).
  Daemon d;
  const std::string sizes = " 1024 1048576 4194304 33554432";
  for (const char* mode : {"region", "region-regular"}) {
    SECTION(mode) {
      const Outcome plain = upload(d.socket, std::string("--mode ") + mode + sizes, nullptr);
      Report r;
      const std::string opts = r.opt();
      const Outcome ferried = upload(d.socket, std::string("--mode ") + mode + sizes, &opts);
      INFO(plain.out << ferried.out);
      REQUIRE(plain.rc == 0);
      REQUIRE(ferried.rc == 0);
      CHECK(plain.count("overwritten") == 4);
      CHECK(ferried.count("original") == 4);
      const auto t = r.only();
      CHECK(t.get<uint64_t>("staged") == 4);
      CHECK(t.get<uint64_t>("passed.unsupported") == 0);
    }
  }
  SECTION("a region the driver refuses is refused as without ferry, and counted") {
    const Outcome plain = upload(d.socket, "--mode region-bad 1048576", nullptr);
    Report r;
    const std::string opts = r.opt();
    const Outcome ferried = upload(d.socket, "--mode region-bad 1048576", &opts);
    INFO(plain.out << ferried.out);
    CHECK(plain.count("refused") == 1);
    CHECK(ferried.count("refused") == 1);
    const auto t = r.only();
    CHECK(t.get<uint64_t>("staged") == 0);
    CHECK(t.get<uint64_t>("passed.unsupported") == 1);
  }
}

TEST_CASE("ferry-run: what goes to the driver behaves as without ferry, and is counted", "[run][interpose]") {
  Daemon d;
  struct Case {
    const char* mode;
    const char* run;   // extra options of ferry-run
    const char* why;   // the count that must move
    const char* what;  // what the device receives, with and without ferry
  };
  const Case cases[] = {
      {"pinned", "", "passed.pinned", "overwritten"},    // the driver's host memory is read when the copy runs
      {"regular", "--list-bytes 0", "passed.replayable", "original"},  // regular lists left to the driver
      {"regular", "--list-bytes 4096", "passed.no_room", "original"},  // less than a block (64 KiB)
      {"hazard", "--min-bytes 4096", "passed.small", "overwritten"},
      {"sync", "", "staged", "original"},
  };
  for (const Case& c : cases) {
    SECTION(std::string(c.mode) + " " + c.run) {
      const Outcome plain = upload(d.socket, std::string("--mode ") + c.mode + " 1024", nullptr);
      Report r;
      const std::string opts = r.opt() + " " + c.run;
      const Outcome ferried = upload(d.socket, std::string("--mode ") + c.mode + " 1024", &opts);
      INFO(plain.out << ferried.out);
      REQUIRE(plain.rc == 0);
      REQUIRE(ferried.rc == 0);
      CHECK(plain.count(c.what) == 1);
      CHECK(ferried.count(c.what) == 1);
      CHECK(r.only().get<uint64_t>(c.why) >= 1);
    }
  }
  SECTION("device to device: only the upload is staged") {
    Report r;
    const std::string opts = r.opt();
    const Outcome o = upload(d.socket, "--mode d2d 65536", &opts);
    INFO(o.out);
    REQUIRE(o.rc == 0);
    CHECK(o.count("original") == 1);
    const auto t = r.only();
    CHECK(t.get<uint64_t>("staged") == 1);
    CHECK(t.get<uint64_t>("passed.not_upload") >= 1);  // the device-to-device copy (and the read back)
  }
}

TEST_CASE("ferry-run: no daemon, a stopped one, one that goes, and a bound smaller than the upload", "[run][interpose]") {
  SECTION("no daemon: every copy goes to the driver") {
    Report r;
    const std::string opts = r.opt();
    const Outcome o = upload("/nonexistent/ferry.sock", "--mode sync " + join(kSizes), &opts);
    INFO(o.out);
    REQUIRE(o.rc == 0);
    CHECK(o.count("original") == kSizes.size());
    CHECK(r.only().get<uint64_t>("passed.no_daemon") == kSizes.size());
  }
  SECTION("a daemon stopped before the program's first copy: one copy waits for it, not every one") {
    Daemon d;
    ::kill(d.pid, SIGSTOP);
    REQUIRE(eventually([&] { return all_threads_stopped(d.pid); }));
    Report r;
    const std::string opts = r.opt();
    const auto t0 = std::chrono::steady_clock::now();
    const Outcome o = upload(d.socket, "--mode sync 65536 65536 65536 65536 65536 65536 65536 65536 65536 65536", &opts);
    const auto took = std::chrono::steady_clock::now() - t0;
    ::kill(d.pid, SIGCONT);
    INFO(o.out);
    CHECK(o.rc == 0);
    CHECK(o.count("original") == 10);
    CHECK(r.only().get<uint64_t>("passed.no_daemon") == 10);
    // Liveness, not speed: ten copies each waiting out the connect would take 20 s.
    CHECK(took < std::chrono::seconds(10));
  }
  SECTION("--user-staging 0: what outgrows the client's staging goes to the driver") {
    Daemon d({"--user-staging", "0"});
    Report r;
    const std::string opts = r.opt();
    const Outcome o = upload(d.socket, "--mode sync 1048576 67108864", &opts);
    INFO(o.out);
    REQUIRE(o.rc == 0);
    CHECK(o.count("original") == 2);
    const auto t = r.only();
    CHECK(t.get<uint64_t>("staged") == 1);
    CHECK(t.get<uint64_t>("passed.no_room") == 1);
    // Held, the one that fits is still ferry's: the original bytes arrive.
    const Outcome held = upload(d.socket, "--mode hazard 1048576", &opts);
    CHECK(held.count("original") == 1);
  }
  SECTION("a daemon stopped, then killed, while the program runs") {
    Daemon d;
    const std::string gate = "/tmp/ferry-run-gate-" + std::to_string(getpid());
    ::unlink(gate.c_str());
    Report r;
    // A request ferryd does not answer would wait this long: the program must not.
    const std::string cmd = "env FERRY_TIMEOUT_MS=120000 FERRY_SOCKET=" + d.socket + " " + ferry_run() + " " + r.opt() +
                            " -- " + ze_upload() + " --mode sync --wait-file " + gate + " 1048576 67108864 1048576 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    char line[256];
    while (std::fgets(line, sizeof line, p) != nullptr && std::string(line) != "waiting\n") out += line;
    // Stopped: staging it already has goes on; growth and new clients are not waited for.
    ::kill(d.pid, SIGSTOP);
    REQUIRE(eventually([&] { return all_threads_stopped(d.pid); }));
    const auto opened = std::chrono::steady_clock::now();
    std::ofstream(gate).put('\n');
    while (std::fgets(line, sizeof line, p) != nullptr) out += line;
    const int rc = ::pclose(p);
    // Liveness, not speed: it never waited out a request to the stopped daemon.
    CHECK(std::chrono::steady_clock::now() - opened < std::chrono::seconds(60));
    ::unlink(gate.c_str());
    ::kill(d.pid, SIGCONT);
    const Outcome o = parse(WIFEXITED(rc) ? WEXITSTATUS(rc) : 128, out);
    INFO(out);
    CHECK(o.rc == 0);
    CHECK(o.count("original") == 3);
    // The staging it had served the 1 MiB copies; the 64 MiB one needed an
    // area the stopped daemon could not grant, and went to the driver.
    const auto t = r.only();
    CHECK(t.get<uint64_t>("staged") == 2);
    CHECK(t.get<uint64_t>("passed.no_room") == 1);
    // Gone: the next program's copies are the driver's, whole and correct.
    d.stop(SIGKILL);
    Report r2;
    const std::string opts = r2.opt();
    const Outcome after = upload(d.socket, "--mode sync 1048576", &opts);
    CHECK(after.rc == 0);
    CHECK(after.count("original") == 1);
    CHECK(r2.only().get<uint64_t>("passed.no_daemon") == 1);
  }
}

TEST_CASE("ferry-run: threads, two devices, programs it starts", "[run][interpose]") {
  Daemon d;
  SECTION("four threads, each its own list, at once") {
    Report r;
    const std::string opts = r.opt();
    // Each thread's lane connects in the background, and a copy waits for it
    // only so long (2 s here) before it goes to the driver: on the 2-core CI
    // machine under load a connect took longer (1 of 8 passed). Told to wait
    // for the connect's end (FERRY_RUN_CONNECT_MS), every copy is ferry's.
    const Outcome o = upload(d.socket, "--mode hazard --threads 4 65536 4194304", &opts, "FERRY_RUN_CONNECT_MS=120000");
    INFO(o.out);
    REQUIRE(o.rc == 0);
    INFO(r.text());
    CHECK(r.only().get<uint64_t>("staged") == 8);
    CHECK(o.count("original") == 8);
  }
  SECTION("two simulated devices") {
    Report r;
    const std::string opts = r.opt();
    const Outcome o = upload(d.socket, "--mode hazard --devices 2 1048576", &opts, "FERRY_SIM_DEVICES=2");
    INFO(o.out);
    REQUIRE(o.rc == 0);
    CHECK(o.count("original") == 2);
  }
  SECTION("a program it starts is covered too") {
    Report r;
    const std::string opts = r.opt();
    const Outcome o = upload(d.socket, "--mode hazard --fork 1048576", &opts);
    INFO(o.out);
    REQUIRE(o.rc == 0);
    CHECK(o.count("original") == 2);
    const auto lines = report(r.path);
    REQUIRE(lines.size() == 2);  // one per process
    CHECK(lines[0].get<uint64_t>("staged") == 1);
    CHECK(lines[1].get<uint64_t>("staged") == 1);
    CHECK(lines[0].get<int>("pid") != lines[1].get<int>("pid"));
  }
}

TEST_CASE("ferry-run: ferryctl shows the process, its copies and what it passed", "[run][interpose]") {
  Daemon d;
  const std::string gate = "/tmp/ferry-run-gate-" + std::to_string(getpid()) + "-ctl";
  ::unlink(gate.c_str());
  const std::string cmd = "env FERRY_SOCKET=" + d.socket + " " + ferry_run() + " -- " + ze_upload() +
                          " --mode hazard --wait-file " + gate + " 1048576 1024 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char line[256];
  // The first size staged, the program holds until the gate opens.
  while (std::fgets(line, sizeof line, p) != nullptr && std::string(line) != "waiting\n") {
  }
  const auto t = d.status();
  bool seen = false;
  for (const auto& [k, c] : t.get_child("clients")) {
    if (c.get<std::string>("run.role", "") != "lead") continue;
    seen = true;
    CHECK(c.get<std::string>("name") == "ze_upload");
    CHECK(c.get<uint64_t>("run.staged") == 1);
    CHECK(c.get<uint64_t>("run.staged_bytes") == 1048576);
    CHECK(c.get<uint64_t>("run.passed.not_upload") >= 1);  // its read back
  }
  CHECK(seen);
  auto [rc, ctl] = run_command(std::string(FERRYCTL_PATH) + " --socket " + d.socket + " status");
  CHECK(rc == 0);
  CHECK(ctl.find("ferry-run") != std::string::npos);
  std::ofstream(gate).put('\n');
  while (std::fgets(line, sizeof line, p) != nullptr) {
  }
  CHECK(::pclose(p) == 0);
  ::unlink(gate.c_str());
}

TEST_CASE("ferry-run on a machine with no GPU: the simulated device, said once, and --stats whatever the program does",
          "[run][interpose]") {
  Daemon d;
  // As a new user runs it: no ZE_ENABLE_ALT_DRIVERS, no FERRY_SIM_DRIVER.
  const std::string bare = "env -u ZE_ENABLE_ALT_DRIVERS -u FERRY_SIM_DRIVER FERRY_SOCKET=" + d.socket + " ";
  auto [rc, out] = run_command(bare + ferry_run() + " --stats -- " + ze_upload() + " --mode hazard 1048576 2>&1");
  INFO(out);
  const bool gpu = out.find("no GPU driver here") == std::string::npos;
  if (!gpu) {
    CHECK(rc == 0);
    CHECK(parse(rc, out).count("original") == 1);  // staged, on the simulated device
  }
  CHECK(out.find("\"staged\":") != std::string::npos);  // the --stats line
  // A program that fails still says what it staged (nothing).
  auto [rc2, out2] = run_command(bare + ferry_run() + " --stats -- false 2>&1");
  CHECK(rc2 == 1);
  CHECK(out2.find("\"comm\":\"false\"") != std::string::npos);
}

// A man in the middle between libferry and a real ferryd, who changes what
// ferryd sends: the server anyone who can bind a FERRY_SOCKET in a shared
// folder can be. One client connection at a time, pumped both ways,
// descriptors included; `tamper` sees each message from ferryd first.
class Proxy {
 public:
  using Tamper = std::function<void(std::vector<uint8_t>& msg, std::vector<int>& fds)>;
  Proxy(const std::string& upstream, Tamper tamper) : path(temp_socket()), upstream_(upstream), tamper_(std::move(tamper)) {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener_, 16) == 0);
    acceptor_ = std::thread([this] {
      for (;;) {
        const int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        const int u = connect_unix(upstream_);
        if (u < 0) {
          ::close(c);
          continue;
        }
        std::lock_guard lock(mu_);
        pumps_.emplace_back([c, u] { pump(c, u, nullptr); });
        pumps_.emplace_back([this, c, u] { pump(u, c, &tamper_); });
      }
    });
  }
  ~Proxy() {
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    ::close(listener_);
    for (auto& t : pumps_) t.join();
    ::unlink(path.c_str());
  }
  const std::string path;

 private:
  static void pump(int from, int to, Tamper* tamper) {
    std::vector<uint8_t> msg;
    std::vector<int> fds;
    while (proto::read_message(from, msg, &fds) == 0) {
      if (tamper != nullptr) (*tamper)(msg, fds);
      proto::send_fds(to, msg.data(), msg.size(), fds.data(), fds.size(), MSG_NOSIGNAL);
      for (int f : fds) ::close(f);
      fds.clear();
    }
    ::shutdown(to, SHUT_RDWR);
    ::shutdown(from, SHUT_RDWR);
  }
  std::string upstream_;
  Tamper tamper_;
  int listener_ = -1;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> pumps_;
};

// A memfd of `bytes`, with `seals`.
int memfd_of(uint64_t bytes, unsigned seals) {
  const int fd = ::memfd_create("lie", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes)) == 0);
  if (seals != 0) REQUIRE(::fcntl(fd, F_ADD_SEALS, seals) == 0);
  return fd;
}

TEST_CASE("ferry-run: a server that lies about a descriptor costs the program nothing but ferry", "[run][interpose]") {
  Daemon d;
  SECTION("a staging area smaller than it says") {
    Proxy p(d.socket, [](std::vector<uint8_t>& msg, std::vector<int>& fds) {
      proto::StagingReply r{};
      if (proto::type_of(msg) != proto::Type::staging_reply || !proto::as(msg, &r) || r.status != 0 || fds.empty()) return;
      ::close(fds[0]);
      fds[0] = memfd_of(4096, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);  // properly sealed, and 4 KiB
    });
    Report r;
    const std::string opts = r.opt();
    // 64 MiB outgrows the segment's staging: it asks for an area.
    const Outcome o = upload(p.path, "--mode sync 1048576 67108864 1048576", &opts, "FERRY_RUN_CONNECT_MS=60000");
    INFO(o.out);
    CHECK(o.rc == 0);  // not 135: no SIGBUS
    CHECK(o.count("original") == 3);
    CHECK(o.out.find("is no ferryd") != std::string::npos);  // said once
    CHECK(r.only().get<uint64_t>("staged") >= 1);           // the first 1 MiB was ferry's
  }
  SECTION("a staging segment it can shrink after the Welcome") {
    std::vector<int> lies;
    std::mutex mu;
    {
      Proxy p(d.socket, [&](std::vector<uint8_t>& msg, std::vector<int>& fds) {
        proto::Welcome w{};
        if (proto::type_of(msg) != proto::Type::welcome || !proto::as(msg, &w) || fds.size() != 2) return;
        // The same bytes, in a memfd nobody sealed: truncated once it is out.
        const int lie = memfd_of(w.segment_bytes, 0);
        std::vector<char> bytes(w.segment_bytes);
        REQUIRE(::pread(fds[0], bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
        REQUIRE(::pwrite(lie, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
        ::close(fds[0]);
        fds[0] = lie;
        std::lock_guard lock(mu);
        lies.push_back(::fcntl(lie, F_DUPFD_CLOEXEC, 3));
      });
      std::thread shrink([&] {
        // Shrunk as soon as the proxy handed it on (the client may map it by then).
        for (int i = 0; i < 2000; ++i) {
          {
            std::lock_guard lock(mu);
            for (int fd : lies) (void)::ftruncate(fd, 0);
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      });
      Report r;
      const std::string opts = r.opt();
      const Outcome o = upload(p.path, "--mode sync 1048576 1048576", &opts);
      shrink.join();
      INFO(o.out);
      CHECK(o.rc == 0);  // not 135
      CHECK(o.count("original") == 2);
      CHECK(r.only().get<uint64_t>("staged") == 0);
    }
    for (int fd : lies) ::close(fd);
  }
}

// The samples of `metrics` (ferryctl metrics) whose name starts with `prefix`.
std::vector<std::string> series(const std::string& metrics, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(metrics);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(prefix, 0) == 0) out.push_back(l);
  return out;
}

TEST_CASE("ferry-run's metrics: per user and command, the exited folded in, as many series after 12 processes as after 1",
          "[run][interpose]") {
  Daemon d;
  const std::string ctl = std::string(FERRYCTL_PATH) + " --socket " + d.socket;
  std::vector<std::string> after_one;
  uint64_t last_staged = 0;
  for (int i = 1; i <= 12; ++i) {
    const std::string opts;
    const Outcome o = upload(d.socket, "--mode sync 1048576 65536", &opts);
    REQUIRE(o.rc == 0);
    // Its client gone (folded in), the totals count it: never less than before.
    REQUIRE(eventually([&] { return d.status().get_child("clients").empty(); }));
    auto [rc, m] = run_command(ctl + " metrics");
    REQUIRE(rc == 0);
    const auto run = series(m, "ferry_run_");
    CHECK(m.find("pid=") == std::string::npos);
    CHECK(m.find("client=") == std::string::npos);
    if (i == 1) after_one = run;
    CHECK(run.size() == after_one.size());
    const auto staged = series(m, "ferry_run_staged_total{");
    REQUIRE(staged.size() == 1);
    CHECK(staged[0].find("command=\"ze_upload\"") != std::string::npos);
    const uint64_t now = std::stoull(staged[0].substr(staged[0].rfind(' ') + 1));
    CHECK(now == uint64_t(2 * i));  // two copies staged by each process
    CHECK(now > last_staged);
    last_staged = now;
  }
  // The last that exited, each with its own counts, in status.
  const auto st = d.status();
  size_t exited = 0;
  for (const auto& [k, e] : st.get_child("run_exited")) {
    ++exited;
    CHECK(e.get<uint64_t>("staged") == 2);
    CHECK(e.get<std::string>("command") == "ze_upload");
  }
  CHECK(exited == 12);
  for (const auto& [k, r] : st.get_child("run_totals")) CHECK(r.get<uint64_t>("processes_exited") == 12);
  auto [rc, text] = run_command(ctl + " status");
  CHECK(text.find("exited") != std::string::npos);
}

// A program's output as it comes, line by line (read on a thread of its own).
class Lines {
 public:
  explicit Lines(const std::string& cmd) : p_(::popen(cmd.c_str(), "r")) {
    REQUIRE(p_ != nullptr);
    reader_ = std::thread([this] {
      char line[256];
      while (std::fgets(line, sizeof line, p_) != nullptr) {
        std::lock_guard lock(mu_);
        lines_.emplace_back(line);
      }
    });
  }
  ~Lines() {
    if (p_ != nullptr) close();
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return lines_.size();
  }
  // Lines from `from` on whose second word is `what`.
  size_t count(const std::string& what, size_t from = 0) const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (size_t i = from; i < lines_.size(); ++i) n += parse(0, lines_[i]).count(what);
    return n;
  }
  std::string text() const {
    std::lock_guard lock(mu_);
    std::string s;
    for (const auto& l : lines_) s += l;
    return s;
  }
  int close() {
    reader_.join();
    const int rc = ::pclose(p_);
    p_ = nullptr;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
  }

 private:
  FILE* p_;
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
  std::thread reader_;
};

TEST_CASE("ferry-run: a program outlives its ferryd and is staged again once a new one listens", "[run][interpose]") {
  auto first = std::make_unique<Daemon>();
  const std::string socket = first->socket;
  const std::string stop = "/tmp/ferry-run-stop-" + std::to_string(getpid());
  ::unlink(stop.c_str());
  Report r;
  // Held, so the bytes say whose copy it was: ferry's (original) or the
  // driver's, which reads the source late (overwritten).
  Lines out("env FERRY_SOCKET=" + socket + " " + ferry_run() + " " + r.opt() + " -- " + ze_upload() +
            " --mode hazard --until-file " + stop + " --every 5 4194304 2>&1");
  REQUIRE(eventually([&] { return out.count("original") >= 5; }, std::chrono::seconds(60)));
  // Stopped as for an upgrade: the program goes on, through the driver.
  CHECK(first->stop(SIGTERM) == 0);
  const size_t stopped = out.size();
  REQUIRE(eventually([&] { return out.size() >= stopped + 3; }, std::chrono::seconds(60)));
  Daemon second({}, {}, 0, socket);
  const size_t listening = out.size();
  // Staged again by the new ferryd, without the program doing anything, and
  // shown in its ferryctl status.
  REQUIRE(eventually([&] { return out.count("original", listening) >= 3; }, std::chrono::seconds(30)));
  bool shown = false;
  const auto st = second.status();
  for (const auto& [k, c] : st.get_child("clients"))
    shown = shown || (c.get<std::string>("run.role", "") == "lead" && c.get<uint64_t>("run.staged") > 0);
  CHECK(shown);
  std::ofstream(stop).put('\n');
  const int rc = out.close();
  ::unlink(stop.c_str());
  INFO(out.text());
  CHECK(rc == 0);
  CHECK(out.count("mixed") == 0);
  const auto t = r.only();
  CHECK(t.get<uint64_t>("lanes_gone") >= 1);
  CHECK(t.get<uint64_t>("dead_lanes") == 0);  // a daemon that went is no failure of the lane's
  CHECK(t.get<uint64_t>("lanes_closed") >= 1);  // the old lane went once its copies were done
}

// Not under TSan (tests/CMakeLists.txt): it does not follow a fork from a
// threaded program, and lanes' clients live as long as the process by
// design (their threads are never joined).
TEST_CASE("ferry-run: a forked child makes its own lane, never the parent's", "[run][forklane]") {
  Daemon d;
  ::setenv("FERRY_SOCKET", d.socket.c_str(), 1);
  auto prepare = [](ferry_client*, uint64_t, void*) { return 0; };
  auto unprepare = [](ferry_client*, uint64_t, void*) {};
  // A lane connects in the background; a call waits for that connect's end
  // (given here as a minute: on a loaded machine, under ASan, it can take
  // longer than a copy's usual wait).
  auto lane = [&] {
    int why = -1;
    return fr::Lanes::get().acquire(1, 1, 0, prepare, unprepare, nullptr, &why, std::chrono::seconds(60));
  };
  fr::Lanes& lanes = fr::Lanes::get();
  ferry_client* parent = lane();
  REQUIRE(parent != nullptr);
  ferry_info pi{};
  REQUIRE(ferry_get_info(parent, &pi) == 0);
  lanes.done(parent, 0);
  const pid_t child = fork_child([&] {
    ferry_client* mine = lane();
    if (mine == nullptr || mine == parent) return 3;
    ferry_info ci{};
    if (ferry_get_info(mine, &ci) != 0 || ci.client_id == pi.client_id) return 4;
    fr::Lanes::get().done(mine, 0);
    return 0;
  });
  CHECK(reap(child) == 0);
  // The parent's lane is untouched by the child.
  int why = -1;
  ferry_client* again = lanes.acquire(1, 1, 0, prepare, unprepare, nullptr, &why);
  CHECK(again == parent);
  lanes.done(again, 0);
}

TEST_CASE("ferry-run's lanes: threads copying at once, each taking its lane back without a lock", "[run]") {
  Daemon d;
  // A process of its own: Lanes is one per process, its socket read at its first use.
  auto [rc, out] = run_command("env FERRY_SOCKET=" + d.socket + " " + build_path("tests/lane_threads") + " 2>&1");
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("lane_threads: ok") != std::string::npos);
}
