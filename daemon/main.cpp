// SPDX-License-Identifier: MIT
// ferryd: one daemon per device. See `ferryd --help`.
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "device/backend.hpp"
#include "ferry/wire.hpp"
#include "log.hpp"
#include "net/server.hpp"
#include "net/systemd.hpp"
#include "options.hpp"
#include "settings.hpp"
#include "startup.hpp"

namespace {
using namespace ferry::ferryd;

// The device the settings name, opened and said in the log; null after
// saying why not.
std::unique_ptr<Backend> open_and_say(const Options& o) {
  std::string why;
  OpenedDevice opened = open_device(o, why);
  std::unique_ptr<Backend> backend = std::move(opened.backend);
  if (!backend) {
    FERRY_LOG(error, "%s", why.c_str());
    if (!o.sim && o.backend != "cuda") FERRY_LOG(error, "no GPU here? `ferryd --sim` runs on the simulated device");
    return nullptr;
  }
  backend->set_fallback(opened.fallback);
  const DeviceInfo& info = backend->info();
  FERRY_LOG(info, "device %u: %s (%s), copy engine: %s, host import: %s", o.device, info.name.c_str(),
            info.backend.c_str(), info.copy_engine ? "yes" : "no", info.host_import ? "yes" : "no");
  if (info.sharing == "time-sliced")
    FERRY_LOG(warn, "the GPU is not shared through NVIDIA MPS (no MPS control daemon answers in $CUDA_MPS_PIPE_DIRECTORY): "
                    "an application's kernels and ferryd's copies run in turns, not together (a loop of uploads "
                    "and kernels measured 5x slower on the H200); start the MPS control daemon (ferry-mps.service) "
                    "and give ferryd and the applications the same CUDA_MPS_PIPE_DIRECTORY");
  return backend;
}

// The process set up for serving: no SIGPIPE, descriptors, timer slack.
void set_up_process() {
  std::signal(SIGPIPE, SIG_IGN);
  // Descriptors: the soft limit up to the hard one (the unit sets both); the
  // bounds on connections and allocations are sized from it.
  if (rlimit rl{}; getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  // Timers here are tens of microseconds (held uploads look at their value
  // that often); the default 50 µs of slack would double them.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

// Serves until stopped: the exit status.
int serve(const Options& o, std::unique_ptr<Backend> backend, int passed) {
  std::string why;
  boost::asio::io_context io(1);
  Server server(io, o, std::move(backend));
  if (passed >= 0) FERRY_LOG(info, "using the socket passed by systemd (socket activation)");
  if (server.listen(o.socket, passed, why) != 0) {
    FERRY_LOG(error, "%s", why.c_str());
    return 1;
  }
  FERRY_LOG(info, "listening on %s: %u slots of %llu bytes per client, at most %u clients", o.socket.c_str(), o.slots,
            static_cast<unsigned long long>(o.slot_bytes), o.limits.max_clients);
  RunningMarker marker(ferry::proto::running_marker_path(o.socket));
  if (const size_t left = server.run(); left != 0) {
    // --drain is over. Tearing the device down would wait for the copies
    // still queued (for ever, on a stuck device): the process ends without
    // it, and the driver ends them with it. Clients were told (Shutdown).
    FERRY_LOG(warn, "exiting with %zu copies still queued on the device (past --drain %.1f s)", left,
              o.drain_seconds);
    server.unlink_socket();
    marker.remove();
    std::fflush(nullptr);
    std::_Exit(0);
  }
  FERRY_LOG(info, "stopped");
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  // Under systemd every line, from the first, carries its syslog priority.
  log::priority_prefix() = std::getenv("JOURNAL_STREAM") != nullptr;
  Options o;
  if (const int r = read_settings(argc, argv, &o); r >= 0) return r;
  if (o.socket.rfind("/run/ferry/", 0) == 0) ::mkdir("/run/ferry", 0755);
  // Under socket activation systemd hands over the listening socket (fd 3).
  const int passed = systemd::listen_fd();
  // A second ferryd on a socket one serves: said before any device is opened.
  if (std::string why; passed < 0 && socket_served(o.socket, &why)) {
    FERRY_LOG(error, "%s", why.c_str());
    return 1;
  }
  std::unique_ptr<Backend> backend = open_and_say(o);
  if (!backend) return 1;
  set_up_process();
  return serve(o, std::move(backend), passed);
}
