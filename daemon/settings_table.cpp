// SPDX-License-Identifier: MIT
// ferryd's flags and configuration-file settings: names, defaults, help
// (settings_table.hpp).
#include "settings_table.hpp"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <string>

#include "ferry/util/size.hpp"

namespace po = boost::program_options;

namespace ferry::ferryd {

namespace {

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

const char* const kUsage = R"(usage: ferryd [options]

ferryd owns one GPU's context and a pinned staging ring, and performs
host-to-device uploads for every process that connects to its socket.
A client copies its bytes into a slot of its own shared-memory segment,
asks the daemon to queue the device copy, and returns at once.

Runs in the foreground and logs to stderr. SIGTERM or SIGINT: stop
accepting, let copies in flight finish (at most --drain seconds), tell
the clients, exit 0.

Options)";

// clang-format off
void describe_program(po::options_description& cli, SettingTexts& t) {
  cli.add_options()
    ("help,h", "show this help and exit")
    ("version", "print the version and exit")
    ("check-config", "read the configuration file and the flags, report the first bad setting (exit 2) or that "
     "all are valid (exit 0), and exit without opening the device")
    ("verbose,v", "log at level debug (as --log-level debug)")
    ("quiet,q", "log warnings and errors only (as --log-level warn)")
    ("config,c", po::value(&t.config)->default_value(t.config),
     "configuration file (INI: `name = value`, one per line, names as the long options; "
     "a flag given here wins over the file; a missing default file is fine)");
}

void describe_device(po::options_description& desc, Options& o, SettingTexts& t) {
  desc.add_options()
    ("device,d", po::value(&o.device)->default_value(o.device), "device index (across the backend's drivers)")
    ("socket,s", po::value(&o.socket), "listening socket (default $FERRY_SOCKET, else /run/ferry/ferryd-<device>.sock)")
    ("sim", po::bool_switch(&o.sim), "run on ferry's bundled simulated Level Zero device (no GPU needed)")
    ("fallback-sim", po::value(&o.fallback_sim)->default_value(o.fallback_sim),
     "with the level-zero backend, serve the simulated device where the host has no Level Zero GPU driver at "
     "all (said in the log and in `ferryctl status`); false: fail to start there")
    ("sim-memory", po::value(&t.sim_memory)->default_value(t.sim_memory),
     "the simulated device's memory, in bytes or with a unit (16G, 512 MiB) (0: half of the host's available "
     "memory at start, at most 16 GiB; allocations past it fail with ENOMEM)")
    ("backend,b", po::value(&o.backend)->default_value(o.backend), "level-zero or cuda")
    ("slot-size", po::value(&t.slot_size)->default_value(t.slot_size),
     "size of a staging slot (the largest single copy), in bytes or with a unit (256K, 1 MiB): a multiple of 64 "
     "from 4 KiB to 1 GiB")
    ("slots", po::value(&o.slots)->default_value(o.slots), "staging slots per client");
}

void describe_limits(po::options_description& desc, Options& o, SettingTexts& t) {
  desc.add_options()
    ("max-clients", po::value(&o.limits.max_clients)->default_value(o.limits.max_clients),
     "clients of all users served at once; more are refused (EUSERS)")
    ("max-connections", po::value(&o.limits.max_connections)->default_value(o.limits.max_connections),
     "connections of all users at once, with or without Hello (0: max-clients + 64); more are closed at once")
    ("user-share", po::value(&o.limits.user_share)->default_value(o.limits.user_share),
     "percent of --max-clients, --max-connections and --max-buffers-total one user may take, so no user "
     "locks out the others; admins (root, ferryd's user, --admin-group) are not bounded so, and 8 "
     "connections past --max-connections are theirs alone")
    ("hello-timeout", po::value(&o.hello_seconds)->default_value(o.hello_seconds),
     "seconds a connection may take to send Hello (or its status request) before it is closed")
    ("max-grants", po::value(&o.limits.max_grants)->default_value(o.limits.max_grants), "grants one user's clients may hold at once")
    ("max-opens", po::value(&o.limits.max_opens)->default_value(o.limits.max_opens), "granted buffers one user's clients may hold open")
    ("max-imports", po::value(&o.limits.max_imports)->default_value(o.limits.max_imports), "imported allocations one user's clients may hold")
    ("max-event-pools", po::value(&o.limits.max_event_pools)->default_value(o.limits.max_event_pools),
     "IPC event pools one user's clients may register")
    ("max-buffers", po::value(&o.limits.max_buffers)->default_value(o.limits.max_buffers),
     "device allocations one user's clients may hold at once")
    ("max-buffers-total", po::value(&o.limits.max_buffers_total)->default_value(o.limits.max_buffers_total),
     "device allocations of all users together (0: with --sim, what the descriptor limit leaves after the "
     "connections, since each simulated allocation holds a descriptor; otherwise no bound)")
    ("user-memory", po::value(&t.user_memory)->default_value(t.user_memory),
     "device memory one user's clients may hold together: a size (bytes, or with a unit: 256M, 8 GiB), or a "
     "share of the device's memory such as 50% (0 or 100%: no limit); also, apart, what one user may have "
     "exported (ferry_buffer_export), charged until ferryd restarts")
    ("client-memory", po::value(&t.client_memory), "the old name of --user-memory (now per user, not per client)")
    ("user-staging", po::value(&t.user_staging)->default_value(t.user_staging),
     "staging areas one user's clients may hold beyond their segments (direct uploads, ferry-run, that outgrow "
     "their client's staging), in bytes or with a unit (512M, 2 GiB); 0: none; auto: an eighth of the host's "
     "memory, at most 4 GiB");
}

void describe_service(po::options_description& desc, Options& o, SettingTexts& t) {
  desc.add_options()
    ("socket-mode", po::value(&t.socket_mode)->default_value(t.socket_mode), "permissions of the socket file (octal)")
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
    ("log-level", po::value(&t.log_level)->default_value(t.log_level), "error, warn, info or debug");
}
// clang-format on

}  // namespace

const char* const kSettingsEpilogue = R"(
Environment:
  FERRY_SOCKET         default socket path when --socket is not given
  FERRY_SIM_DRIVER     path of the simulated driver library (for --sim)
  FERRY_SIM_*          the simulated device's cost model and fault injection (see the
                       README, "Pointing your own Level Zero program at the simulated
                       device")

Exit status: 0 after an orderly stop, 1 when the device or socket cannot be
set up, 2 on a usage error.
)";

SettingsTable::SettingsTable(Options* o, SettingTexts* t)
    : program(kUsage), settings("Settings (flags, or lines of the configuration file)") {
  char mode[16];
  std::snprintf(mode, sizeof mode, "%04o", o->socket_mode);
  t->socket_mode = mode;
  t->user_memory = std::to_string(o->limits.user_memory_percent) + "%";
  t->slot_size = ferry::util::format_size(o->slot_bytes);
  t->sim_memory = std::to_string(o->sim_memory);
  t->config = default_config_path();
  describe_program(program, *t);
  describe_device(settings, *o, *t);
  describe_limits(settings, *o, *t);
  describe_service(settings, *o, *t);
}

}  // namespace ferry::ferryd
