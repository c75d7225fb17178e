// SPDX-License-Identifier: MIT
// ferryd's settings: the command line and the configuration file, each
// checked, with the file and line of the first bad one (settings.hpp).
#include "settings.hpp"

// ferryd: one daemon per device. See `ferryd --help`.
#include <fcntl.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/program_options.hpp>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "ferry/proto.hpp"
#include "device/backend.hpp"
#include "ferry/wire.hpp"
#include "log.hpp"
#include "ferry/util/size.hpp"
#include "options.hpp"
#include "net/server.hpp"
#include "startup.hpp"
#include "net/systemd.hpp"

namespace po = boost::program_options;

namespace {

const char* const kUsage = R"(usage: ferryd [options]

ferryd owns one GPU's context and a pinned staging ring, and performs
host-to-device uploads for every process that connects to its socket.
A client copies its bytes into a slot of its own shared-memory segment,
asks the daemon to queue the device copy, and returns at once.

Runs in the foreground and logs to stderr. SIGTERM or SIGINT: stop
accepting, let copies in flight finish (at most --drain seconds), tell
the clients, exit 0.

Options)";

const char* const kMore = R"(
Environment:
  FERRY_SOCKET         default socket path when --socket is not given
  FERRY_SIM_DRIVER     path of the simulated driver library (for --sim)
  FERRY_SIM_*          the simulated device's cost model and fault injection (see the
                       README, "Pointing your own Level Zero program at the simulated
                       device")

Exit status: 0 after an orderly stop, 1 when the device or socket cannot be
set up, 2 on a usage error.
)";

// Where a refusal goes: stderr, as an error line journald files at priority
// err when ferryd runs under systemd.
std::ostream& err() {
  if (ferry::ferryd::log::priority_prefix()) std::cerr << "<3>";
  return std::cerr;
}

// A user or group a setting names, checked now (the daemon would fail to
// start, or start without the admins it was given, much later).
bool group_exists(const std::string& g) { return g.empty() || ::getgrnam(g.c_str()) != nullptr; }

}  // namespace

// Where `cmake --install` put ferryd.conf for the prefix this ferryd was
// installed to (cmake/install_paths.cmake): /etc for /usr, else
// <prefix>/etc, the prefix being what holds this program's bin/. A ferryd
// that is not in a bin/ (a build tree) reads /etc's.
std::string default_config_path() {
  char exe[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string path(exe, n > 0 ? static_cast<size_t>(n) : 0);
  const std::string tail = "/bin/ferryd";
  if (path.size() <= tail.size() || path.compare(path.size() - tail.size(), tail.size(), tail) != 0)
    return "/etc/ferry/ferryd.conf";
  const std::string prefix = path.substr(0, path.size() - tail.size());
  return prefix.empty() || prefix == "/usr" ? "/etc/ferry/ferryd.conf" : prefix + "/etc/ferry/ferryd.conf";
}

namespace ferry::ferryd {

int read_settings(int argc, char** argv, Options* out) {
  Options& o = *out;
  // Every default is Options' own: the flags show and start from it.
  char mode_text[16];
  std::snprintf(mode_text, sizeof mode_text, "%04o", o.socket_mode);
  std::string socket_mode = mode_text;
  std::string log_level = "info";
  ferry::ferryd::Limits& l = o.limits;
  std::string user_memory = std::to_string(l.user_memory_percent) + "%";
  std::string client_memory;  // the old name of --user-memory
  std::string user_staging = "auto";
  // Sizes as strings, read by ferry::util::parse_size: "256M", "1 GiB", bytes.
  std::string slot_size = ferry::util::format_size(o.slot_bytes);
  std::string sim_memory = std::to_string(o.sim_memory);
  std::string config = default_config_path();
  po::options_description cli(kUsage);
  // clang-format off
  cli.add_options()
    ("help,h", "show this help and exit")
    ("version", "print the version and exit")
    ("check-config", "read the configuration file and the flags, report the first bad setting (exit 2) or that "
     "all are valid (exit 0), and exit without opening the device")
    ("verbose,v", "log at level debug (as --log-level debug)")
    ("quiet,q", "log warnings and errors only (as --log-level warn)")
    ("config,c", po::value(&config)->default_value(config),
     "configuration file (INI: `name = value`, one per line, names as the long options; "
     "a flag given here wins over the file; a missing default file is fine)");
  po::options_description desc("Settings (flags, or lines of the configuration file)");
  desc.add_options()
    ("device,d", po::value(&o.device)->default_value(o.device), "device index (across the backend's drivers)")
    ("socket,s", po::value(&o.socket), "listening socket (default $FERRY_SOCKET, else /run/ferry/ferryd-<device>.sock)")
    ("sim", po::bool_switch(&o.sim), "run on ferry's bundled simulated Level Zero device (no GPU needed)")
    ("fallback-sim", po::value(&o.fallback_sim)->default_value(o.fallback_sim),
     "with the level-zero backend, serve the simulated device where the host has no Level Zero GPU driver at "
     "all (said in the log and in `ferryctl status`); false: fail to start there")
    ("sim-memory", po::value(&sim_memory)->default_value(sim_memory),
     "the simulated device's memory, in bytes or with a unit (16G, 512 MiB) (0: half of the host's available "
     "memory at start, at most 16 GiB; allocations past it fail with ENOMEM)")
    ("backend,b", po::value(&o.backend)->default_value(o.backend), "level-zero or cuda")
    ("slot-size", po::value(&slot_size)->default_value(slot_size),
     "size of a staging slot (the largest single copy), in bytes or with a unit (256K, 1 MiB): a multiple of 64 "
     "from 4 KiB to 1 GiB")
    ("slots", po::value(&o.slots)->default_value(o.slots), "staging slots per client")
    ("max-clients", po::value(&l.max_clients)->default_value(l.max_clients),
     "clients of all users served at once; more are refused (EUSERS)")
    ("max-connections", po::value(&l.max_connections)->default_value(l.max_connections),
     "connections of all users at once, with or without Hello (0: max-clients + 64); more are closed at once")
    ("user-share", po::value(&l.user_share)->default_value(l.user_share),
     "percent of --max-clients, --max-connections and --max-buffers-total one user may take, so no user "
     "locks out the others; admins (root, ferryd's user, --admin-group) are not bounded so, and 8 "
     "connections past --max-connections are theirs alone")
    ("hello-timeout", po::value(&o.hello_seconds)->default_value(o.hello_seconds),
     "seconds a connection may take to send Hello (or its status request) before it is closed")
    ("max-grants", po::value(&l.max_grants)->default_value(l.max_grants), "grants one user's clients may hold at once")
    ("max-opens", po::value(&l.max_opens)->default_value(l.max_opens), "granted buffers one user's clients may hold open")
    ("max-imports", po::value(&l.max_imports)->default_value(l.max_imports), "imported allocations one user's clients may hold")
    ("max-event-pools", po::value(&l.max_event_pools)->default_value(l.max_event_pools),
     "IPC event pools one user's clients may register")
    ("max-buffers", po::value(&l.max_buffers)->default_value(l.max_buffers),
     "device allocations one user's clients may hold at once")
    ("max-buffers-total", po::value(&l.max_buffers_total)->default_value(l.max_buffers_total),
     "device allocations of all users together (0: with --sim, what the descriptor limit leaves after the "
     "connections, since each simulated allocation holds a descriptor; otherwise no bound)")
    ("user-memory", po::value(&user_memory)->default_value(user_memory),
     "device memory one user's clients may hold together: a size (bytes, or with a unit: 256M, 8 GiB), or a "
     "share of the device's memory such as 50% (0 or 100%: no limit); also, apart, what one user may have "
     "exported (ferry_buffer_export), charged until ferryd restarts")
    ("client-memory", po::value(&client_memory), "the old name of --user-memory (now per user, not per client)")
    ("user-staging", po::value(&user_staging)->default_value(user_staging),
     "staging areas one user's clients may hold beyond their segments (direct uploads, ferry-run, that outgrow "
     "their client's staging), in bytes or with a unit (512M, 2 GiB); 0: none; auto: an eighth of the host's "
     "memory, at most 4 GiB")
    ("socket-mode", po::value(&socket_mode)->default_value(socket_mode), "permissions of the socket file (octal)")
    ("socket-group", po::value(&o.socket_group), "group that owns the socket file (with --socket-mode 0660: who may connect)")
    ("admin-group", po::value(&o.admin_group),
     "members are admins, as root and ferryd's user: they see every client in `ferryctl status` (others see "
     "their own), may disconnect and drain, are not bounded by --user-share and have 8 connections kept for them; "
     "a member is a process with this group, or this supplementary group, when it connects")
    ("drain", po::value(&o.drain_seconds)->default_value(o.drain_seconds), "seconds copies in flight may take when stopping")
    ("poll-idle-us", po::value(&o.poll_idle_us)->default_value(o.poll_idle_us),
     "microseconds the poller keeps looking at clients' submission rings and the device after its last work "
     "before it sleeps (0: never poll; every upload then wakes ferryd)")
    ("segment-pool", po::value(&o.segment_pool)->default_value(o.segment_pool),
     "staging segments kept ready by a thread of their own, so a client's connect costs the others nothing "
     "(0: each Hello makes its own on the io thread)")
    ("poll-nap-us", po::value(&o.poll_nap_us)->default_value(o.poll_nap_us),
     "while the device holds 4+ copies and no ring has news, the poller naps this many microseconds per "
     "queued copy (at most 50) instead of spinning: less CPU, batches retired together (0: never nap)")
    ("log-level", po::value(&log_level)->default_value(log_level), "error, warn, info or debug");
  // clang-format on
  po::options_description all;
  all.add(cli).add(desc);
  po::variables_map vm;
  // Counts and sizes are unsigned: "-1" would wrap to 4294967295 unnoticed.
  struct Negative : std::runtime_error {
    Negative(const std::string& k, const std::string& v) : std::runtime_error(k + " must not be negative (got " + v + ")"), key(k) {}
    std::string key;
  };
  auto refuse_negative = [](const po::parsed_options& p) {
    for (const auto& opt : p.options)
      for (const auto& v : opt.value)
        if (!v.empty() && v[0] == '-' && opt.string_key != "log-level" && opt.string_key != "socket" &&
            opt.string_key != "config" && opt.string_key != "backend")
          throw Negative(opt.string_key, v);
  };
  std::string where = "command line";
  std::string path;
  std::set<std::string> from_cmdline;  // settings given as flags (they win over the file)
  std::vector<std::string> unknown;     // keys of the file that name no setting
  // The line of the configuration file that sets `name`, as "file:line", or the file.
  // The last one: a key given twice is refused at its second line.
  auto line_of = [&](const std::string& name) {
    std::ifstream again(where);
    int n = 0, at = 0;
    for (std::string line; std::getline(again, line);) {
      ++n;
      const auto k = line.find_first_not_of(" \t");
      const auto eq = line.find('=', k == std::string::npos ? 0 : k);
      if (k == std::string::npos || name.empty() || eq == std::string::npos) continue;
      std::string key = line.substr(k, eq - k);
      key.erase(key.find_last_not_of(" \t") + 1);
      if (key == name) at = n;
    }
    return at != 0 ? where + ":" + std::to_string(at) : where;
  };
  // The unknown keys of the file set before line `before` of it (all: 0),
  // said as the refusal of a bad setting would be; whether there was one.
  auto say_unknown = [&](int before) {
    bool any = false;
    for (const std::string& key : unknown) {
      const std::string at = line_of(key);
      const int line = std::atoi(at.substr(at.rfind(':') + 1).c_str());
      if (before != 0 && line >= before) continue;
      err() << "ferryd: " << at << ": unknown setting \"" << key << "\" (ferryd --help lists them)\n";
      any = true;
    }
    return any;
  };
  auto line_number = [&](const std::string& at) {
    return at.rfind(':') == std::string::npos ? 0 : std::atoi(at.substr(at.rfind(':') + 1).c_str());
  };
  try {
    auto cmdline = po::parse_command_line(argc, argv, all);
    for (const auto& opt : cmdline.options) from_cmdline.insert(opt.string_key);
    refuse_negative(cmdline);
    po::store(cmdline, vm);
    // The file fills only what the command line left unset.
    path = vm["config"].as<std::string>();
    std::ifstream in(path);
    if (in) {
      where = path;
      // Unknown keys are kept aside with their lines: a bad value on an
      // earlier line is said first (the first bad setting, in file order).
      auto file = po::parse_config_file(in, desc, true);
      for (const auto& opt : file.options)
        if (opt.unregistered) unknown.push_back(opt.string_key);
      refuse_negative(file);
      po::store(file, vm);
    } else if (!vm["config"].defaulted()) {
      err() << "ferryd: cannot read the configuration file " << path << "\n";
      return 2;
    }
    po::notify(vm);
  } catch (const std::exception& e) {
    // Name the file and line of a bad setting in the configuration file.
    std::string at = where;
    if (where != "command line") {
      std::string name = e.what();
      if (auto* pe = dynamic_cast<const po::error_with_option_name*>(&e)) name = pe->get_option_name();
      if (auto* ne = dynamic_cast<const Negative*>(&e)) name = ne->key;
      while (!name.empty() && name[0] == '-') name.erase(0, 1);
      if (from_cmdline.count(name) == 0) at = line_of(name);
    }
    if (at != "command line") say_unknown(line_number(at));
    err() << "ferryd: " << at << ": " << e.what() << "\n(try ferryd --help)\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << cli << "\n" << desc << kMore;
    return 0;
  }
  if (vm.count("version")) {
    std::cout << "ferryd " << FERRY_VERSION << "\n";
    return 0;
  }
  // A setting out of its range: said with where it was set (file:line, or the command line).
  auto bad = [&](const std::string& name, const std::string& rule) {
    const bool in_file = where != "command line" && from_cmdline.count(name) == 0 && !vm[name].defaulted();
    const std::string at = in_file ? line_of(name) : std::string("command line");
    say_unknown(in_file ? line_number(at) : 0);  // those above it in the file, or all (a flag's is said first)
    err() << "ferryd: " << at << ": " << name << " " << rule << "\n";
    return 2;
  };
  if (!ferry::util::parse_size(slot_size, &o.slot_bytes) || o.slot_bytes < 4096 || o.slot_bytes > (1ull << 30) ||
      o.slot_bytes % 64 != 0) {
    return bad("slot-size", "must be a multiple of 64 between 4 KiB and 1 GiB, in bytes or with a unit such as 256K "
                            "or 1M (got \"" + slot_size + "\")");
  }
  if (!ferry::util::parse_size(sim_memory, &o.sim_memory))
    return bad("sim-memory", "must be a size, in bytes or with a unit such as 4G (got \"" + sim_memory + "\")");
  if (o.slots < 1 || o.slots > 4096) {
    return bad("slots", "must be between 1 and 4096");
  }
  if (uint64_t{o.slots} * o.slot_bytes > ferry::proto::kStagingAlign << 32) {
    return bad("slots", "times slot-size must be at most 256 GiB (a client's staging area)");
  }
  if (l.max_connections == 0) l.max_connections = l.max_clients + 64;
  if (l.user_share < 1 || l.user_share > 100) {
    return bad("user-share", "must be a percentage from 1 to 100");
  }
  {
    // Bytes, or a share of the device's memory ("50%"), resolved once the device is open.
    char* end = nullptr;
    const bool old_name = !client_memory.empty() && vm["user-memory"].defaulted();
    const std::string& cm = old_name ? client_memory : user_memory;
    const char* const name = old_name ? "client-memory" : "user-memory";
    errno = 0;
    const unsigned long long v = std::strtoull(cm.c_str(), &end, 10);
    const bool percent = end != nullptr && end != cm.c_str() && std::string(end) == "%" && cm[0] != '-' && errno == 0;
    uint64_t bytes = 0;
    if (percent ? v > 100 : !ferry::util::parse_size(cm, &bytes)) {
      return bad(name, "must be a size (bytes, or with a unit: 256M, 8 GiB) or a share from 0% to 100%, such as 50% "
                       "(got \"" + cm + "\")");
    }
    l.user_memory = percent ? 0 : bytes;
    l.user_memory_percent = percent ? static_cast<uint32_t>(v) : 0;
  }
  if (!ferry::ferryd::parse_staging_bound(user_staging, &l.user_staging))
    return bad("user-staging", "must be a size (bytes, or with a unit: 512M, 2 GiB) or auto (got \"" + user_staging +
                                   "\")");
  if (o.segment_pool > 64) {
    return bad("segment-pool", "must be between 0 and 64");
  }
  if (o.poll_nap_us > 50) {
    return bad("poll-nap-us", "must be between 0 and 50");
  }
  if (o.poll_idle_us > 1'000'000) {
    return bad("poll-idle-us", "must be between 0 and 1000000");
  }
  if (o.hello_seconds <= 0 || o.hello_seconds > 3600) {
    return bad("hello-timeout", "must be above 0 and at most 3600 seconds");
  }
  if (l.max_clients < 1) {
    return bad("max-clients", "must be at least 1");
  }
  char* end = nullptr;
  o.socket_mode = static_cast<unsigned>(std::strtoul(socket_mode.c_str(), &end, 8));
  if (*end != '\0' || o.socket_mode > 0777) {
    return bad("socket-mode", "must be octal permissions from 0000 to 0777, e.g. 0660");
  }
  // Given (on the command line or in the file): applied to a socket handed
  // over by activation too, not only to one ferryd makes.
  o.socket_perms_given = !vm["socket-mode"].defaulted() || vm.count("socket-group") != 0;
  static const char* const kLevels[] = {"error", "warn", "info", "debug"};
  bool level_ok = false;
  for (int i = 0; i < 4; ++i)
    if (log_level == kLevels[i]) ferry::ferryd::log::threshold() = static_cast<ferry::ferryd::log::Level>(i), level_ok = true;
  if (!level_ok) return bad("log-level", "must be error, warn, info or debug (got \"" + log_level + "\")");
  if (vm.count("verbose") && vm.count("quiet")) {
    err() << "ferryd: -v and -q contradict each other\n";
    return 2;
  }
  if (vm.count("verbose")) ferry::ferryd::log::threshold() = ferry::ferryd::log::Level::debug;
  if (vm.count("quiet")) ferry::ferryd::log::threshold() = ferry::ferryd::log::Level::warn;
  if (o.backend != "level-zero" && o.backend != "ze" && o.backend != "cuda")
    return bad("backend", "must be level-zero or cuda (got \"" + o.backend + "\")");
  if (o.backend == "ze") o.backend = "level-zero";
  if (o.sim && o.backend != "level-zero") {
    err() << "ferryd: --sim is a Level Zero device; it cannot be combined with --backend " << o.backend << "\n";
    return 2;
  }
  if (o.socket.empty()) o.socket = ferry::proto::socket_path_from_env(o.device);
  for (const char* name : {"socket-group", "admin-group"}) {
    const std::string& g = std::string(name) == "socket-group" ? o.socket_group : o.admin_group;
    if (!group_exists(g)) return bad(name, "names a group this host does not have: \"" + g + "\" (getent group " + g + ")");
  }
  if (say_unknown(0)) return 2;
  if (vm.count("check-config")) {
    std::cout << "ferryd: settings valid (configuration file: " << (where == "command line" ? "none read" : where)
              << "; device " << o.device << ", backend " << (o.sim ? "simulated level-zero" : o.backend)
              << ", socket " << o.socket << ")\n";
    return 0;
  }
  return -1;
}

}  // namespace ferry::ferryd
