// SPDX-License-Identifier: MIT
// flood_bench: does socket traffic from another local user slow a ring
// client down, and what does a hold that is never answered cost ferryd?
//
// A victim client uploads 4 KiB and waits for it, over and over, and checks
// the bytes on the device at the end of each phase:
//   idle      nothing else runs
//   connect   2 threads connect and close, as fast as they can
//   Hello     2 threads connect, send Hello and close
//   Welcome   2 threads connect, send Hello, read the Welcome and close
//   doorbell  2 threads send Doorbell messages on a connection of their own
// Then a client that uploads every 2 ms, idle, during 16 threads of status
// requests and after them (its p99 back to idle's: no pause traps it).
// Then a client makes one ferry_upload_after whose value never comes, and
// ferryd's CPU time over the next seconds is read from /proc.
//
//   flood_bench --socket S --daemon-pid P [--ops N] [--hold-seconds S] [--phase-seconds S] [--nice-flood]
// A phase ends after N uploads or S seconds (20), whichever comes first.
// --nice-flood runs the flooding threads at nice 19: on a machine with fewer
// cores than runnable threads, what is left is ferryd's share of the delay,
// not the scheduler's.
// Prints Markdown to stdout.
#include <ferry/ferry.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ferry/proto.hpp"
#include "ferry/wire.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace proto = ferry::proto;

[[noreturn]] void die(const char* what, int r) {
  std::fprintf(stderr, "flood_bench: %s: %s (%s)\n", what, ferry_strerror(r), ferry_last_error());
  std::exit(1);
}

int dial(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

proto::Hello hello() {
  auto h = proto::make<proto::Hello>(proto::Type::hello);
  h.magic = proto::kMagic;
  h.version = proto::kVersion;
  proto::set_text(h.name, "flood");
  return h;
}

// Seconds of CPU (user + system) process `pid` has used.
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields;
  size_t at = close + 2;
  while (at < s.size()) {
    const size_t sp = s.find(' ', at);
    fields.push_back(s.substr(at, sp - at));
    if (sp == std::string::npos) break;
    at = sp + 1;
  }
  // Fields 14 and 15 (utime, stime) counted from 1; the list starts at field 3.
  if (fields.size() < 13) return 0;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / tick;
}

struct Phase {
  std::string name;
  double p50 = 0, p99 = 0;
  size_t ops = 0;
  size_t flood = 0;  // messages or connections the flood got through
  bool verified = false;
  double connect_ms = 0;  // the slowest of 5 new clients' ferry_connect meanwhile (-1: one failed)
};

double g_phase_seconds = 20;

// The victim: `ops` uploads of 4 KiB, each waited for (at most
// g_phase_seconds in all), `gap` apart (0: back to back; with a gap, ferryd's
// poller sleeps between them and each upload rings its doorbell); then the
// last one read back.
Phase victim(const std::string& name, ferry_client* c, ferry_buffer b, size_t ops, uint8_t seed,
             std::chrono::microseconds gap = std::chrono::microseconds(0)) {
  std::vector<uint8_t> src(4096), back(4096);
  std::vector<double> us;
  us.reserve(ops);
  const auto start = Clock::now();
  for (size_t i = 0; i < ops && std::chrono::duration<double>(Clock::now() - start).count() < g_phase_seconds; ++i) {
    for (size_t k = 0; k < src.size(); k += 64) src[k] = static_cast<uint8_t>(seed + i + k);
    const auto t0 = Clock::now();
    ferry_ticket t = 0;
    if (int r = ferry_upload(c, b, 0, src.data(), src.size(), &t); r != 0) die("upload", r);
    const double left = g_phase_seconds - std::chrono::duration<double>(Clock::now() - start).count();
    const int r = ferry_wait(c, t, static_cast<int64_t>(std::max(left, 0.001) * 1e9));
    if (r == -ETIMEDOUT) {
      // Still not done when the phase ended: counted as taking the whole phase.
      us.push_back(g_phase_seconds * 1e6);
      break;
    }
    if (r != 0) die("wait", r);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (gap.count() != 0) std::this_thread::sleep_for(gap);
  }
  if (us.size() == ops || us.back() < g_phase_seconds * 1e6) {
    if (int r = ferry_download(c, b, 0, back.data(), back.size()); r != 0) die("download", r);
  } else {
    back = src;  // stalled: checked by the next phase's uploads instead
  }
  if (us.empty()) us.push_back(g_phase_seconds * 1e6);
  std::sort(us.begin(), us.end());
  Phase p;
  p.name = name;
  p.p50 = us[us.size() / 2];
  p.p99 = us[us.size() * 99 / 100];
  p.ops = us.size();
  p.verified = back == src;
  return p;
}

// The slowest of 5 ferry_connect calls of a new client (each then
// disconnected), in ms; -1 if one failed.
double worst_connect(const std::string& socket) {
  double worst = 0;
  for (int k = 0; k < 5; ++k) {
    ferry_client* x = nullptr;
    const auto t0 = Clock::now();
    const int r = ferry_connect(socket.c_str(), &x);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (r != 0) return -1;
    ferry_disconnect(x);
    worst = std::max(worst, ms);
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket;
  pid_t daemon = 0;
  size_t ops = 5000;
  double hold_seconds = 3;
  bool nice_flood = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--socket" && i + 1 < argc) socket = argv[++i];
    else if (a == "--daemon-pid" && i + 1 < argc) daemon = static_cast<pid_t>(std::atoi(argv[++i]));
    else if (a == "--ops" && i + 1 < argc) ops = static_cast<size_t>(std::atol(argv[++i]));
    else if (a == "--hold-seconds" && i + 1 < argc) hold_seconds = std::atof(argv[++i]);
    else if (a == "--nice-flood") nice_flood = true;
    else if (a == "--phase-seconds" && i + 1 < argc) g_phase_seconds = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: flood_bench --socket PATH --daemon-pid PID [--ops N] [--hold-seconds S] [--phase-seconds S] [--nice-flood]\n");
      return 2;
    }
  }
  if (socket.empty() || daemon <= 0) {
    std::fprintf(stderr, "flood_bench: --socket and --daemon-pid are needed\n");
    return 2;
  }
  ferry_client* c = nullptr;
  if (int r = ferry_connect(socket.c_str(), &c); r != 0) die("connect", r);
  ferry_buffer b{};
  if (int r = ferry_buffer_alloc(c, 4096, &b); r != 0) die("alloc", r);
  victim("warm-up", c, b, ops / 10 + 1, 1);

  std::vector<Phase> phases;
  std::printf("| phase | victim 4 KiB upload+wait p50 (us) | p99 (us) | p99 / idle p99 | uploads done | flood got through "
              "| bytes checked | a new client's connect, worst of 5 (ms) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  auto row = [&](const Phase& p) {
    char connect[32];
    std::snprintf(connect, sizeof connect, p.connect_ms < 0 ? "failed" : "%.2f", p.connect_ms);
    std::printf("| %s | %.1f | %.1f | %.2f | %zu | %zu | %s | %s |\n", p.name.c_str(), p.p50, p.p99, p.p99 / phases[0].p99,
                p.ops, p.flood, p.verified ? "yes" : "WRONG", connect);
    std::fflush(stdout);
  };
  phases.push_back(victim("idle", c, b, ops, 2));
  phases.back().connect_ms = worst_connect(socket);
  row(phases.back());

  auto flooded = [&](const std::string& name, auto flood) {
    std::atomic<bool> stop{false};
    std::atomic<size_t> count{0};
    std::vector<std::thread> threads;
    for (int k = 0; k < 2; ++k)
      threads.emplace_back([&] {
        if (nice_flood) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
        flood(stop, count);
      });
    // The flood is running before the victim starts (or has failed to, for 5 s).
    for (const auto t0 = Clock::now(); count.load() < 16 && Clock::now() - t0 < std::chrono::seconds(5);)
      std::this_thread::yield();
    Phase p = victim(name, c, b, ops, static_cast<uint8_t>(3 + phases.size()));
    p.connect_ms = worst_connect(socket);
    stop = true;
    for (auto& t : threads) t.join();
    p.flood = count.load();
    phases.push_back(p);
    row(p);
  };
  flooded("connect+close, 2 threads", [&](std::atomic<bool>& stop, std::atomic<size_t>& n) {
    while (!stop) {
      const int fd = dial(socket);
      if (fd < 0) continue;
      ::close(fd);
      ++n;
    }
  });
  flooded("connect+Hello+close, 2 threads", [&](std::atomic<bool>& stop, std::atomic<size_t>& n) {
    const proto::Hello h = hello();
    while (!stop) {
      const int fd = dial(socket);
      if (fd < 0) continue;
      (void)::send(fd, &h, sizeof h, MSG_NOSIGNAL);
      ::close(fd);
      ++n;
    }
  });
  flooded("connect+Hello+Welcome+close, 2 threads", [&](std::atomic<bool>& stop, std::atomic<size_t>& n) {
    const proto::Hello h = hello();
    char reply[512];
    while (!stop) {
      const int fd = dial(socket);
      if (fd < 0) continue;
      // Waits for the Welcome (its segment's descriptor is discarded unread), so
      // ferryd hands a segment to every connection; at most a second, so a
      // daemon that never answers cannot hang the benchmark.
      const timeval limit{1, 0};
      (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
      if (::send(fd, &h, sizeof h, MSG_NOSIGNAL) == sizeof h) (void)::recv(fd, reply, sizeof reply, 0);
      ::close(fd);
      ++n;
    }
  });
  flooded("doorbell flood, 2 threads", [&](std::atomic<bool>& stop, std::atomic<size_t>& n) {
    const int fd = dial(socket);
    if (fd < 0) return;
    const proto::Hello h = hello();
    std::vector<uint8_t> msg;
    std::vector<int> fds;
    // The Welcome's second descriptor is the doorbell: rung without pause,
    // with nothing ever published in the ring (EAGAIN: a wake-up is pending).
    if (::send(fd, &h, sizeof h, MSG_NOSIGNAL) != sizeof h || proto::read_message(fd, msg, &fds) != 0 || fds.size() != 2)
      return (void)::close(fd);
    const char one = 1;
    while (!stop) {
      const ssize_t k = ::send(fds[1], &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k == 1) ++n;
      else if (errno != EAGAIN) break;
    }
    for (int f : fds) ::close(f);
    ::close(fd);
  });

  // After another user's traffic, quiet again: a client that uploads every
  // 2 ms (its doorbell rung each time) is back to its idle p99. A ring whose
  // entry the poller took first (woken by that traffic) once paused its
  // doorbell for good: 49 ms a ring.
  {
    const auto gap = std::chrono::microseconds(2000);
    const size_t n = std::min<size_t>(ops, 1500);
    Phase quiet = victim("every 2 ms, idle", c, b, n, 40, gap);
    std::atomic<bool> stop{false};
    std::atomic<size_t> count{0};
    std::vector<std::thread> threads;
    for (int k = 0; k < 16; ++k)
      threads.emplace_back([&] {
        auto req = proto::make<proto::StatusRequest>(proto::Type::status_request);
        req.request = 1;
        std::vector<uint8_t> msg;
        while (!stop) {
          const int fd = dial(socket);
          if (fd < 0) continue;
          if (proto::send_all(fd, &req, sizeof req) == 0 && proto::read_message(fd, msg) == 0) ++count;
          ::close(fd);
        }
      });
    // The victim goes on meanwhile, as an honest client would.
    Phase during = victim("every 2 ms, 16 threads of status requests", c, b, 400, 41, gap);
    stop = true;
    for (auto& t : threads) t.join();
    Phase after = victim("every 2 ms, after them", c, b, n, 42, gap);
    std::printf("\n| a client uploading 4 KiB every 2 ms | p50 (us) | p99 (us) | p99 / idle p99 | uploads | bytes checked |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (const Phase& p : {quiet, during, after})
      std::printf("| %s | %.1f | %.1f | %.2f | %zu | %s |\n", p.name.c_str(), p.p50, p.p99, p.p99 / quiet.p99, p.ops,
                  p.verified ? "yes" : "WRONG");
    std::printf("(status requests answered: %zu)\n", count.load());
    for (const Phase& p : {quiet, during, after}) phases.push_back(p);
  }

  // A hold that is never answered: ferryd's CPU while nothing else happens.
  // The flood's last Hellos may still hold every client place for a moment.
  ferry_client* h = nullptr;
  for (int tries = 0;; ++tries) {
    const int r = ferry_connect(socket.c_str(), &h);
    if (r == 0) break;
    if (r != -EUSERS || tries == 500) die("connect", r);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ferry_buffer hb{};
  if (int r = ferry_buffer_alloc(h, 4096, &hb); r != 0) die("alloc", r);
  uint8_t byte = 1;
  ferry_ticket ht = 0;
  // Idle first, as the baseline.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double idle0 = cpu_seconds(daemon);
  const auto i0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(hold_seconds));
  const double idle_share = (cpu_seconds(daemon) - idle0) / std::chrono::duration<double>(Clock::now() - i0).count();
  if (int r = ferry_upload_after(h, hb, 0, &byte, 1, UINT64_MAX, &ht); r != 0) die("upload_after", r);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double cpu0 = cpu_seconds(daemon);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(hold_seconds));
  const double share = (cpu_seconds(daemon) - cpu0) / std::chrono::duration<double>(Clock::now() - t0).count();
  ferry_disconnect(h);

  std::printf("\nferryd CPU, share of one core: idle %.4f; with one unanswered hold %.4f (%.0f s each)\n", idle_share,
              share, hold_seconds);
  ferry_disconnect(c);
  for (const Phase& p : phases)
    if (!p.verified) return 1;
  return 0;
}
