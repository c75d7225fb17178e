// SPDX-License-Identifier: MIT
// ferryctl status and watch: the daemon's document as text (ferryctl.hpp).
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

// A status line of 80 columns at most: its label in the first 12, the text
// folded at spaces, continued under itself.
static void paragraph(const std::string& label, const std::string& text) {
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
static std::string human_bytes(unsigned long long b) { return ferry::util::format_size(b); }

static std::string since(long long t) {
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
static unsigned long long sum_sat(unsigned long long a, unsigned long long b) { return a + b < a ? ~0ull : a + b; }

static std::string bar(unsigned long long used, unsigned long long total, int width) {
  const int fill = total == 0 ? 0 : static_cast<int>(std::min<unsigned long long>(width, (used * width + total - 1) / total));
  return "[" + std::string(static_cast<size_t>(fill), '#') + std::string(static_cast<size_t>(width - fill), '.') + "]";
}

// A user's name, as ps prints it; the number where the system has none.
static std::string user_name(unsigned long long uid) {
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
static std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char out[64] = "";
  if (std::tm tm{}; ::localtime_r(&t, &tm) != nullptr) std::strftime(out, sizeof out, "%a %b %e %H:%M:%S %Y", &tm);
  return out;
}

// The reasons a ferry-run process left copies to the driver, as status names them.
using ferry::proto::kPassNames;

// Processes under ferry-run: what each staged, and what it left to the
// driver and why (its lead client's row carries the process's counts).
static void print_run(const json::object& d) {
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


// Per second between two counts; 0 where a counter went back (a restart).
static double per_s(unsigned long long now, unsigned long long before, double dt) {
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

}  // namespace ferry::ctl
