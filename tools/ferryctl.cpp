// SPDX-License-Identifier: MIT
// ferryctl: ask running ferryds what they hold. See `ferryctl --help`.
#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ferry/util/files.hpp"
#include "ferry/proto.hpp"
#include "ferry/util/size.hpp"
#include "ferry/wire.hpp"
#include "ferryctl.hpp"

namespace proto = ferry::proto;
namespace util = ferry::util;
namespace json = boost::json;
namespace po = boost::program_options;

using namespace ferry::ctl;

namespace {

const char* const kUsageLine = "usage: ferryctl [OPTIONS] COMMAND [ARG]";
const char* const kCommands = R"(
Shows what running ferryds hold: their device, staging rings, and each
connected client's share.

Commands:
  status           device, backend, ring geometry and occupancy, totals since
                   start, then one row per client
  watch            the status, refreshed every --interval seconds in 80
                   columns, until Ctrl-C; keeps polling while ferryd restarts
  metrics          Prometheus text exposition (every series labelled with its
                   device; per-client series with --per-client)
  ping             checks that the daemon answers; prints the round trip
  version          ferryctl's version and the daemon's
  disconnect ID    ends client ID's session (its resources are freed as for a
                   client that died); for the daemon's admins only
  drain            stops the daemon as SIGTERM does: no new clients, copies in
                   flight finish, clients are told, exit 0 (systemd's socket
                   starts it again on the next connection); admins only

Exit status: 0 ok; 1 a daemon answered with an error, or (--all) some of the
daemons did not answer; 2 usage error; 3 nothing answered: cannot connect
(the message names the path and the likely cause), or --all found no socket
or no daemon that answered. metrics exits 0 when it wrote every daemon's
ferry_up (1, or 0 with the reason) and each daemon either answered or, with
--running-only, is not running; 4 metrics could not write --output.

`ferryctl COMMAND --help` describes one command.

Root, the daemon's own user and its --admin-group see every client and may
disconnect them; other users see their own clients only.
)";

// `ferryctl COMMAND --help`.
struct CommandHelp {
  const char* name;
  const char* text;
};
const CommandHelp kCommandHelp[] = {
    {"status", R"(usage: ferryctl [--socket PATH | --device N | --all] [--json] status

The daemon's version and pid, its device (name, backend, driver, UUID and
PCI bus id, whether simulated), the staging ring (slots per client, bytes
per slot, transfers in flight), totals since it started, then one row per
client: id, pid, user (a name where the system has one), command, transfers
in flight of its entries, buffers, uploads, bytes, errors, since when.
Non-admins see their own clients only. --json: the daemon's whole document.
)"},
    {"watch", R"(usage: ferryctl [--socket PATH | --device N | --all] [--interval S] [--json] watch

Refreshes every --interval seconds (default 1) until Ctrl-C: per daemon, the
occupancy of its ring, and per client and in total the uploads per second
and GB/s over the last interval (as nvidia-smi dmon and dcgmi dmon show
rates), with the totals since start. The header stays on screen: rows are
cut to the terminal's height, the number left out is said. A daemon that
restarts is waited for. --json: one status document per daemon per interval
(JSON lines).
)"},
    {"metrics", R"(usage: ferryctl [--socket PATH | --device N | --all] [--per-client] [--running-only]
                [--output FILE] [--json] metrics

The Prometheus text exposition of each daemon: counters and gauges labelled
device="N", latency histograms, ferry_info with the version, backend, device
name and the labels of NVIDIA's DCGM exporter (gpu, UUID, pci_bus_id) to
join its series, and ferry_up: 1 when the daemon answered, 0 with a reason
label when it did not (the series of a stopped daemon say so, they do not
vanish). --running-only asks only daemons whose running marker
(<socket>.pid) names a live process: a socket that systemd holds for a
stopped or drained daemon is not connected to (that would start it again).
--output writes the file atomically, for the node exporter's textfile
collector (ferry-metrics.timer does every 15 s): a new file of a random name
beside it, never opened through a link, renamed over it; the mode and group of
a target of yours are kept.
)"},
    {"ping", R"(usage: ferryctl [--socket PATH | --device N | --all] [--json] ping

Checks that the daemon answers and prints the round trip in microseconds.
)"},
    {"version", R"(usage: ferryctl [--socket PATH | --device N | --all] [--json] version

ferryctl's own version, then each daemon's. Exit 0 even if no daemon answers
(ferryctl --version asks none).
)"},
    {"disconnect", R"(usage: ferryctl [--socket PATH | --device N] [--json] disconnect ID

Ends client ID's session (ID from ferryctl status): the daemon frees its
buffers, slots and grants as for a client that died; the client's next call
fails (its connection is gone). For the daemon's admins only: root, ferryd's own user,
members of its admin-group (ferryd.conf).
)"},
    {"drain", R"(usage: ferryctl [--socket PATH | --device N] [--json] drain

Stops the daemon as SIGTERM does: no new clients, copies in flight finish
(within its drain-timeout), clients are told, it exits 0. Under systemd the
socket stays and the next connection starts ferryd again; ferry-metrics.timer
(--running-only) does not. For the daemon's admins only.
)"},
};

struct Args {
  std::string socket;
  int device = -1;
  bool all = false;
  std::string socket_dir = "/run/ferry";
  bool json = false;
  bool per_client = false;
  bool running_only = false;
  double interval = 1.0;
  std::string output;
  std::string command;
  std::vector<std::string> rest;
};

// ---------------------------------------------------------------- commands
std::vector<std::string> sockets_of(const Args& a) {
  if (!a.all) return {a.socket};
  std::vector<std::string> v;
  if (DIR* dir = ::opendir(a.socket_dir.c_str())) {
    while (dirent* e = ::readdir(dir)) {
      const std::string n = e->d_name;
      if (n.rfind("ferryd-", 0) == 0 && n.size() > 12 && n.compare(n.size() - 5, 5, ".sock") == 0)
        v.push_back(a.socket_dir + "/" + n);
    }
    ::closedir(dir);
  }
  std::sort(v.begin(), v.end());
  if (v.empty()) std::fprintf(stderr, "ferryctl: no ferryd-*.sock in %s\n", a.socket_dir.c_str());
  return v;
}

volatile std::sig_atomic_t g_interrupted = 0;

int watch(const Args& a) {
  std::signal(SIGINT, [](int) { g_interrupted = 1; });
  std::signal(SIGTERM, [](int) { g_interrupted = 1; });
  const bool tty = isatty(STDOUT_FILENO) != 0;
  std::map<std::string, Seen> seen;
  while (!g_interrupted) {
    // On a terminal the screen is redrawn from the top and cut to its
    // height, so the header never scrolls away.
    int rows = 0;
    if (winsize ws{}; tty && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) rows = ws.ws_row;
    int left = rows > 0 ? rows - 1 : 0;  // the last line says the interval
    size_t unshown = 0;                   // daemons that did not fit
    if (tty && !a.json) std::fputs("\033[H\033[2J", stdout);  // home, clear
    for (const auto& s : sockets_of(a)) {
      json::object d;
      // A daemon that restarts is waited for, as watch(1) and nvidia-smi -l do.
      const int r = fetch_status(s, &d, nullptr, true);
      if (a.json) {
        if (r != kOk)
          std::printf("%s\n", json::serialize(json::object{{"socket", s}, {"error", "not answering"}}).c_str());
        else
          std::printf("%s\n", json::serialize(json::object{{"socket", s}, {"status", d}}).c_str());
        continue;
      }
      // Each daemon needs its header (6 lines with the blank one) or 3 when
      // it does not answer; one line stays for "N more daemons".
      if (rows > 0 && left < (r == kOk ? 7 : 4)) {
        ++unshown;
        continue;
      }
      if (r != kOk) {
        std::printf("%.78s\nnot answering (%s); still polling\n\n", s.c_str(), r == kNoConnect ? "no connection" : "bad reply");
        left -= 3;
        continue;
      }
      const int used = print_watch(s, d, &seen[s], rows > 0 ? left - 2 : 0);
      std::printf("\n");
      if (rows > 0) left -= used + 1;
    }
    if (unshown != 0) std::printf("(%zu more daemons not shown: a taller terminal, or ferryctl --all status)\n", unshown);
    if (!a.json) std::printf("(every %.1f s, rates over the last interval; Ctrl-C to stop)\n", a.interval);
    std::fflush(stdout);
    for (double t = 0; t < a.interval && !g_interrupted; t += 0.05) usleep(50'000);
  }
  return kOk;
}

// One administrator's request (AdminRequest) to the daemon at a.socket;
// `what` names it in an error. Returns an Exit code.
int admin(const Args& a, uint32_t action, uint64_t client, const std::string& what) {
  auto req = proto::make<proto::AdminRequest>(proto::Type::admin_request);
  req.request = 1;
  req.action = action;
  req.client = client;
  std::vector<uint8_t> msg;
  if (int r = ask(a.socket, &req, sizeof req, proto::Type::reply, &msg); r != kOk) return r;
  proto::Reply rep{};
  const int status = proto::as(msg, &rep) ? rep.status : -EPROTO;
  if (status != 0) {
    std::string fix;
    if (status == -EPERM || status == -EACCES)
      fix = "you are not an admin of this daemon: run it as root or as ferryd's user, or join the daemon's "
            "admin-group (set in ferryd.conf; ferryctl status lists who you may see)";
    else if (status == -ENOENT || status == -ESRCH)
      fix = "no such client on this daemon (it may have gone already): see the IDs in ferryctl status";
    else
      fix = std::strerror(-status);
    std::fprintf(stderr, "ferryctl: %s on %s: %s\n", what.c_str(), a.socket.c_str(), fix.c_str());
    return kDaemonError;
  }
  return kOk;
}

// ferryctl drain: an administrator's orderly stop.
int drain(const Args& a) {
  if (int r = admin(a, proto::kAdminDrain, 0, "drain"); r != kOk) return r;
  if (a.json)
    std::printf("%s\n", json::serialize(json::object{{"socket", a.socket}, {"draining", true}}).c_str());
  else
    std::printf("ferryd on %s is draining: copies in flight finish, then it exits\n", a.socket.c_str());
  return kOk;
}

int disconnect(const Args& a) {
  if (a.rest.size() != 1) {
    std::fprintf(stderr, "ferryctl: disconnect takes one client id (see ferryctl status)\n");
    return kUsage;
  }
  char* end = nullptr;
  const unsigned long long id = std::strtoull(a.rest[0].c_str(), &end, 10);
  if (*end != '\0' || id == 0) {
    std::fprintf(stderr, "ferryctl: \"%s\" is no client id\n", a.rest[0].c_str());
    return kUsage;
  }
  if (int r = admin(a, proto::kAdminDisconnect, id, "disconnect " + std::to_string(id)); r != kOk) return r;
  if (a.json)
    std::printf("%s\n", json::serialize(json::object{{"socket", a.socket}, {"disconnected", id}}).c_str());
  else
    std::printf("client %llu disconnected\n", id);
  return kOk;
}

// status, metrics, ping, version: each socket once.
int per_daemon(const Args& a) {
  int worst = kOk;
  int answered = 0, failed = 0;
  json::array docs;
  Families fams;
  const std::vector<std::string> socks = sockets_of(a);
  for (const auto& s : socks) {
    json::object d;
    double rtt = 0;
    if (a.running_only && !running(s)) {
      // Not connected to: systemd would start it (or undo a drain).
      if (a.command == "metrics") {
        add_up(fams, s, nullptr, "not running");
      } else if (a.json) {
        docs.push_back(json::object{{"socket", s}, {"running", false}});
      } else {
        std::printf("ferryd on %s: not running (no live %s); not asked\n", s.c_str(),
                    proto::running_marker_path(s).c_str());
      }
      continue;
    }
    int r = fetch_status(s, &d, &rtt, a.command == "version");
    if (r != kOk) {
      ++failed;
      worst = a.all ? kDaemonError : r;
      if (a.command == "version") std::printf("ferryd not answering on %s\n", s.c_str());
      if (a.command == "metrics") add_up(fams, s, nullptr, r == kNoConnect ? "no connection" : "bad reply");
      continue;
    }
    ++answered;
    if (a.command == "metrics") add_up(fams, s, &d, nullptr);
    if (a.command == "status") {
      if (a.json) {
        docs.push_back(a.all ? json::value(json::object{{"socket", s}, {"status", d}}) : json::value(d));
      } else {
        if (a.all) std::printf("== %s\n", s.c_str());
        print_status(d);
        if (a.all) std::printf("\n");
      }
    } else if (a.command == "metrics") {
      add_metrics(fams, d, a.per_client);
    } else if (a.command == "ping") {
      if (a.json)
        docs.push_back(json::object{{"socket", s}, {"rtt_us", rtt}});
      else
        std::printf("ferryd on %s answered in %.0f us\n", s.c_str(), rtt);
    } else if (a.command == "version") {
      if (a.json)
        docs.push_back(json::object{{"socket", s}, {"ferryd", str(d, "version")}});
      else
        std::printf("ferryd %s on %s\n", str(d, "version").c_str(), s.c_str());
    }
  }
  if (a.command == "metrics") {
    std::string text;
    if (a.json) {
      json::object o;
      for (const auto& [name, fam] : fams) {
        json::array samples;
        for (const auto& smp : fam.samples) samples.push_back(json::string(smp));
        o[name] = json::object{{"type", fam.type}, {"help", fam.help}, {"samples", std::move(samples)}};
      }
      text = json::serialize(o) + "\n";
    } else {
      text = exposition(fams);
    }
    if (!a.output.empty()) {
      if (int r = write_atomically(a.output, text); r != kOk) return r;
    } else {
      std::fputs(text.c_str(), stdout);
    }
  }
  // Nothing answered: --all found no socket, or no daemon that answered.
  if (a.all && (socks.empty() || (answered == 0 && failed > 0))) worst = kNoConnect;
  if (a.json && a.command != "metrics") {
    if (a.command == "version") {
      std::printf("%s\n", json::serialize(json::object{{"ferryctl", FERRY_VERSION}, {"daemons", docs}}).c_str());
    } else if (a.all || docs.size() != 1) {
      std::printf("%s\n", json::serialize(docs).c_str());
    } else {
      std::printf("%s\n", json::serialize(docs[0]).c_str());
    }
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  po::options_description opts("Options");
  // clang-format off
  opts.add_options()
    ("socket,s", po::value(&a.socket), "the daemon's socket (default: $FERRY_SOCKET, else /run/ferry/ferryd-0.sock)")
    ("device,d", po::value(&a.device), "GPU index N: the socket of ferryd@N, /run/ferry/ferryd-N.sock")
    ("all", po::bool_switch(&a.all), "every ferryd of this host (each ferryd-*.sock in --socket-dir)")
    ("socket-dir", po::value(&a.socket_dir)->default_value(a.socket_dir), "where --all looks for sockets")
    ("json", po::bool_switch(&a.json), "machine-readable output, for every command")
    ("interval", po::value(&a.interval)->default_value(1.0), "watch: seconds between refreshes")
    ("running-only", po::bool_switch(&a.running_only),
     "ask only daemons whose running marker (<socket>.pid) names a live ferryd; never connect to a socket "
     "systemd holds for a stopped or drained daemon (that would start it)")
    ("per-client", po::bool_switch(&a.per_client),
     "metrics: add per-client series (labels client, pid, command: they change with every connection)")
    ("output,o", po::value(&a.output), "metrics: write to this file atomically (for a textfile collector)")
    ("help,h", "this text")
    ("version,V", "ferryctl's own version (without asking a daemon)");
  po::options_description hidden;
  hidden.add_options()("command", po::value(&a.command))("args", po::value(&a.rest));
  // clang-format on
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("command", 1).add("args", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferryctl: %s (try ferryctl --help)\n", e.what());
    return kUsage;
  }
  if (vm.count("help")) {
    if (!a.command.empty() && a.command != "help") {
      for (const auto& h : kCommandHelp) {
        if (a.command == h.name) {
          std::cout << h.text << "\n" << opts;
          return kOk;
        }
      }
      std::fprintf(stderr, "ferryctl: unknown command \"%s\" (try ferryctl --help)\n", a.command.c_str());
      return kUsage;
    }
    std::cout << kUsageLine << "\n" << kCommands << "\n" << opts;
    return kOk;
  }
  // `ferryctl help [COMMAND]`, as git and systemctl take it.
  if (a.command == "help") {
    if (a.rest.empty()) {
      std::cout << kUsageLine << "\n" << kCommands << "\n" << opts;
      return kOk;
    }
    for (const auto& h : kCommandHelp) {
      if (a.rest[0] == h.name) {
        std::cout << h.text << "\n" << opts;
        return kOk;
      }
    }
    std::fprintf(stderr, "ferryctl: unknown command \"%s\" (try ferryctl --help)\n", a.rest[0].c_str());
    return kUsage;
  }
  if (vm.count("version")) {
    std::printf("ferryctl %s\n", FERRY_VERSION);
    return kOk;
  }
  if (a.command.empty()) a.command = "status";  // as nvidia-smi shows the GPUs: the one thing one wants
  if (!(a.interval > 0) || a.interval > 86400) {
    std::fprintf(stderr, "ferryctl: --interval needs a number of seconds above 0\n");
    return kUsage;
  }
  if ((a.all ? 1 : 0) + (vm.count("socket") ? 1 : 0) + (vm.count("device") ? 1 : 0) > 1) {
    std::fprintf(stderr, "ferryctl: choose one of --socket, --device and --all\n");
    return kUsage;
  }
  if (vm.count("device") && a.device < 0) {
    std::fprintf(stderr, "ferryctl: --device needs a GPU index (0, 1, ...)\n");
    return kUsage;
  }
  if (a.socket.empty())
    a.socket = a.device >= 0 ? a.socket_dir + "/ferryd-" + std::to_string(a.device) + ".sock"
                             : proto::socket_path_from_env();
  if (!a.output.empty() && a.command != "metrics") {
    std::fprintf(stderr, "ferryctl: --output is for metrics\n");
    return kUsage;
  }
  const bool takes_args = a.command == "disconnect";
  if (!takes_args && !a.rest.empty()) {
    std::fprintf(stderr, "ferryctl: unexpected argument \"%s\" (try ferryctl --help)\n", a.rest[0].c_str());
    return kUsage;
  }
  if (a.command == "watch") return watch(a);
  if (a.command == "disconnect" || a.command == "drain") {
    if (a.all) {
      std::fprintf(stderr, "ferryctl: %s names one daemon (--socket or --device)\n", a.command.c_str());
      return kUsage;
    }
    return a.command == "drain" ? drain(a) : disconnect(a);
  }
  if (a.command == "version" && !a.json) std::printf("ferryctl %s\n", FERRY_VERSION);
  if (a.command == "status" || a.command == "metrics" || a.command == "ping" || a.command == "version") {
    const int r = per_daemon(a);
    return a.command == "version" ? kOk : r;
  }
  std::fprintf(stderr, "ferryctl: unknown command \"%s\" (try ferryctl --help)\n", a.command.c_str());
  return kUsage;
}
