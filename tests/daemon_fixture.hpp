// SPDX-License-Identifier: MIT
// Runs a real ferryd on the simulated device for a test, and speaks the raw
// protocol when a test must send what libferry never would.
#pragma once

#include <dirent.h>

#include <fstream>
#include <iterator>

#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/proto.hpp"
#include "ferry/wire.hpp"
#include "paths.hpp"

extern char** environ;

namespace ferry::test {

inline std::string temp_socket() {
  static int n = 0;
  return "/tmp/ferry-test-" + std::to_string(getpid()) + "-" + std::to_string(++n) + ".sock";
}

inline int connect_unix(const std::string& path) {
  int fd = -1;
  return proto::connect_unix(path, &fd) == 0 ? fd : -1;
}

// Polls `ready` until it holds or `timeout` passes; returns its last answer.
// For what the daemon does on its own time (closing, freeing), in place of sleeps.
template <class Ready>
bool eventually(Ready ready, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Runs fn() in a forked child, which exits with its result. A failed
// REQUIRE there (an exception) ends the child with 101: the rest of the
// suite never runs in the child. Returns the child's pid.
template <class F>
pid_t fork_child(F fn) {
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 101;
    try {
      rc = fn();
    } catch (...) {
    }
    _exit(rc);
  }
  return pid;
}

// Waits for a child; its exit code, or 128 + the signal that ended it.
inline int reap(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Maps a staging area's descriptor `fd` (`bytes` long) and closes it; nullptr
// when it cannot be mapped.
inline void* map_area(int fd, size_t bytes) {
  if (fd < 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

// Runs a shell command; its exit code and everything it wrote (stdout and stderr).
inline std::pair<int, std::string> run_command(const std::string& cmd) {
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = ::pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

// Open descriptors of a process, and its mappings of memfds (what staging
// segments, simulated allocations and event pools are; not the heap, stacks
// and arenas that come and go with threads).
inline size_t fd_count(pid_t pid) {
  size_t n = 0;
  if (DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}
// Whether every thread of a process is stopped (state T, after SIGSTOP).
inline bool all_threads_stopped(pid_t pid) {
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (d == nullptr) return false;
  bool all = true;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');  // the name may hold spaces and parentheses
    all = all && close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
  }
  closedir(d);
  return all;
}
inline size_t memfd_map_count(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find("/memfd:") != std::string::npos;
  return n;
}

// An AdminRequest (ferryctl drain / disconnect) over a raw connection: the
// Reply's status, or 1000 (no connection) / 1001 (no reply). No Catch macro,
// so a forked child (another user's) may call it.
inline int admin_request(const std::string& socket, uint32_t action, uint64_t client) {
  const int fd = connect_unix(socket);
  if (fd < 0) return 1000;
  auto req = proto::make<proto::AdminRequest>(proto::Type::admin_request);
  req.request = 9;
  req.action = action;
  req.client = client;
  std::vector<uint8_t> msg;
  proto::Reply rep{};
  const bool ok = proto::send_all(fd, &req, sizeof req) == 0 && proto::read_message(fd, msg) == 0 && proto::as(msg, &rep);
  ::close(fd);
  return ok ? rep.status : 1001;
}

// The daemon's status document, over an open raw connection (a session may
// ask again and again).
inline boost::property_tree::ptree status(int fd) {
  auto req = proto::make<proto::StatusRequest>(proto::Type::status_request);
  req.request = 1;
  REQUIRE(proto::send_all(fd, &req, sizeof req) == 0);
  std::vector<uint8_t> msg;
  REQUIRE(proto::read_message(fd, msg) == 0);
  REQUIRE(proto::type_of(msg) == proto::Type::status_reply);
  std::string json(msg.begin() + sizeof(proto::StatusReply), msg.end());
  boost::property_tree::ptree t;
  std::istringstream in(json);
  boost::property_tree::read_json(in, t);
  return t;
}
// The same over a connection of its own.
inline boost::property_tree::ptree status(const std::string& socket) {
  const int fd = connect_unix(socket);
  REQUIRE(fd >= 0);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  return status(fd);
}

class Daemon {
 public:
  // Starts ferryd on a fresh socket: --sim, or the backend FERRY_TEST_BACKEND
  // names (tests of the real-GPU run). `env` is added to (and overrides) the
  // test's environment; FERRY_SIM_FAST=1 unless a cost is given.
  // nofile > 0: the daemon's descriptor limit, soft and hard.
  // on: the socket's path (a daemon started again where another was), else a fresh one.
  explicit Daemon(std::vector<std::string> args = {}, std::map<std::string, std::string> env = {},
                  rlim_t nofile = 0, const std::string& on = {})
      : socket(on.empty() ? temp_socket() : on) {
    const char* backend = std::getenv("FERRY_TEST_BACKEND");
    std::vector<std::string> argv = {FERRYD_PATH, "--socket", socket, "--log-level", "warn"};
    if (backend != nullptr && *backend != '\0') {
      argv.insert(argv.end(), {"--backend", backend});
    } else {
      argv.push_back("--sim");
    }
    argv.insert(argv.end(), args.begin(), args.end());
    std::map<std::string, std::string> e;
    for (char** p = environ; *p != nullptr; ++p) {
      std::string kv = *p;
      auto eq = kv.find('=');
      if (eq != std::string::npos) e[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    // The daemon chooses its own driver path; the validation layer stays on.
    if (env.count("FERRY_SIM_BANDWIDTH_GBPS") == 0 && env.count("FERRY_SIM_LATENCY_US") == 0) e["FERRY_SIM_FAST"] = "1";
    for (auto& [k, v] : env) e[k] = v;
    std::vector<std::string> envs;
    for (auto& [k, v] : e) envs.push_back(k + "=" + v);
    std::vector<char*> av, ev;
    for (auto& s : argv) av.push_back(s.data());
    av.push_back(nullptr);
    for (auto& s : envs) ev.push_back(s.data());
    ev.push_back(nullptr);
    // Not posix_spawn: the daemon must die with the test even if the test
    // aborts, or it would keep ctest's output pipe open.
    const std::string exe = FERRYD_PATH;
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (nofile != 0) {
        const rlimit rl{nofile, nofile};
        setrlimit(RLIMIT_NOFILE, &rl);
      }
      execve(exe.c_str(), av.data(), ev.data());
      _exit(127);
    }
    for (int i = 0; i < 500; ++i) {
      int fd = connect_unix(socket);
      if (fd >= 0) {
        ::close(fd);
        return;
      }
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        FAIL("ferryd exited at start");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL("ferryd did not start listening");
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    ::unlink(socket.c_str());
  }
  // SIGTERM, then the exit status (or 128 + signal).
  int stop(int sig = SIGTERM) {
    ::kill(pid, sig);
    int st = 0;
    waitpid(pid, &st, 0);
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  // The same, but a daemon still running after `limit` is killed: -1.
  int stop_within(std::chrono::milliseconds limit, int sig = SIGTERM) {
    ::kill(pid, sig);
    int st = 0;
    const bool exited = eventually([&] { return waitpid(pid, &st, WNOHANG) == pid; }, limit);
    if (!exited) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
    }
    pid = -1;
    return !exited ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  boost::property_tree::ptree status() const { return test::status(socket); }
  // Polls until the daemon holds no client, buffer or copy, or 5 s pass.
  bool holds_nothing() const {
    return eventually([&] {
      auto t = status();
      return t.get<uint64_t>("held.clients") == 0 && t.get<uint64_t>("held.buffers") == 0 &&
             t.get<uint64_t>("held.device_bytes") == 0 && t.get<uint64_t>("held.copies_in_flight") == 0;
    });
  }

  // Waits until process `who` has a client here whose status row says
  // `ready` (a predicate over the row), or `who` ended (false; left for the
  // caller to reap): a test kills a client at a state it reached, not after
  // a sleep.
  template <class Ready>
  bool client_of(pid_t who, Ready ready) const {
    bool ended = false;
    const bool seen = eventually(
        [&] {
          siginfo_t info{};
          if (waitid(P_PID, static_cast<id_t>(who), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == who)
            return ended = true;
          const auto st = status();
          for (const auto& [k, row] : st.get_child("clients"))
            if (row.template get<pid_t>("pid") == who && ready(row)) return true;
          return false;
        },
        std::chrono::seconds(30));
    return seen && !ended;
  }

  pid_t pid = -1;
  std::string socket;
};

// A well-behaved client that uploads and verifies while the test misbehaves.
class Witness {
 public:
  explicit Witness(const std::string& socket) {
    REQUIRE(ferry_connect(socket.c_str(), &c_) == 0);
    REQUIRE(ferry_buffer_alloc(c_, kBytes, &buf_) == 0);
    thread_ = std::thread([this] { run(); });
  }
  ~Witness() {
    finish();
    ferry_disconnect(c_);
  }
  // Lets at least 3 rounds verify (10 s at most), stops, and returns how many
  // rounds verified, or -1 on any failure.
  int64_t finish() {
    for (int i = 0; i < 1000 && rounds_ < 3 && !failed_ && thread_.joinable(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return failed_ ? -1 : static_cast<int64_t>(rounds_.load());
  }

 private:
  static constexpr uint64_t kBytes = 256 * 1024;
  // A daemon that stops answering fails the witness rather than hanging the test.
  static constexpr int64_t kSecond = 1000000000;
  void run() {
    std::vector<uint8_t> src(kBytes), back(kBytes);
    for (uint64_t round = 1; !stop_; ++round) {
      for (uint64_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 7 + round);
      ferry_ticket t = 0;
      if (ferry_upload(c_, buf_, 0, src.data(), kBytes, &t) != 0 || ferry_wait(c_, t, 60 * kSecond) != 0 ||
          ferry_download(c_, buf_, 0, back.data(), kBytes) != 0 || back != src) {
        failed_ = true;
        return;
      }
      ++rounds_;
    }
  }
  ferry_client* c_ = nullptr;
  ferry_buffer buf_{};
  std::atomic<bool> stop_{false}, failed_{false};
  std::atomic<uint64_t> rounds_{0};
  std::thread thread_;
};


// A client that speaks the wire protocol directly.
class RawClient {
 public:
  explicit RawClient(const std::string& socket) {
    fd = connect_unix(socket);
    REQUIRE(fd >= 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawClient() {
    if (seg != nullptr) munmap(seg, welcome.segment_bytes);
    if (fd >= 0) ::close(fd);
    if (bell >= 0) ::close(bell);
  }
  void send_bytes(const void* p, size_t n) { REQUIRE(proto::send_all(fd, p, n) == 0); }
  template <class T>
  void send(const T& m) {
    send_bytes(&m, sizeof m);
  }
  // Hello (with the program name given, raw bytes), then the Welcome and the segment.
  void hello(const std::string& name = {}, uint32_t slots_wanted = 0) {
    auto h = proto::make<proto::Hello>(proto::Type::hello);
    h.magic = proto::kMagic;
    h.version = proto::kVersion;
    h.slots_wanted = slots_wanted;
    std::memcpy(h.name, name.data(), std::min(name.size(), sizeof h.name));
    send(h);
    std::vector<uint8_t> msg;
    std::vector<int> fds;
    REQUIRE(proto::read_message(fd, msg, &fds) == 0);
    REQUIRE(proto::as(msg, &welcome));
    REQUIRE(fds.size() == 2);  // the segment, the doorbell
    const int sfd = fds.front();
    bell = fds[1];
    seg = static_cast<char*>(mmap(nullptr, welcome.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0));
    ::close(sfd);
    REQUIRE(seg != MAP_FAILED);
  }
  char* slot(uint32_t i) { return seg + welcome.slots_offset + uint64_t{i} * welcome.slot_bytes; }
  // Where this raw client stages ticket t: slot (t - 1) % slot_count, as
  // units of proto::kStagingAlign (any place inside the area would do).
  uint32_t staging_of(uint64_t t) const {
    return static_cast<uint32_t>((t - 1) % welcome.slot_count * welcome.slot_bytes / proto::kStagingAlign);
  }
  proto::Segment* header() { return reinterpret_cast<proto::Segment*>(seg); }
  // The entry of ticket t, filled and published
  // (ticket stored last), with the doorbell rung when the daemon asks for it.
  proto::SubmitEntry& entry(uint64_t t) {
    auto* ring = reinterpret_cast<proto::SubmitEntry*>(seg + welcome.ring_offset);
    return ring[(t - 1) % welcome.ring_entries];
  }
  void publish(uint64_t t, proto::Type type, uint64_t len, uint64_t buffer, uint64_t offset, uint64_t after = 0,
               bool ring_bell = true) {
    publish_word(t, static_cast<uint64_t>(type) | uint64_t{staging_of(t)} << 32, len, buffer, offset, after, 0, 0,
                 ring_bell);
  }
  // The same with the entry's first word as given (type | flags << 16 | staging << 32).
  void publish_word(uint64_t t, uint64_t word, uint64_t len, uint64_t buffer, uint64_t offset, uint64_t after = 0,
                    uint64_t pool = 0, uint64_t event = 0, bool ring_bell = true) {
    proto::SubmitEntry& e = entry(t);
    e.type = word;
    e.length = len;
    e.buffer = buffer;
    e.offset = offset;
    e.after = after;
    e.pool = pool;
    e.event = event;
    e.ticket.store(t, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ring_bell && header()->doorbell.load() != 0) ring();
  }
  // Sends a byte on the doorbell of the Welcome: whether it rang (EAGAIN:
  // one is pending; false once ferryd closed its end, the session gone).
  bool ring() {
    const char one = 1;
    return ::send(bell, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 || errno == EAGAIN;
  }
  // Reads one message; returns its type, with its bytes in `last`. 0 on EOF.
  uint16_t read_message() {
    if (proto::read_message(fd, last) != 0) return 0;
    return static_cast<uint16_t>(proto::type_of(last));
  }
  // Reads messages until one of type t (returned true) or EOF.
  template <class T>
  bool expect(proto::Type t, T* out) {
    for (;;) {
      uint16_t got = read_message();
      if (got == 0) return false;
      if (got == static_cast<uint16_t>(t)) {
        std::memcpy(out, last.data(), sizeof(T));
        return true;
      }
    }
  }
  // Asks for a staging area of `bytes` (one StagingGrow).
  void ask_staging(uint64_t bytes, uint64_t request = 1) {
    auto grow = proto::make<proto::StagingGrow>(proto::Type::staging_grow);
    grow.request = request;
    grow.bytes = bytes;
    send(grow);
  }
  // Asks for an area and returns its descriptor, -1 when none came (no
  // REQUIRE: a forked child may call it).
  int grown_area(uint64_t bytes) {
    ask_staging(bytes);
    std::vector<uint8_t> msg;
    std::vector<int> fds;
    if (proto::read_message(fd, msg, &fds) != 0 || fds.size() != 1) {
      for (int f : fds) ::close(f);
      return -1;
    }
    return fds[0];
  }
  // Ends the session (its socket closed) while what it mapped stays.
  void end_session() {
    ::close(fd);
    fd = -1;
  }
  // Another 2 MiB area: the error code of its refusal, 0 when granted.
  int32_t refusal_of_more_staging() {
    ask_staging(2 << 20, 99);
    for (;;) {
      const uint16_t got = read_message();
      if (got == static_cast<uint16_t>(proto::Type::error)) {
        proto::Error e{};
        std::memcpy(&e, last.data(), sizeof e);
        return e.code;
      }
      if (got == 0 || got == static_cast<uint16_t>(proto::Type::staging_reply)) return 0;
    }
  }
  // Bytes that came and were not read yet.
  size_t unread() const {
    int n = 0;
    return ::ioctl(fd, FIONREAD, &n) == 0 && n > 0 ? static_cast<size_t>(n) : 0;
  }
  bool closed_by_peer() {
    char c;
    for (;;) {
      ssize_t n = ::recv(fd, &c, 1, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;  // reset: closed under our last message; else timed out: open
    }
  }
  // Until the daemon's `completed` reaches t (10 s at most: a state, not a
  // time, is waited for); then ticket t's outcome: the error of its Result
  // record, 0 when it has none. `done` false when t never completed.
  int64_t outcome(uint64_t t, bool* done = nullptr) {
    bool ok = false;
    for (int i = 0; i < 1'000'000 && !ok; ++i) {
      ok = header()->completed.load(std::memory_order_acquire) >= t;
      if (!ok) std::this_thread::sleep_for(std::chrono::microseconds(10));
    }
    if (done != nullptr) *done = ok;
    REQUIRE(ok);
    const auto* r = reinterpret_cast<const proto::Result*>(seg + welcome.results_offset) + (t - 1) % welcome.ring_entries;
    return r->ticket.load(std::memory_order_acquire) == t ? r->error.load() : 0;
  }
  uint64_t alloc(uint64_t bytes) {
    auto a = proto::make<proto::Alloc>(proto::Type::alloc);
    a.request = 77;
    a.bytes = bytes;
    send(a);
    proto::Reply r{};
    REQUIRE(expect(proto::Type::reply, &r));
    REQUIRE(r.status == 0);
    last_fence = r.fence;
    return r.value;
  }
  // Fence f (index + 1, as an Alloc's reply names it) in this client's segment.
  proto::Fence* fence(uint32_t f) { return reinterpret_cast<proto::Fence*>(seg + welcome.fences_offset) + (f - 1); }

  int fd = -1;
  int bell = -1;  // the doorbell of the Welcome (a socket)
  uint32_t last_fence = 0;  // the last allocation's
  proto::Welcome welcome{};
  char* seg = nullptr;
  std::vector<uint8_t> last;
};

}  // namespace ferry::test
