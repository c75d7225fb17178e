// ferryctl: ask a running ferryd what it holds. See `ferryctl --help`.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/wire.hpp"
#include "ferry/proto.hpp"

namespace proto = ferry::proto;
namespace pt = boost::property_tree;

namespace {

enum Exit { kOk = 0, kDaemonError = 1, kUsage = 2, kNoConnect = 3 };

const char* const kHelp = R"(usage: ferryctl [--socket PATH] COMMAND [--json]

Shows what a running ferryd holds: its device, its staging ring, and each
connected client's share of it.

Commands:
  status         device, backend, ring geometry and occupancy, totals since
                 start, then one row per client: id, pid, uid, command name,
                 slots in flight, buffers, uploads, bytes, errors, connected
                 since. With --json, the daemon's status document as is.
  watch          the status table, refreshed in place every --interval
                 seconds (default 1) with an occupancy bar per client,
                 until interrupted (Ctrl-C)
  metrics        Prometheus text exposition: counters and gauges of the
                 daemon and of each client, histograms of upload latency and
                 of slot wait time; every name starts with ferry_
  ping           checks that the daemon answers; prints the round trip
  version        prints ferryctl's version and the daemon's

Options:
  -s, --socket PATH   the daemon's socket (default $FERRY_SOCKET, else
                      /run/ferry/ferryd-0.sock)
      --json          machine-readable output (status)
      --interval SEC  refresh period of watch (default 1)
  -h, --help          this text
  -V, --version       ferryctl's own version (without asking the daemon)

Exit status: 0 ok, 1 the daemon answered with an error, 2 usage error,
3 cannot connect (the message names the path and the likely cause).

Root and the daemon's own user see every client; other users see their own.
)";

int connect_to(const std::string& path, int* fd) {
  if (int r = proto::connect_unix(path, fd); r != 0) return r;
  timeval tv{5, 0};
  setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return 0;
}

const char* cause(int err) {
  switch (err) {
    case -ENOENT: return "no socket there: is ferryd running, and with this --socket?";
    case -ECONNREFUSED: return "nothing accepts on it: ferryd is not running (stale socket file)";
    case -EACCES:
    case -EPERM: return "permission denied: ask for the daemon's group, or run as root";
    default: return std::strerror(-err);
  }
}

// Fetches the status document; returns an Exit code.
int fetch_status(const std::string& path, std::string* json, double* rtt_us) {
  int fd = -1;
  if (int r = connect_to(path, &fd); r != 0) {
    std::fprintf(stderr, "ferryctl: cannot connect to %s: %s\n", path.c_str(), cause(r));
    return kNoConnect;
  }
  auto req = proto::make<proto::StatusRequest>(proto::Type::status_request);
  req.request = 1;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> msg;
  bool ok = proto::send_all(fd, &req, sizeof req) == 0 && proto::read_message(fd, msg) == 0;
  auto t1 = std::chrono::steady_clock::now();
  ::close(fd);
  proto::Error e{};
  if (ok && proto::type_of(msg) == proto::Type::error && proto::as(msg, &e)) {
    std::fprintf(stderr, "ferryctl: the daemon refused: %s\n", proto::get_text(e.text).c_str());
    return kDaemonError;
  }
  if (!ok || proto::type_of(msg) != proto::Type::status_reply) {
    std::fprintf(stderr, "ferryctl: no valid answer from %s\n", path.c_str());
    return kDaemonError;
  }
  json->assign(msg.begin() + sizeof(proto::StatusReply), msg.end());
  if (rtt_us != nullptr) *rtt_us = std::chrono::duration<double, std::micro>(t1 - t0).count();
  return kOk;
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string since(int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

bool parse(const std::string& json, pt::ptree* doc) {
  try {
    std::istringstream in(json);
    pt::read_json(in, *doc);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferryctl: unreadable status: %s\n", e.what());
    return false;
  }
}

// A bar of `width` cells, `used` of `total` filled.
std::string bar(uint64_t used, uint64_t total, int width) {
  int fill = total == 0 ? 0 : static_cast<int>((used * static_cast<uint64_t>(width) + total - 1) / total);
  return "[" + std::string(static_cast<size_t>(fill), '#') + std::string(static_cast<size_t>(width - fill), '.') + "]";
}

int print_table(const std::string& json, bool bars = false) {
  pt::ptree doc;
  if (!parse(json, &doc)) return kDaemonError;
  auto u = [&](const char* k) { return doc.get<uint64_t>(k, 0); };
  std::printf("ferryd %s (pid %llu)\n", doc.get<std::string>("version", "?").c_str(),
              static_cast<unsigned long long>(u("pid")));
  std::printf("device      %llu: %s\n", static_cast<unsigned long long>(u("device.index")),
              doc.get<std::string>("device.name", "?").c_str());
  std::printf("backend     %s, %s; copy engine: %s; host import: %s\n",
              doc.get<std::string>("device.backend", "?").c_str(), doc.get<std::string>("device.driver", "?").c_str(),
              doc.get<std::string>("device.copy_engine", "?").c_str(),
              doc.get<std::string>("device.host_import", "?").c_str());
  const std::string tl = doc.get<std::string>("device.timeline", "host");
  std::printf("timeline    %s\n", tl == "device" ? "written by the device after each client's copies (queue-ordered waits)"
                                                  : "written by ferryd when copies retire (the device cannot)");
  std::printf("ring        %llu slots of %s per client, at most %llu clients\n",
              static_cast<unsigned long long>(u("ring.slots_per_client")), human_bytes(u("ring.slot_bytes")).c_str(),
              static_cast<unsigned long long>(u("ring.max_clients")));
  std::printf("occupancy   %llu slots: %llu free, %llu in flight (%s in flight)\n",
              static_cast<unsigned long long>(u("ring.slots_total")),
              static_cast<unsigned long long>(u("ring.slots_free")),
              static_cast<unsigned long long>(u("ring.slots_in_flight")), human_bytes(u("ring.bytes_in_flight")).c_str());
  std::printf("since start %llu uploads, %s; %llu downloads; %llu failed; %llu connections\n\n",
              static_cast<unsigned long long>(u("totals.uploads")), human_bytes(u("totals.upload_bytes")).c_str(),
              static_cast<unsigned long long>(u("totals.downloads")), static_cast<unsigned long long>(u("totals.failed")),
              static_cast<unsigned long long>(u("totals.connections")));
  if (bars) std::printf("%-18s ", "OCCUPANCY");
  std::printf("%-5s %-8s %-6s %-16s %-11s %-8s %-10s %-11s %-6s %s\n", "ID", "PID", "UID", "COMMAND", "SLOTS", "BUFFERS",
              "UPLOADS", "BYTES", "ERRORS", "CONNECTED SINCE");
  for (const auto& [key, c] : doc.get_child("clients", pt::ptree())) {
    (void)key;
    char slots[24];
    std::snprintf(slots, sizeof slots, "%llu/%llu", static_cast<unsigned long long>(c.get<uint64_t>("slots_in_flight", 0)),
                  static_cast<unsigned long long>(c.get<uint64_t>("slots", 0)));
    if (bars) std::printf("%-18s ", bar(c.get<uint64_t>("slots_in_flight", 0), c.get<uint64_t>("slots", 0), 16).c_str());
    std::printf("%-5llu %-8llu %-6llu %-16s %-11s %-8llu %-10llu %-11s %-6llu %s\n",
                static_cast<unsigned long long>(c.get<uint64_t>("id", 0)),
                static_cast<unsigned long long>(c.get<uint64_t>("pid", 0)),
                static_cast<unsigned long long>(c.get<uint64_t>("uid", 0)), c.get<std::string>("name", "").c_str(), slots,
                static_cast<unsigned long long>(c.get<uint64_t>("buffers", 0)),
                static_cast<unsigned long long>(c.get<uint64_t>("uploads", 0)),
                human_bytes(c.get<uint64_t>("upload_bytes", 0)).c_str(),
                static_cast<unsigned long long>(c.get<uint64_t>("errors", 0)),
                since(c.get<int64_t>("connected_since", 0)).c_str());
  }
  if (doc.get<std::string>("all_clients_visible", "true") != "true")
    std::printf("(only your own clients are shown)\n");
  return kOk;
}

// ---------------------------------------------------------------- metrics
void metric(const char* name, const char* type, const char* help) {
  std::printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

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

void histogram(const char* name, const char* help, const pt::ptree& h) {
  metric(name, "histogram", help);
  std::vector<uint64_t> bounds, counts;
  for (const auto& [k, v] : h.get_child("bounds_ns", pt::ptree())) (void)k, bounds.push_back(v.get_value<uint64_t>());
  for (const auto& [k, v] : h.get_child("counts", pt::ptree())) (void)k, counts.push_back(v.get_value<uint64_t>());
  uint64_t cum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cum += counts[i];
    if (i < bounds.size())
      std::printf("%s_bucket{le=\"%g\"} %llu\n", name, static_cast<double>(bounds[i]) / 1e9,
                  static_cast<unsigned long long>(cum));
    else
      std::printf("%s_bucket{le=\"+Inf\"} %llu\n", name, static_cast<unsigned long long>(cum));
  }
  std::printf("%s_sum %.9f\n%s_count %llu\n", name, static_cast<double>(h.get<uint64_t>("sum_ns", 0)) / 1e9, name,
              static_cast<unsigned long long>(h.get<uint64_t>("count", 0)));
}

int print_metrics(const std::string& json) {
  pt::ptree d;
  if (!parse(json, &d)) return kDaemonError;
  auto u = [&](const char* k) { return static_cast<unsigned long long>(d.get<uint64_t>(k, 0)); };
  struct Plain {
    const char* name;
    const char* type;
    const char* key;
    const char* help;
  };
  static const Plain kPlain[] = {
      {"ferry_uploads_total", "counter", "totals.uploads", "Uploads completed since the daemon started."},
      {"ferry_upload_bytes_total", "counter", "totals.upload_bytes", "Bytes uploaded since the daemon started."},
      {"ferry_downloads_total", "counter", "totals.downloads", "Downloads completed since the daemon started."},
      {"ferry_failed_transfers_total", "counter", "totals.failed", "Transfers that failed with an error."},
      {"ferry_connections_total", "counter", "totals.connections", "Connections accepted since the daemon started."},
      {"ferry_clients", "gauge", "held.clients", "Clients whose resources are held (connected or draining)."},
      {"ferry_buffers", "gauge", "held.buffers", "Device buffers held by clients."},
      {"ferry_device_memory_bytes", "gauge", "held.device_bytes", "Device memory held by clients."},
      {"ferry_copies_in_flight", "gauge", "held.copies_in_flight", "Copies queued on the device."},
      {"ferry_slots", "gauge", "ring.slots_total", "Staging slots of connected clients."},
      {"ferry_slots_in_flight", "gauge", "ring.slots_in_flight", "Staging slots whose copy has not finished."},
      {"ferry_bytes_in_flight", "gauge", "ring.bytes_in_flight", "Bytes of copies not yet finished."},
      {"ferry_slot_bytes", "gauge", "ring.slot_bytes", "Bytes per staging slot."},
  };
  for (const auto& p : kPlain) {
    metric(p.name, p.type, p.help);
    std::printf("%s %llu\n", p.name, u(p.key));
  }
  metric("ferry_device_lost", "gauge", "1 once the device reported itself lost.");
  std::printf("ferry_device_lost %d\n", d.get<std::string>("device.lost", "false") == "true" ? 1 : 0);
  metric("ferry_info", "gauge", "The daemon's version, backend and device, as labels.");
  std::printf("ferry_info{version=\"%s\",backend=\"%s\",device=\"%s\"} 1\n",
              label(d.get<std::string>("version", "")).c_str(), label(d.get<std::string>("device.backend", "")).c_str(),
              label(d.get<std::string>("device.name", "")).c_str());
  struct PerClient {
    const char* name;
    const char* type;
    const char* key;
    const char* help;
  };
  static const PerClient kClient[] = {
      {"ferry_client_slots_in_flight", "gauge", "slots_in_flight", "Staging slots of this client in flight."},
      {"ferry_client_uploads_total", "counter", "uploads", "Uploads of this client completed."},
      {"ferry_client_upload_bytes_total", "counter", "upload_bytes", "Bytes this client uploaded."},
      {"ferry_client_errors_total", "counter", "errors", "Transfers of this client that failed."},
      {"ferry_client_device_memory_bytes", "gauge", "device_bytes", "Device memory this client holds."},
  };
  for (const auto& m : kClient) {
    metric(m.name, m.type, m.help);
    for (const auto& [k, c] : d.get_child("clients", pt::ptree())) {
      (void)k;
      std::printf("%s{client=\"%llu\",pid=\"%llu\",uid=\"%llu\",command=\"%s\"} %llu\n", m.name,
                  static_cast<unsigned long long>(c.get<uint64_t>("id", 0)),
                  static_cast<unsigned long long>(c.get<uint64_t>("pid", 0)),
                  static_cast<unsigned long long>(c.get<uint64_t>("uid", 0)), label(c.get<std::string>("name", "")).c_str(),
                  static_cast<unsigned long long>(c.get<uint64_t>(m.key, 0)));
    }
  }
  histogram("ferry_upload_latency_seconds", "From the daemon's receipt of an upload to its completion on the device.",
            d.get_child("histograms.upload_latency", pt::ptree()));
  histogram("ferry_slot_wait_seconds", "Time an upload piece waited for a free staging slot (reported by clients).",
            d.get_child("histograms.slot_wait", pt::ptree()));
  return kOk;
}

volatile std::sig_atomic_t g_interrupted = 0;

int watch(const std::string& socket, double interval) {
  std::signal(SIGINT, [](int) { g_interrupted = 1; });
  std::signal(SIGTERM, [](int) { g_interrupted = 1; });
  const bool tty = isatty(STDOUT_FILENO);
  while (!g_interrupted) {
    std::string doc;
    if (int r = fetch_status(socket, &doc, nullptr); r != kOk) return r;
    if (tty) std::fputs("\033[H\033[2J", stdout);  // home, clear
    int r = print_table(doc, true);
    if (r != kOk) return r;
    std::printf("\n(every %.1f s; Ctrl-C to stop)\n", interval);
    std::fflush(stdout);
    for (double t = 0; t < interval && !g_interrupted; t += 0.05) usleep(50'000);
  }
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket;
  std::string command;
  bool json = false;
  double interval = 1.0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kHelp, stdout);
      return kOk;
    } else if (a == "-V" || a == "--version") {
      std::printf("ferryctl %s\n", FERRY_VERSION);
      return kOk;
    } else if (a.rfind("--interval=", 0) == 0) {
      interval = std::atof(a.c_str() + 11);
      if (interval <= 0) {
        std::fprintf(stderr, "ferryctl: --interval needs a positive number of seconds\n");
        return kUsage;
      }
    } else if (a == "-s" || a == "--socket") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ferryctl: %s needs a path\n", a.c_str());
        return kUsage;
      }
      socket = argv[++i];
    } else if (a.rfind("--socket=", 0) == 0) {
      socket = a.substr(9);
    } else if (a == "--json") {
      json = true;
    } else if (a == "--interval") {
      if (i + 1 >= argc || std::atof(argv[i + 1]) <= 0) {
        std::fprintf(stderr, "ferryctl: --interval needs a positive number of seconds\n");
        return kUsage;
      }
      interval = std::atof(argv[++i]);
    } else if (command.empty() && a[0] != '-') {
      command = a;
    } else {
      std::fprintf(stderr, "ferryctl: unexpected argument \"%s\" (try ferryctl --help)\n", a.c_str());
      return kUsage;
    }
  }
  if (socket.empty()) {
    socket = proto::socket_path_from_env();
  }
  if (command.empty()) {
    std::fputs(kHelp, stderr);
    return kUsage;
  }
  if (command == "version" && json) {
    std::fprintf(stderr, "ferryctl: --json applies to status only\n");
    return kUsage;
  }
  std::string doc;
  if (command == "status") {
    if (int r = fetch_status(socket, &doc, nullptr); r != kOk) return r;
    if (json) {
      std::printf("%s\n", doc.c_str());
      return kOk;
    }
    return print_table(doc);
  }
  if (command == "watch") return watch(socket, interval);
  if (command == "metrics") {
    if (int r = fetch_status(socket, &doc, nullptr); r != kOk) return r;
    return print_metrics(doc);
  }
  if (command == "ping") {
    double rtt = 0;
    if (int r = fetch_status(socket, &doc, &rtt); r != kOk) return r;
    std::printf("ferryd on %s answered in %.0f us\n", socket.c_str(), rtt);
    return kOk;
  }
  if (command == "version") {
    std::printf("ferryctl %s\n", FERRY_VERSION);
    if (fetch_status(socket, &doc, nullptr) == kOk) {
      pt::ptree t;
      std::istringstream in(doc);
      pt::read_json(in, t);
      std::printf("ferryd %s on %s\n", t.get<std::string>("version", "?").c_str(), socket.c_str());
    }
    return kOk;
  }
  std::fprintf(stderr, "ferryctl: unknown command \"%s\" (try ferryctl --help)\n", command.c_str());
  return kUsage;
}
