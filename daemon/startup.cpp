// SPDX-License-Identifier: MIT
#include "startup.hpp"

#include "ferry/util/size.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <level_zero/ze_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "ferry/util/files.hpp"
#include "ferry/proto.hpp"
#include "ferry/wire.hpp"
#include "ferry/fdpass.hpp"
#include "log.hpp"

namespace ferry::ferryd {

namespace {

// Finds the simulated driver: $FERRY_SIM_DRIVER, the installed copy beside
// this program, or the one in the build tree.
std::string locate_sim() {
  if (const char* e = std::getenv("FERRY_SIM_DRIVER"); e != nullptr && *e != '\0') return e;
  char exe[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    for (const char* rel : {"/../lib/ferry/libze_ferry_sim.so.1", "/../" FERRY_LIBDIR "/ferry/libze_ferry_sim.so.1",
                            "/../sim/libze_ferry_sim.so.1"}) {
      std::string p = dir + rel;
      char real[PATH_MAX];
      if (realpath(p.c_str(), real) != nullptr) return real;
    }
  }
  return FERRY_SIM_BUILD_PATH;
}

// Whether this host has a Level Zero GPU driver, asked of a child process:
// zeInit can be called once per process, and the simulated driver must be
// named before it. Exit 0: a driver with a device; 3: none; 4: no loader.
bool level_zero_gpu_present(std::string* why) {
  const pid_t pid = fork();
  if (pid < 0) return true;  // cannot tell: try the real device, and fail as before
  if (pid == 0) {
    void* lib = dlopen("libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) _exit(4);
    auto init = reinterpret_cast<ze_result_t (*)(ze_init_flags_t)>(dlsym(lib, "zeInit"));
    auto get = reinterpret_cast<ze_result_t (*)(uint32_t*, ze_driver_handle_t*)>(dlsym(lib, "zeDriverGet"));
    uint32_t n = 0;
    if (init == nullptr || get == nullptr || init(ZE_INIT_FLAG_GPU_ONLY) != ZE_RESULT_SUCCESS ||
        get(&n, nullptr) != ZE_RESULT_SUCCESS || n == 0)
      _exit(3);
    _exit(0);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) == 0) return true;
  *why = WEXITSTATUS(st) == 4 ? "no Level Zero loader (libze_loader.so.1)" : "no Level Zero GPU driver on this host";
  return false;
}

}  // namespace

OpenedDevice open_device(const Options& o, std::string& why) {
  OpenedDevice d;
  bool sim = o.sim;
  if (!sim && o.fallback_sim && o.backend != "cuda" && !level_zero_gpu_present(&d.fallback)) sim = true;
  if (sim) {
    // One absolute path, no trailing comma: an empty entry makes the loader
    // dlopen("") and recurse into itself.
    const std::string path = locate_sim();
    setenv("ZE_ENABLE_ALT_DRIVERS", path.c_str(), 1);
    if (o.sim_memory != 0) setenv("FERRY_SIM_DEVICE_MEMORY", std::to_string(o.sim_memory).c_str(), 1);
    if (!d.fallback.empty()) {
      FERRY_LOG(warn, "%s: serving the simulated device instead (fallback-sim = true); uploads go to host memory, "
                      "not to a GPU", d.fallback.c_str());
    }
    FERRY_LOG(info, "simulated device: ZE_ENABLE_ALT_DRIVERS=%s", path.c_str());
  }
  if (o.backend == "cuda") {
    d.backend = make_cuda_backend(o.device, why);
  } else {
    d.backend = make_level_zero_backend(o.device, why);
  }
  return d;
}

RunningMarker::RunningMarker(std::string path) : path_(std::move(path)) {
  // Readable by all whatever the umask (the unit's is 0077): ferryctl as
  // another user (the metrics timer) reads it.
  std::string what;
  if (int r = util::write_file_atomically(path_, std::to_string(::getpid()) + "\n", 0644, false, &what); r != 0) {
    FERRY_LOG(warn, "cannot %s (%s): `ferryctl --running-only` (ferry-metrics.service) will take this daemon "
                    "for stopped", what.c_str(), std::strerror(-r));
    path_.clear();
  }
}

void RunningMarker::remove() {
  if (path_.empty()) return;
  char buf[32] = {};
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n > 0 && std::strtol(buf, nullptr, 10) == ::getpid()) ::unlink(path_.c_str());
  }
  path_.clear();
}

bool socket_served(const std::string& socket, std::string* why) {
  int fd = -1;
  if (proto::connect_unix(socket, &fd) != 0) return false;
  ::close(fd);
  std::string pid;
  if (std::ifstream marker(proto::running_marker_path(socket)); marker && std::getline(marker, pid) &&
      !pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos)
    pid = " (pid " + pid + ")";
  else
    pid.clear();
  *why = "another ferryd" + pid + " already serves " + socket +
         ": stop it first (ferryctl drain, or systemctl stop ferryd@N), or give this one another --socket";
  return true;
}

bool parse_staging_bound(const std::string& text, uint64_t* bytes) {
  if (text == "auto") {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const uint64_t host = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
    *bytes = std::min<uint64_t>(host / 8, 4ull << 30);
    return true;
  }
  return ferry::util::parse_size(text, bytes);
}

}  // namespace ferry::ferryd
