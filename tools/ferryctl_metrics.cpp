// SPDX-License-Identifier: MIT
// ferryctl metrics: the Prometheus text exposition (ferryctl.hpp).
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

namespace ferry::ctl {

// ---------------------------------------------------------------- metrics

static std::string label(const std::string& v) {  // a Prometheus label value, escaped
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

static void sample(Families& f, const std::string& name, const char* type, const char* help, const std::string& labels,
            double value) {
  Family& fam = f[name];
  fam.type = type;
  fam.help = help;
  char v[64];
  std::snprintf(v, sizeof v, "%.17g", value);
  fam.samples.push_back(name + "{" + labels + "} " + v);
}

static void histogram(Families& f, const char* name, const char* help, const std::string& dev, const json::object& d,
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
    for (const char* why : proto::kPassNames)
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
static std::string device_of_socket(const std::string& sock) {
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

}  // namespace ferry::ctl
