// Runs a real ferryd on the simulated device for a test, and speaks the raw
// protocol when a test must send what libferry never would.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/fdpass.hpp"
#include "ferry/proto.hpp"
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

inline bool read_exact(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t k = ::recv(fd, c, n, 0);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// The daemon's status document, fetched over a raw connection.
inline boost::property_tree::ptree status(const std::string& socket) {
  int fd = connect_unix(socket);
  REQUIRE(fd >= 0);
  auto req = proto::make<proto::StatusRequest>(proto::Type::status_request);
  req.request = 1;
  REQUIRE(::send(fd, &req, sizeof req, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof req));
  proto::StatusReply rep{};
  REQUIRE(read_exact(fd, &rep, sizeof rep));
  REQUIRE(rep.h.type == static_cast<uint16_t>(proto::Type::status_reply));
  std::string json(rep.json_bytes, '\0');
  REQUIRE(read_exact(fd, json.data(), json.size()));
  ::close(fd);
  boost::property_tree::ptree t;
  std::istringstream in(json);
  boost::property_tree::read_json(in, t);
  return t;
}

class Daemon {
 public:
  // Starts ferryd on a fresh socket: --sim, or the backend FERRY_TEST_BACKEND
  // names (tests of the real-GPU run). `env` is added to (and overrides) the
  // test's environment; FERRY_SIM_FAST=1 unless a cost is given.
  explicit Daemon(std::vector<std::string> args = {}, std::map<std::string, std::string> env = {})
      : socket(temp_socket()) {
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
  boost::property_tree::ptree status() const { return test::status(socket); }
  // Polls until the daemon holds no client, buffer or copy, or 5 s pass.
  bool holds_nothing() const {
    for (int i = 0; i < 500; ++i) {
      auto t = status();
      if (t.get<uint64_t>("held.clients") == 0 && t.get<uint64_t>("held.buffers") == 0 &&
          t.get<uint64_t>("held.device_bytes") == 0 && t.get<uint64_t>("held.copies_in_flight") == 0)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  pid_t pid = -1;
  std::string socket;
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
  }
  void send_bytes(const void* p, size_t n) { REQUIRE(::send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n)); }
  template <class T>
  void send(const T& m) {
    send_bytes(&m, sizeof m);
  }
  // Hello, then the Welcome and the segment.
  void hello() {
    auto h = proto::make<proto::Hello>(proto::Type::hello);
    h.magic = proto::kMagic;
    h.version = proto::kVersion;
    send(h);
    int sfd = -1;
    REQUIRE(proto::recv_fds(fd, &welcome, sizeof welcome, MSG_WAITALL, [&](int f) { sfd = f; }) ==
            static_cast<ssize_t>(sizeof welcome));
    REQUIRE(sfd >= 0);
    seg = static_cast<char*>(mmap(nullptr, welcome.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0));
    ::close(sfd);
    REQUIRE(seg != MAP_FAILED);
  }
  char* slot(uint32_t i) { return seg + welcome.slots_offset + uint64_t{i} * welcome.slot_bytes; }
  // Reads one message; returns its type, with its bytes in `last`. 0 on EOF.
  uint16_t read_message() {
    proto::Header h{};
    if (!read_exact(fd, &h, sizeof h)) return 0;
    last.assign(reinterpret_cast<char*>(&h), reinterpret_cast<char*>(&h) + sizeof h);
    last.resize(h.size);
    if (h.size > sizeof h && !read_exact(fd, last.data() + sizeof h, h.size - sizeof h)) return 0;
    return h.type;
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
  bool closed_by_peer() {
    char c;
    for (;;) {
      ssize_t n = ::recv(fd, &c, 1, 0);
      if (n == 0) return true;
      if (n < 0) return false;  // timed out: still open
    }
  }
  proto::Transfer transfer(proto::Type t, uint64_t ticket, uint64_t len, uint64_t buffer, uint64_t offset) {
    auto m = proto::make<proto::Transfer>(t);
    m.ticket = ticket;
    m.slot = static_cast<uint32_t>((ticket - 1) % welcome.slot_count);
    m.length = len;
    m.buffer = buffer;
    m.offset = offset;
    return m;
  }
  uint64_t alloc(uint64_t bytes) {
    auto a = proto::make<proto::Alloc>(proto::Type::alloc);
    a.request = 77;
    a.bytes = bytes;
    send(a);
    proto::Reply r{};
    REQUIRE(expect(proto::Type::reply, &r));
    REQUIRE(r.status == 0);
    return r.value;
  }

  int fd = -1;
  proto::Welcome welcome{};
  char* seg = nullptr;
  std::vector<char> last;
};

}  // namespace ferry::test
