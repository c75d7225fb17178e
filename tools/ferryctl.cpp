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

namespace proto = ferry::proto;
namespace util = ferry::util;
namespace json = boost::json;
namespace po = boost::program_options;

namespace {

enum Exit { kOk = 0, kDaemonError = 1, kUsage = 2, kNoConnect = 3, kOutput = 4 };

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

// ---------------------------------------------------------------- the wire
std::string cause(int err, const std::string& path) {
  switch (err) {
    case -ENOENT: return "no socket there: is ferryd running, and with this --socket or --device?";
    case -ETIMEDOUT: return "it accepts no connection (its backlog is full): ferryd is stuck or overloaded";
    case -ECONNREFUSED: return "nothing accepts on it: ferryd is not running (stale socket file)";
    case -EACCES:
    case -EPERM: return proto::access_refusal(path);
    default: return std::strerror(-err);
  }
}

// One request, one reply. Returns an Exit code; quiet: no message on stderr.
int ask(const std::string& path, const void* req, size_t n, proto::Type want, std::vector<uint8_t>* reply,
        double* rtt_us = nullptr, bool quiet = false) {
  int fd = -1;
  // A daemon whose backlog is full must not hang ferryctl (nor the metrics timer).
  if (int r = proto::connect_unix(path, &fd, 5000); r != 0) {
    if (!quiet) std::fprintf(stderr, "ferryctl: cannot connect to %s: %s\n", path.c_str(), cause(r, path).c_str());
    return kNoConnect;
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const auto t0 = std::chrono::steady_clock::now();
  const bool ok = proto::send_all(fd, req, n) == 0 && proto::read_message(fd, *reply) == 0;
  const auto t1 = std::chrono::steady_clock::now();
  ::close(fd);
  proto::Error e{};
  if (ok && proto::type_of(*reply) == proto::Type::error && proto::as(*reply, &e)) {
    if (!quiet) std::fprintf(stderr, "ferryctl: %s refused: %s\n", path.c_str(), proto::get_text(e.text).c_str());
    return kDaemonError;
  }
  if (!ok || proto::type_of(*reply) != want) {
    if (!quiet) std::fprintf(stderr, "ferryctl: no valid answer from %s\n", path.c_str());
    return kDaemonError;
  }
  if (rtt_us != nullptr) *rtt_us = std::chrono::duration<double, std::micro>(t1 - t0).count();
  return kOk;
}

// The status document of the daemon at path, parsed.
int fetch_status(const std::string& path, json::object* doc, double* rtt_us = nullptr, bool quiet = false) {
  auto req = proto::make<proto::StatusRequest>(proto::Type::status_request);
  req.request = 1;
  std::vector<uint8_t> msg;
  if (int r = ask(path, &req, sizeof req, proto::Type::status_reply, &msg, rtt_us, quiet); r != kOk) return r;
  boost::system::error_code ec;
  json::value v = json::parse(std::string(msg.begin() + sizeof(proto::StatusReply), msg.end()), ec);
  if (ec || !v.is_object()) {
    if (!quiet) std::fprintf(stderr, "ferryctl: unreadable status from %s: %s\n", path.c_str(), ec.message().c_str());
    return kDaemonError;
  }
  *doc = std::move(v.as_object());
  return kOk;
}

// ---------------------------------------------------------------- the document
const json::value* at(const json::object& o, const char* path) {
  const json::object* cur = &o;
  std::string p = path;
  for (size_t start = 0;;) {
    const size_t dot = p.find('.', start);
    const auto* v = cur->if_contains(p.substr(start, dot - start));
    if (v == nullptr) return nullptr;
    if (dot == std::string::npos) return v;
    if (!v->is_object()) return nullptr;
    cur = &v->as_object();
    start = dot + 1;
  }
}

// A count in the document: a non-negative integer, 0 for anything else.
unsigned long long count(const json::value& v) {
  if (v.is_uint64()) return v.as_uint64();
  if (v.is_int64()) return static_cast<unsigned long long>(std::max<int64_t>(0, v.as_int64()));
  return 0;
}

unsigned long long num(const json::object& o, const char* path) {
  const json::value* v = at(o, path);
  return v == nullptr ? 0 : count(*v);
}

std::string str(const json::object& o, const char* path, const char* dflt = "?") {
  const json::value* v = at(o, path);
  if (v == nullptr || v->is_null()) return dflt;
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_bool()) return v->as_bool() ? "yes" : "no";
  return json::serialize(*v);
}

bool flag(const json::object& o, const char* path) {
  const json::value* v = at(o, path);
  return v != nullptr && v->is_bool() && v->as_bool();
}

const json::array& array_at(const json::object& o, const char* path) {
  static const json::array kNone;
  const json::value* v = at(o, path);
  return v != nullptr && v->is_array() ? v->as_array() : kNone;
}

const json::array& clients(const json::object& o) { return array_at(o, "clients"); }

// A status line of 80 columns at most: its label in the first 12, the text
// folded at spaces, continued under itself.
void paragraph(const std::string& label, const std::string& text) {
  constexpr size_t kWidth = 80, kIndent = 12;
  std::string line = label;
  line.resize(std::max(line.size() + 1, kIndent), ' ');
  size_t at = 0;
  bool first = true;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    if (!first && line.size() + 1 + word.size() > kWidth) {
      std::printf("%s\n", line.c_str());
      line.assign(kIndent, ' ');
      first = true;
    }
    if (!first) line += ' ';
    line += word;
    first = false;
    at = end + 1;
  }
  std::printf("%s\n", line.c_str());
}

// As ferryd's options read them back ("256 MiB", "1.5 GiB").
std::string human_bytes(unsigned long long b) { return ferry::util::format_size(b); }

std::string since(long long t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// A bar of `width` cells, `used` of `total` filled.
// A client's own counts and those it reports of its direct uploads (which
// ferryd cannot check): summed without wrapping.
unsigned long long sum_sat(unsigned long long a, unsigned long long b) { return a + b < a ? ~0ull : a + b; }

std::string bar(unsigned long long used, unsigned long long total, int width) {
  const int fill = total == 0 ? 0 : static_cast<int>(std::min<unsigned long long>(width, (used * width + total - 1) / total));
  return "[" + std::string(static_cast<size_t>(fill), '#') + std::string(static_cast<size_t>(width - fill), '.') + "]";
}

// A user's name, as ps prints it; the number where the system has none.
std::string user_name(unsigned long long uid) {
  static std::map<unsigned long long, std::string> cache;
  if (auto it = cache.find(uid); it != cache.end()) return it->second;
  std::string name = std::to_string(uid);
  if (uid <= UINT32_MAX) {
    passwd pw{};
    passwd* found = nullptr;
    std::vector<char> buf(4096);
    if (getpwuid_r(static_cast<uid_t>(uid), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
        found->pw_name != nullptr && *found->pw_name != '\0')
      name = found->pw_name;
  }
  return cache[uid] = name;
}

// The local time, as nvidia-smi heads its table with it.
std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char out[64] = "";
  if (std::tm tm{}; ::localtime_r(&t, &tm) != nullptr) std::strftime(out, sizeof out, "%a %b %e %H:%M:%S %Y", &tm);
  return out;
}

// The reasons a ferry-run process left copies to the driver, as status names them.
using ferry::proto::kPassNames;

// Processes under ferry-run: what each staged, and what it left to the
// driver and why (its lead client's row carries the process's counts).
void print_run(const json::object& d) {
  bool any = false;
  for (const auto& v : clients(d)) {
    const json::object& c = v.as_object();
    if (str(c, "run.role", "") != "lead") continue;
    if (!any)
      std::printf("\nferry-run   %-8s %-16s %-9s %-10s %s\n", "PID", "COMMAND", "STAGED", "BYTES", "LEFT TO THE DRIVER, BY REASON");
    any = true;
    std::string passed;
    for (const char* why : kPassNames)
      if (const unsigned long long n = num(c, ("run.passed." + std::string(why)).c_str()); n != 0)
        passed += (passed.empty() ? "" : ", ") + std::string(why) + " " + std::to_string(n);
    std::printf("            %-8llu %-16.16s %-9llu %-10s %s\n", num(c, "pid"), str(c, "name", "").c_str(),
                num(c, "run.staged"), human_bytes(num(c, "run.staged_bytes")).c_str(), passed.empty() ? "none" : passed.c_str());
  }
  // The last that exited (ferryd keeps a few, for a few minutes).
  bool header = false;
  for (const auto& v : array_at(d, "run_exited")) {
    const json::object& e = v.as_object();
    if (!header)
      std::printf("\nexited      %-8s %-16s %-9s %-10s %s\n", "PID", "COMMAND", "STAGED", "BYTES", "AT");
    header = true;
    std::printf("            %-8llu %-16.16s %-9llu %-10s %s\n", num(e, "pid"), str(e, "command", "").c_str(),
                num(e, "staged"), human_bytes(num(e, "staged_bytes")).c_str(),
                since(static_cast<long long>(num(e, "exited"))).c_str());
  }
}

void print_status(const json::object& d) {
  std::printf("ferryd %s (pid %llu), %s\n", str(d, "version").c_str(), num(d, "pid"), now_text().c_str());
  std::printf("device      %llu: %s\n", num(d, "device.index"), str(d, "device.name").c_str());
  if (const std::string fb = str(d, "device.fallback", ""); !fb.empty())
    std::printf("            simulated in place of a GPU: %s (ferryd's fallback-sim)\n", fb.c_str());
  if (const std::string u = str(d, "device.uuid", ""); !u.empty()) {
    const std::string bus = str(d, "device.pci_bus_id", "");
    std::printf("            UUID %s%s%s\n", u.c_str(), bus.empty() ? "" : ", PCI ", bus.c_str());
  }
  std::printf("backend     %s, %s; copy engine: %s; host import: %s\n", str(d, "device.backend").c_str(),
              str(d, "device.driver").c_str(), str(d, "device.copy_engine").c_str(), str(d, "device.host_import").c_str());
  std::printf("timeline    %s\n", str(d, "device.timeline") == "device"
                                       ? "written by the device after each client's copies (queue-ordered waits)"
                                       : "written by ferryd when copies retire (the device cannot)");
  const std::string sharing = str(d, "device.sharing", "");
  if (sharing == "mps")
    std::printf("sharing     NVIDIA MPS: applications' kernels and ferryd's copies overlap\n");
  else if (sharing == "time-sliced")
    std::printf("sharing     time-sliced, no MPS: applications' kernels and ferryd's copies take turns (start MPS)\n");
  std::printf("ring        %s of staging (%llu slots of %s) and %llu transfers in flight per client, at most %llu "
              "clients\n",
              human_bytes(num(d, "ring.slots_per_client") * num(d, "ring.slot_bytes")).c_str(),
              num(d, "ring.slots_per_client"), human_bytes(num(d, "ring.slot_bytes")).c_str(),
              num(d, "ring.entries_per_client"), num(d, "ring.max_clients"));
  if (num(d, "ring.entries_total") == 0)
    std::printf("occupancy   no client connected: nothing in flight\n");
  else
    std::printf("occupancy   %llu of the connected clients' %llu transfers in flight (%s)\n",
                num(d, "ring.transfers_in_flight"), num(d, "ring.entries_total"),
                human_bytes(num(d, "ring.bytes_in_flight")).c_str());
  std::printf("since start %llu uploads (%llu pieces), %s; %llu downloads; %llu failed; %llu connections in all\n\n",
              num(d, "totals.uploads"), num(d, "totals.upload_pieces"), human_bytes(num(d, "totals.upload_bytes")).c_str(),
              num(d, "totals.downloads"), num(d, "totals.failed"), num(d, "totals.connections"));
  std::printf("%-5s %-8s %-10s %-16s %-11s %-8s %-10s %-11s %-6s %s\n", "ID", "PID", "USER", "COMMAND", "IN FLIGHT",
              "BUFFERS", "UPLOADS", "BYTES", "ERRORS", "CONNECTED SINCE");
  for (const auto& v : clients(d)) {
    const json::object& c = v.as_object();
    // A client's direct uploads (copied by its own queue) count in its row,
    // as it reports them: in flight as "ferryd's+direct".
    std::string slots = std::to_string(num(c, "transfers_in_flight"));
    if (num(c, "direct_uploads") != 0) slots += "+" + std::to_string(num(c, "direct_in_flight"));
    slots += "/" + std::to_string(num(c, "entries"));
    std::printf("%-5llu %-8llu %-10.10s %-16s %-11s %-8llu %-10llu %-11s %-6llu %s\n", num(c, "id"), num(c, "pid"),
                user_name(num(c, "uid")).c_str(), str(c, "name", "").c_str(), slots.c_str(), num(c, "buffers"),
                sum_sat(num(c, "uploads"), num(c, "direct_uploads")),
                human_bytes(sum_sat(num(c, "upload_bytes"), num(c, "direct_bytes"))).c_str(), num(c, "errors"),
                since(static_cast<long long>(num(c, "connected_since"))).c_str());
  }
  if (!flag(d, "all_clients_visible")) std::printf("(only your own clients are shown)\n");
  print_run(d);
  // What each user holds against the daemon's per-user bounds (ferryd(8), Limits).
  const json::array& users = array_at(d, "users");
  if (users.empty()) return;
  const std::string memory = num(d, "limits.user_memory_bytes") != 0 ? human_bytes(num(d, "limits.user_memory_bytes")) : "any";
  auto n = [&](const char* key) { return std::to_string(num(d, key)); };
  std::printf("\n");
  paragraph("per user", "at most " + n("limits.max_buffers") + " allocations, " + memory + " of device memory, " +
                            n("limits.max_grants") + " grants, " + n("limits.max_opens") + " opens, " +
                            n("limits.max_imports") + " imports, " + n("limits.max_event_pools") +
                            " event pools; none but an admin more than " + n("limits.user_share_percent") + "% of " +
                            n("limits.max_clients") + " clients, " + n("limits.max_connections") + " connections");
  // One row per user in 80 columns. MEMORY: what its clients hold now;
  // EXPORTS: freed allocations whose IPC handle went out, which an importer
  // may keep alive, charged until ferryd restarts (at most --user-memory).
  std::printf("%-9s %5s %7s %7s %9s %9s %6s %5s %7s %5s\n", "USER", "CONNS", "CLIENTS", "BUFFERS", "MEMORY",
              "EXPORTS", "GRANTS", "OPENS", "IMPORTS", "POOLS");
  bool kept = false;
  for (const auto& v : users) {
    const json::object& u = v.as_object();
    kept = kept || num(u, "exports_kept_bytes") != 0;
    std::printf("%-9.9s %5llu %7llu %7llu %9s %9s %6llu %5llu %7llu %5llu\n", user_name(num(u, "uid")).c_str(),
                num(u, "connections"), num(u, "clients"), num(u, "buffers"), human_bytes(num(u, "device_bytes")).c_str(),
                human_bytes(num(u, "exports_kept_bytes")).c_str(), num(u, "grants"), num(u, "opens"),
                num(u, "imports"), num(u, "event_pools"));
  }
  if (kept)
    std::printf("(EXPORTS: freed allocations whose IPC handle went out; charged until ferryd restarts)\n");
}

// What watch saw of a daemon last time, for rates over the interval.
struct Seen {
  std::chrono::steady_clock::time_point at;
  unsigned long long pid = 0, uploads = 0, bytes = 0;
  std::map<unsigned long long, std::pair<unsigned long long, unsigned long long>> clients;  // id: uploads, bytes
};

// Per second between two counts; 0 where a counter went back (a restart).
double per_s(unsigned long long now, unsigned long long before, double dt) {
  return dt > 0 && now >= before ? static_cast<double>(now - before) / dt : 0;
}

// The watch screen: at most 80 columns; at most `rows` lines (0: no limit),
// the header first, then as many client rows as fit. Returns the lines used.
int print_watch(const std::string& socket, const json::object& d, Seen* seen, int rows) {
  const auto now = std::chrono::steady_clock::now();
  const bool have = seen->at.time_since_epoch().count() != 0 && seen->pid == num(d, "pid");
  const double dt = have ? std::chrono::duration<double>(now - seen->at).count() : 0;
  const unsigned long long up = num(d, "totals.uploads"), bytes = num(d, "totals.upload_bytes");
  std::printf("ferryd %s, device %llu: %.28s  %s\n", str(d, "version").c_str(), num(d, "device.index"),
              str(d, "device.name").c_str(), now_text().c_str());
  std::printf("%.78s\n", socket.c_str());
  std::printf("in flight %llu/%llu %s  failed %llu\n", num(d, "ring.transfers_in_flight"), num(d, "ring.entries_total"),
              bar(num(d, "ring.transfers_in_flight"), num(d, "ring.entries_total"), 16).c_str(), num(d, "totals.failed"));
  if (have)
    std::printf("total %9.0f uploads/s %8.3f GB/s   (%llu uploads, %s since start)\n", per_s(up, seen->uploads, dt),
                per_s(bytes, seen->bytes, dt) / 1e9, up, human_bytes(bytes).c_str());
  else
    std::printf("total         - uploads/s        - GB/s   (%llu uploads, %s since start)\n", up, human_bytes(bytes).c_str());
  std::printf("%-5s %-7s %-8.8s %-12s %-12s %-9s %-8s %s\n", "ID", "PID", "USER", "COMMAND", "OCCUPANCY", "UPLOADS/S",
              "GB/S", "ERR");
  int used = 5;
  const json::array& cs = clients(d);
  size_t shown = 0;
  std::map<unsigned long long, std::pair<unsigned long long, unsigned long long>> next;
  for (const auto& v : cs) {
    const json::object& c = v.as_object();
    const unsigned long long id = num(c, "id"), cu = sum_sat(num(c, "uploads"), num(c, "direct_uploads")),
                             cb = sum_sat(num(c, "upload_bytes"), num(c, "direct_bytes"));
    next[id] = {cu, cb};
    if (rows > 0 && used >= rows - 1 && shown + 1 < cs.size()) continue;  // keep a line for "N more"
    ++shown;
    ++used;
    const auto prev = seen->clients.find(id);
    const bool rate = have && prev != seen->clients.end();
    char ups[16] = "-", gbs[16] = "-";
    if (rate) {
      std::snprintf(ups, sizeof ups, "%.0f", per_s(cu, prev->second.first, dt));
      std::snprintf(gbs, sizeof gbs, "%.3f", per_s(cb, prev->second.second, dt) / 1e9);
    }
    std::printf("%-5llu %-7llu %-8.8s %-12.12s %-12s %-9s %-8s %llu\n", id, num(c, "pid"), user_name(num(c, "uid")).c_str(),
                str(c, "name", "").c_str(),
                bar(sum_sat(num(c, "transfers_in_flight"), num(c, "direct_in_flight")), num(c, "entries"), 10).c_str(), ups,
                gbs,
                num(c, "errors"));
  }
  if (shown < cs.size()) {
    std::printf("(%zu more clients not shown: a taller terminal, or ferryctl status)\n", cs.size() - shown);
    ++used;
  }
  seen->at = now;
  seen->pid = num(d, "pid");
  seen->uploads = up;
  seen->bytes = bytes;
  seen->clients = std::move(next);
  return used;
}

// ---------------------------------------------------------------- metrics
// Families by name, samples of every daemon asked: one HELP/TYPE per family,
// so the exposition of several daemons is one valid document.
struct Family {
  std::string type, help;
  std::vector<std::string> samples;  // "name{labels} value"
};
using Families = std::map<std::string, Family>;

std::string label(const std::string& v) {  // a Prometheus label value, escaped
  std::string o;
  for (char ch : v) {
    if (ch == '\\' || ch == '"') o += '\\';
    if (ch == '\n') {
      o += "\\n";
      continue;
    }
    o += ch;
  }
  return o;
}

void sample(Families& f, const std::string& name, const char* type, const char* help, const std::string& labels,
            double value) {
  Family& fam = f[name];
  fam.type = type;
  fam.help = help;
  char v[64];
  std::snprintf(v, sizeof v, "%.17g", value);
  fam.samples.push_back(name + "{" + labels + "} " + v);
}

void histogram(Families& f, const char* name, const char* help, const std::string& dev, const json::object& d,
               const char* path) {
  const json::value* h = at(d, path);
  if (h == nullptr || !h->is_object()) return;
  const json::object& o = h->as_object();
  const json::value* b = o.if_contains("bounds_ns");
  const json::value* c = o.if_contains("counts");
  if (b == nullptr || c == nullptr || !b->is_array() || !c->is_array()) return;
  Family& fam = f[name];
  fam.type = "histogram";
  fam.help = help;
  unsigned long long cum = 0;
  char line[256];
  for (size_t i = 0; i < c->as_array().size(); ++i) {
    cum += count(c->as_array()[i]);
    char le[32] = "+Inf";
    if (i < b->as_array().size()) std::snprintf(le, sizeof le, "%g", double(count(b->as_array()[i])) / 1e9);
    std::snprintf(line, sizeof line, "%s_bucket{%s,le=\"%s\"} %llu", name, dev.c_str(), le, cum);
    fam.samples.push_back(line);
  }
  std::snprintf(line, sizeof line, "%s_sum{%s} %.9f", name, dev.c_str(), double(num(o, "sum_ns")) / 1e9);
  fam.samples.push_back(line);
  std::snprintf(line, sizeof line, "%s_count{%s} %llu", name, dev.c_str(), num(o, "count"));
  fam.samples.push_back(line);
}

void add_metrics(Families& f, const json::object& d, bool per_client) {
  const std::string dev = "device=\"" + std::to_string(num(d, "device.index")) + "\"";
  struct Plain {
    const char* name;
    const char* type;
    const char* key;
    const char* help;
  };
  static const Plain kPlain[] = {
      {"ferry_uploads_total", "counter", "totals.uploads", "ferry_upload calls completed since the daemon started."},
      {"ferry_upload_pieces_total", "counter", "totals.upload_pieces", "Copies (pieces of uploads) completed."},
      {"ferry_upload_bytes_total", "counter", "totals.upload_bytes", "Bytes uploaded since the daemon started."},
      {"ferry_downloads_total", "counter", "totals.downloads", "Downloads completed since the daemon started."},
      {"ferry_failed_transfers_total", "counter", "totals.failed", "Transfers that failed with an error."},
      {"ferry_connections_total", "counter", "totals.connections", "Clients that connected since the daemon started."},
      {"ferry_clients", "gauge", "held.clients", "Clients whose resources are held (connected or draining)."},
      {"ferry_buffers", "gauge", "held.buffers", "Device buffers held by clients."},
      {"ferry_device_memory_bytes", "gauge", "held.device_bytes", "Device memory held by clients."},
      {"ferry_copies_in_flight", "gauge", "held.copies_in_flight", "Copies queued on the device."},
      {"ferry_ring_entries", "gauge", "ring.entries_total", "Transfers connected clients may have in flight at once."},
      {"ferry_transfers_in_flight", "gauge", "ring.transfers_in_flight", "Transfers whose copy has not finished."},
      {"ferry_bytes_in_flight", "gauge", "ring.bytes_in_flight", "Bytes of copies not yet finished."},
      {"ferry_slot_bytes", "gauge", "ring.slot_bytes", "Bytes per staging slot (the largest single copy)."},
  };
  for (const auto& p : kPlain) sample(f, p.name, p.type, p.help, dev, static_cast<double>(num(d, p.key)));
  sample(f, "ferry_device_lost", "gauge", "1 once the device reported itself lost.", dev, flag(d, "device.lost"));
  if (const std::string sharing = str(d, "device.sharing", ""); sharing == "mps" || sharing == "time-sliced")
    sample(f, "ferry_device_mps", "gauge", "1 when the GPU is shared through NVIDIA MPS (CUDA), 0 when time-sliced.",
           dev, sharing == "mps");
  // DCGM exporter's labels for the same GPU (gpu, UUID, pci_bus_id), to join
  // its series: `ferry_uploads_total * on(device) group_left(UUID) ferry_info`.
  std::string ids = ",gpu=\"" + std::to_string(num(d, "device.index")) + "\"";
  if (const std::string u = str(d, "device.uuid", ""); !u.empty()) ids += ",UUID=\"" + label(u) + "\"";
  if (const std::string b = str(d, "device.pci_bus_id", ""); !b.empty()) ids += ",pci_bus_id=\"" + label(b) + "\"";
  sample(f, "ferry_info", "gauge",
         "The daemon's version, backend and device name, and the GPU's gpu, UUID and pci_bus_id as NVIDIA's DCGM "
         "exporter labels them, as labels.",
         dev + ",version=\"" + label(str(d, "version")) + "\",backend=\"" + label(str(d, "device.backend")) +
             "\",name=\"" + label(str(d, "device.name")) + "\"" + ids,
         1);
  if (per_client) {
    static const Plain kClient[] = {
        {"ferry_client_transfers_in_flight", "gauge", "transfers_in_flight", "Transfers of this client in flight."},
        {"ferry_client_uploads_total", "counter", "uploads", "ferry_upload calls of this client completed."},
        {"ferry_client_upload_bytes_total", "counter", "upload_bytes", "Bytes this client uploaded."},
        {"ferry_client_errors_total", "counter", "errors", "Transfers of this client that failed."},
        {"ferry_client_device_memory_bytes", "gauge", "device_bytes", "Device memory this client holds."},
        {"ferry_client_direct_uploads_total", "counter", "direct_uploads",
         "ferry_upload_direct calls of this client, as the client reports them."},
        {"ferry_client_direct_upload_bytes_total", "counter", "direct_bytes",
         "Bytes this client uploaded through its own queue, as the client reports them."},
        {"ferry_client_direct_in_flight", "gauge", "direct_in_flight",
         "Direct uploads of this client whose copy its queue has not yet finished."},
    };
    for (const auto& m : kClient)
      for (const auto& v : clients(d)) {
        const json::object& c = v.as_object();
        sample(f, m.name, m.type, m.help,
               dev + ",client=\"" + std::to_string(num(c, "id")) + "\",pid=\"" + std::to_string(num(c, "pid")) +
                   "\",command=\"" + label(str(c, "name", "")) + "\"",
               static_cast<double>(num(c, m.key)));
      }
  }
  // What each user holds, as its bounds count it (users the viewer may see).
  for (const auto& v : array_at(d, "users")) {
    const json::object& u = v.as_object();
    const std::string who = dev + ",uid=\"" + std::to_string(num(u, "uid")) + "\"";
    sample(f, "ferry_user_device_memory_bytes", "gauge", "Device memory this user's clients hold.", who,
           static_cast<double>(num(u, "device_bytes")));
    sample(f, "ferry_user_exported_bytes", "gauge",
           "Device memory this user exported (IPC handles), charged until ferryd restarts; bounded by "
           "--user-memory.",
           who, static_cast<double>(num(u, "exported_bytes")));
    sample(f, "ferry_user_exports_kept_bytes", "gauge",
           "Of the exported bytes, those already freed: held alive only by importers ferryd cannot see.", who,
           static_cast<double>(num(u, "exports_kept_bytes")));
  }
  // Programs under ferry-run, per user and command, the processes that
  // exited folded in: no pid or client label, so the series last and their
  // number stays bounded (users x commands) however many processes come and go.
  for (const auto& v : array_at(d, "run_totals")) {
    const json::object& r = v.as_object();
    const std::string who =
        dev + ",uid=\"" + std::to_string(num(r, "uid")) + "\",command=\"" + label(str(r, "command", "")) + "\"";
    sample(f, "ferry_run_processes_total", "counter", "Processes under ferry-run that connected, running or exited.", who,
           static_cast<double>(num(r, "processes_exited") + num(r, "processes_running")));
    sample(f, "ferry_run_staged_total", "counter", "Copies of processes under ferry-run that ferry staged.", who,
           static_cast<double>(num(r, "staged")));
    sample(f, "ferry_run_staged_bytes_total", "counter", "Bytes of those copies.", who,
           static_cast<double>(num(r, "staged_bytes")));
    for (const char* why : kPassNames)
      sample(f, "ferry_run_passed_total", "counter",
             "Copies of processes under ferry-run left to the driver, by reason (ferry-run(1)).",
             who + ",reason=\"" + why + "\"", static_cast<double>(num(r, ("passed." + std::string(why)).c_str())));
  }
  histogram(f, "ferry_upload_latency_seconds", "From the start of an upload piece's copy to its completion.", dev, d,
            "histograms.upload_latency");
  histogram(f, "ferry_slot_wait_seconds", "Time an upload piece waited for a free staging slot (reported by clients).",
            dev, d, "histograms.slot_wait");
  histogram(f, "ferry_hold_wait_seconds",
            "Time an upload piece was held for its value (after, or a fence's release: its consumer) before its copy.", dev,
            d, "histograms.hold_wait");
}

// The device index a socket's name gives (ferryd-N.sock), for the series of
// a daemon that did not answer; "" for another name.
std::string device_of_socket(const std::string& sock) {
  const std::string base = sock.substr(sock.rfind('/') + 1);
  if (base.rfind("ferryd-", 0) != 0 || base.size() <= 12 || base.compare(base.size() - 5, 5, ".sock") != 0) return "";
  const std::string n = base.substr(7, base.size() - 12);
  return n.find_first_not_of("0123456789") == std::string::npos ? n : "";
}

// ferry_up: 1 when the daemon answered, else 0 with the reason.
void add_up(Families& f, const std::string& sock, const json::object* d, const char* reason) {
  const std::string dev = d != nullptr ? std::to_string(num(*d, "device.index")) : device_of_socket(sock);
  std::string labels = "device=\"" + label(dev) + "\"";
  if (d == nullptr) labels += ",reason=\"" + std::string(reason) + "\"";
  sample(f, "ferry_up", "gauge",
         "1 when the daemon answered this scrape; 0 when it did not, with the reason (not running, no connection, "
         "bad reply).",
         labels, d != nullptr ? 1 : 0);
}

// Whether the daemon behind `sock` runs, from its running marker
// (proto::running_marker_path), without connecting: a regular file naming a
// live process, which is ferryd where /proc says (a recycled pid is not).
bool running(const std::string& sock) {
  const std::string marker = proto::running_marker_path(sock);
  const int fd = ::open(marker.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st{}, sock_st{};
  char buf[24] = {};
  // Written by the daemon's user, who owns the socket (systemd's socket unit
  // gives it to ferry too): a marker planted by another user is not taken.
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::stat(sock.c_str(), &sock_st) == 0 &&
                       (st.st_uid == sock_st.st_uid || st.st_uid == 0);
  const ssize_t n = regular ? ::read(fd, buf, sizeof buf - 1) : -1;
  ::close(fd);
  if (n <= 0) return false;
  char* end = nullptr;
  const long pid = std::strtol(buf, &end, 10);
  if (pid <= 0 || pid > INT32_MAX || (*end != '\n' && *end != '\0')) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (comm && std::getline(comm, name) && !name.empty() && name != "ferryd") return false;
  return true;
}

std::string exposition(const Families& f) {
  std::string o;
  for (const auto& [name, fam] : f) {
    o += "# HELP " + name + " " + fam.help + "\n# TYPE " + name + " " + fam.type + "\n";
    for (const auto& s : fam.samples) o += s + "\n";
  }
  return o;
}

// Written whole or not at all: a collector never reads half a file. The
// directory may be writable by others (a textfile collector's often is):
// write_file_atomically trusts nothing in it, and a target of ours keeps its
// mode and group.
int write_atomically(const std::string& path, const std::string& text) {
  std::string what;
  if (int r = util::write_file_atomically(path, text, 0644, true, &what); r != 0) {
    std::fprintf(stderr, "ferryctl: cannot %s: %s\n", what.c_str(), std::strerror(-r));
    return kOutput;
  }
  return kOk;
}

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
