// SPDX-License-Identifier: MIT
// ferry-run: runs an unmodified program, and every program it starts, with
// its host-to-device copies from pageable memory staged by ferry. It sets
// the environment the interposers read and executes the command in its
// place (no process of its own stays):
//   Level Zero  ZE_ENABLE_ALT_DRIVERS names ferry's wrapping driver first,
//               which loads the program's own first driver ($FERRY_RUN_ZE_DRIVER);
//   CUDA        LD_PRELOAD starts with libferry_cuda_run.so.
#include <dlfcn.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ferry/ferry.h>

namespace {

const char kUsage[] =
    "usage: ferry-run [OPTIONS] [--] COMMAND [ARGS...]\n"
    "\n"
    "Runs COMMAND, and the programs it starts, so that their host-to-device copies from\n"
    "pageable memory (cudaMemcpyAsync, cudaMemcpy, cuMemcpyHtoD*, zeCommandListAppendMemoryCopy)\n"
    "are staged into ferry's pinned staging before the call returns, then copied by the\n"
    "program's own stream or command list, in its order. The program needs no change; what\n"
    "ferry cannot or need not stage goes to the driver as before (ferryctl status counts why).\n"
    "\n"
    "Options:\n"
    "  --socket PATH     ferryd's socket (default: $FERRY_SOCKET, else /run/ferry/ferryd-0.sock)\n"
    "  --min-bytes N     stage copies of N bytes and more (default: 2097153 on CUDA, whose driver\n"
    "                    stages up to 2 MiB itself and returns at once; every size on Level Zero,\n"
    "                    whose driver reads the source only when the copy runs)\n"
    "  --lanes N         ferry clients per process, one stream or command list each at a time\n"
    "                    (default 8, at most 64)\n"
    "  --list-bytes N    host memory per process for copies on regular Level Zero command\n"
    "                    lists, each filled from its source when the list is executed\n"
    "                    (default 268435456; 0: such copies go to the driver)\n"
    "  --ahead-bytes N   pinned staging made ahead for each CUDA context once the program\n"
    "                    allocates device memory, so that its first large upload finds it\n"
    "                    (default 67108864; 0: nothing is readied ahead)\n"
    "  --report FILE     each process appends one JSON line of its counts to FILE at exit\n"
    "  --stats           each process prints that line on stderr at exit\n"
    "  --off             load the interposers but stage nothing (for measuring their cost)\n"
    "  --no-cuda         leave CUDA alone (no LD_PRELOAD)\n"
    "  --no-level-zero   leave Level Zero alone (ZE_ENABLE_ALT_DRIVERS unchanged)\n"
    "  -h, --help        show this help and exit\n"
    "  --version         print the version and exit\n"
    "\n"
    "Exit status: COMMAND's; 125 when ferry-run itself fails, 126 when COMMAND cannot be\n"
    "executed, 127 when it is not found. See ferry-run(1).\n";

int fail(const std::string& what) {
  std::fprintf(stderr, "ferry-run: %s\n", what.c_str());
  return 125;
}

bool is_number(const char* s) {
  if (s == nullptr || *s == '\0') return false;
  for (const char* p = s; *p != '\0'; ++p)
    if (*p < '0' || *p > '9') return false;
  return std::strlen(s) <= 19;
}

// Where the interposers lie: $FERRY_RUN_LIBDIR, beside an installed
// ferry-run (<prefix>/lib/<triplet>/ferry), or in the build tree (here).
std::string library_dir() {
  if (const char* e = std::getenv("FERRY_RUN_LIBDIR"); e != nullptr && *e != '\0') return e;
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  std::string dir(exe, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  for (const std::string rel : {"/../" FERRY_LIBDIR "/ferry", "/../lib/ferry", ""}) {
    struct stat st{};
    if (::stat((dir + rel + "/libferry_ze_run.so.1").c_str(), &st) == 0) {
      char real[PATH_MAX];
      if (realpath((dir + rel).c_str(), real) != nullptr) return real;
    }
  }
  return "";
}

// ferry's simulated Level Zero driver, as ferryd finds it: $FERRY_SIM_DRIVER,
// installed beside this program, in the build tree, or in the same folder
// (the wheel's ferry/_native); "" if none.
std::string sim_driver() {
  if (const char* e = std::getenv("FERRY_SIM_DRIVER"); e != nullptr && *e != '\0') return e;
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  std::string dir(exe, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  for (const std::string rel : {"/../lib/ferry", "/../" FERRY_LIBDIR "/ferry", "/../sim", ""}) {
    char real[PATH_MAX];
    if (realpath((dir + rel + "/libze_ferry_sim.so.1").c_str(), real) != nullptr) return real;
  }
  return "";
}

// Whether a GPU driver opens here: Level Zero's defaults, or CUDA's.
bool gpu_driver_here() {
  for (const char* lib : {"libze_intel_gpu.so.1", "libze_intel_vpu.so.1", "libcuda.so.1"})
    if (void* h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(h);
      return true;
    }
  return false;
}

// The program's Level Zero drivers: ferry's wrapper in place of the first,
// the rest as they were. An entry is never empty (an empty one makes the
// loader open the program itself: LEVEL_ZERO.md). On a machine with no GPU
// driver at all, and no driver named, the program's first driver is ferry's
// simulated device, as ferryd's is there (said once).
bool wrap_level_zero(const std::string& shim) {
  const char* given = std::getenv("ZE_ENABLE_ALT_DRIVERS");
  std::vector<std::string> drivers;
  std::string list = given != nullptr && *given != '\0' ? given : "libze_intel_gpu.so.1,libze_intel_vpu.so.1";
  if ((given == nullptr || *given == '\0') && !gpu_driver_here()) {
    if (const std::string sim = sim_driver(); !sim.empty()) {
      std::fprintf(stderr,
                   "ferry-run: no GPU driver here: the program's Level Zero calls go to ferry's simulated device (%s; "
                   "ZE_ENABLE_ALT_DRIVERS chooses another)\n",
                   sim.c_str());
      list = sim;
    }
  }
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) drivers.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  if (drivers.empty()) return false;
  if (drivers.front() == shim) return true;  // under ferry-run already
  if (setenv("FERRY_RUN_ZE_DRIVER", drivers.front().c_str(), 1) != 0) return false;
  std::string value = shim;
  for (size_t i = 1; i < drivers.size(); ++i) value += "," + drivers[i];
  return setenv("ZE_ENABLE_ALT_DRIVERS", value.c_str(), 1) == 0;
}

bool preload(const std::string& lib) {
  const char* given = std::getenv("LD_PRELOAD");
  std::string value = given != nullptr ? given : "";
  if (value.find(lib) != std::string::npos) return true;
  value = value.empty() ? lib : lib + ":" + value;
  return setenv("LD_PRELOAD", value.c_str(), 1) == 0;
}

// What the command line asked for.
struct Run {
  bool cuda = true, level_zero = true;
  int command = 0;  // argv's index of the program to run
};

// --report's file, absolute: a program that changes directory still writes there.
int set_report(const char* v) {
  if (v == nullptr || *v == '\0') return fail("--report needs a file");
  std::string path = v;
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == nullptr) return fail("cannot tell the current directory for --report");
    path = std::string(cwd) + "/" + path;
  }
  setenv("FERRY_RUN_REPORT", path.c_str(), 1);
  return -1;
}

// One option that takes a value, at argv[*i] (the value next): -1 when it
// was one and was good, 0 when it is none of these, else the exit status.
int value_option(const std::string& a, int argc, char** argv, int* i) {
  if (a != "--socket" && a != "--min-bytes" && a != "--lanes" && a != "--list-bytes" && a != "--ahead-bytes" &&
      a != "--report")
    return 0;
  const char* v = *i + 1 < argc ? argv[++*i] : nullptr;
  if (a == "--report") return set_report(v);
  if (a == "--socket") {
    if (v == nullptr || *v == '\0') return fail("--socket needs a path");
    setenv("FERRY_SOCKET", v, 1);
    return -1;
  }
  if (!is_number(v)) return fail(a + " needs a number (got " + (v != nullptr ? "\"" + std::string(v) + "\"" : "nothing") + ")");
  if (a == "--lanes" && (std::strtoull(v, nullptr, 10) < 1 || std::strtoull(v, nullptr, 10) > 64))
    return fail("--lanes must be from 1 to 64");
  const char* name = a == "--lanes"         ? "FERRY_RUN_LANES"
                     : a == "--list-bytes"  ? "FERRY_RUN_LIST_BYTES"
                     : a == "--ahead-bytes" ? "FERRY_RUN_AHEAD_BYTES"
                                            : "FERRY_RUN_MIN_BYTES";
  setenv(name, v, 1);
  return -1;
}

// The options before the command: -1 with run->command set, else the exit
// status (0 after --help or --version).
int read_options(int argc, char** argv, Run* run) {
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-') break;
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--version") {
      std::printf("ferry-run %s\n", ferry_version());
      return 0;
    }
    if (int r = value_option(a, argc, argv, &i); r != 0) {
      if (r > 0) return r;
    } else if (a == "--stats" || a == "--off") {
      setenv(a == "--stats" ? "FERRY_RUN_STATS" : "FERRY_RUN_OFF", "1", 1);
    } else if (a == "--no-cuda" || a == "--no-level-zero") {
      (a == "--no-cuda" ? run->cuda : run->level_zero) = false;
    } else {
      return fail("unknown option " + a + " (ferry-run --help lists them)");
    }
  }
  if (i >= argc) return fail("no command to run (ferry-run --help)");
  run->command = i;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Run run;
  if (int r = read_options(argc, argv, &run); r >= 0) return r;
  const std::string dir = library_dir();
  if (dir.empty()) return fail("cannot find ferry's interposers (libferry_ze_run.so.1): set FERRY_RUN_LIBDIR");
  if (run.level_zero && !wrap_level_zero(dir + "/libferry_ze_run.so.1")) return fail("cannot set ZE_ENABLE_ALT_DRIVERS");
  if (run.cuda && !preload(dir + "/libferry_cuda_run.so")) return fail("cannot set LD_PRELOAD");
  // Copies go to the driver while no daemon answers; say so once, here.
  const char* socket = ferry_socket_path(nullptr);
  struct stat st{};
  if (socket != nullptr && ::stat(socket, &st) != 0)
    std::fprintf(stderr, "ferry-run: no ferryd socket at %s: the program's copies go to the driver until one listens\n",
                 socket);
  execvp(argv[run.command], argv + run.command);
  const int e = errno;
  std::fprintf(stderr, "ferry-run: %s: %s\n", argv[run.command], std::strerror(e));
  return e == ENOENT ? 127 : 126;
}
