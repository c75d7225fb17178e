#include "status.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace ferry::ferryd {

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

// {"bounds_ns":[...],"counts":[...],"count":n,"sum_ns":s}; counts per bucket, the last one above every bound.
std::string histogram_json(const Histogram& h) {
  std::ostringstream o;
  o << "{\"bounds_ns\":[";
  for (size_t i = 0; i + 1 < proto::kLatencyBuckets; ++i) o << (i ? "," : "") << proto::kLatencyBoundsNs[i];
  o << "],\"counts\":[";
  for (size_t i = 0; i < proto::kLatencyBuckets; ++i) o << (i ? "," : "") << h.buckets[i];
  o << "],\"count\":" << h.count << ",\"sum_ns\":" << h.sum_ns << "}";
  return o.str();
}

int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

const char* json_bool(bool b) { return b ? "true" : "false"; }

}  // namespace

bool is_admin(const Options& o, uid_t uid, gid_t gid) {
  if (uid == 0 || uid == ::geteuid()) return true;
  if (o.admin_group.empty()) return false;
  group* g = ::getgrnam(o.admin_group.c_str());
  if (g == nullptr) return false;
  if (gid == g->gr_gid) return true;
  passwd* pw = ::getpwuid(uid);
  if (pw == nullptr) return false;
  for (char** m = g->gr_mem; m != nullptr && *m != nullptr; ++m)
    if (std::strcmp(*m, pw->pw_name) == 0) return true;
  return false;
}

std::string status_json(const Context& ctx, uid_t viewer, gid_t viewer_gid) {
  const TransferEngine& engine = ctx.engine;
  const Options& opts = ctx.options;
  const DeviceInfo& info = engine.device();
  const EngineStats& st = engine.stats();
  const Holdings& held = engine.holdings();
  const bool all = is_admin(opts, viewer, viewer_gid);
  uint64_t slots_total = 0, slots_busy = 0;
  std::ostringstream clients;
  bool first = true;
  for (const auto& [id, c] : engine.clients()) {
    if (!c->connected) continue;
    slots_total += c->slot_count();
    slots_busy += c->in_flight();
    if (!all && c->uid != viewer) continue;
    const ClientStats& cs = c->stats();
    clients << (first ? "" : ",") << "{\"id\":" << c->id() << ",\"pid\":" << c->pid << ",\"uid\":" << c->uid
            << ",\"name\":" << json_string(c->name) << ",\"slots\":" << c->slot_count()
            << ",\"slots_in_flight\":" << c->in_flight() << ",\"bytes_in_flight\":" << c->in_flight_bytes()
            << ",\"buffers\":" << c->buffer_count() << ",\"device_bytes\":" << c->device_bytes()
            << ",\"uploads\":" << cs.uploads << ",\"upload_bytes\":" << cs.upload_bytes
            << ",\"downloads\":" << cs.downloads << ",\"errors\":" << cs.errors
            << ",\"completed\":" << c->completed() << ",\"connected_since\":" << unix_seconds(c->since) << "}";
    first = false;
  }
  // What other users did is theirs: a viewer who sees only its own clients
  // gets totals, holdings and histograms of its own clients too.
  uint64_t uploads = st.uploads, upload_bytes = st.upload_bytes, downloads = st.downloads, failed = st.failed;
  uint64_t connections = ctx.stats.connections, copies = st.in_flight;
  Holdings h = held;
  Histogram latency = st.upload_latency, slot_wait = engine.slot_waits();
  EngineStats poll = st;
  if (!all) {
    uploads = upload_bytes = downloads = failed = connections = copies = 0;
    h = Holdings{};
    latency = slot_wait = Histogram{};
    poll = EngineStats{};
    for (const auto& [id, c] : engine.clients()) {
      if (!c->connected || c->uid != viewer) continue;
      const ClientStats& cs = c->stats();
      uploads += cs.uploads;
      upload_bytes += cs.upload_bytes;
      downloads += cs.downloads;
      failed += cs.errors;
      ++connections;
      copies += c->in_flight();
      ++h.clients;
      h.buffers += c->buffer_count();
      h.device_bytes += c->device_bytes();
    }
  }
  std::ostringstream o;
  o << "{\"version\":" << json_string(FERRY_VERSION) << ",\"pid\":" << ::getpid()
    << ",\"started\":" << ctx.stats.started_unix << ",\"device\":{\"index\":" << opts.device
    << ",\"backend\":" << json_string(info.backend) << ",\"name\":" << json_string(info.name)
    << ",\"driver\":" << json_string(info.driver) << ",\"memory_bytes\":" << info.memory_bytes
    << ",\"copy_engine\":" << json_bool(info.copy_engine) << ",\"host_import\":" << json_bool(info.host_import)
    << ",\"lost\":" << json_bool(engine.device_lost())
    << ",\"timeline\":" << (engine.device_timeline() ? "\"device\"" : "\"host\"") << "},\"ring\":{\"slot_bytes\":" << opts.slot_bytes
    << ",\"slots_per_client\":" << opts.slots << ",\"max_clients\":" << opts.max_clients
    << ",\"slots_total\":" << slots_total << ",\"slots_in_flight\":" << slots_busy
    << ",\"slots_free\":" << (slots_total - slots_busy) << ",\"bytes_in_flight\":" << st.in_flight_bytes
    << "},\"totals\":{\"uploads\":" << uploads << ",\"upload_bytes\":" << upload_bytes
    << ",\"downloads\":" << downloads << ",\"failed\":" << failed << ",\"connections\":" << connections
    << "},\"poller\":{\"ring_entries\":" << poll.ring_entries << ",\"doorbells\":" << poll.doorbells
    << ",\"sleeps\":" << poll.poller_sleeps << ",\"segments_pooled\":" << poll.segments_pooled
    << ",\"segments_made\":" << poll.segments_made
    << "},\"held\":{\"clients\":" << h.clients << ",\"buffers\":" << h.buffers
    << ",\"device_bytes\":" << h.device_bytes << ",\"copies_in_flight\":" << copies
    << "},\"clients\":[" << clients.str() << "],\"all_clients_visible\":" << json_bool(all)
    << ",\"scope\":" << (all ? "\"daemon\"" : "\"own clients\"");
  o << ",\"histograms\":{\"upload_latency\":" << histogram_json(latency)
    << ",\"slot_wait\":" << histogram_json(slot_wait) << "}}";
  return o.str();
}

std::string status_line(const TransferEngine& engine) {
  uint64_t slots = 0, busy = 0;
  for (const auto& [id, c] : engine.clients())
    if (c->connected) slots += c->slot_count(), busy += c->in_flight();
  return std::to_string(engine.connected_clients()) + " clients, " + std::to_string(busy) + "/" +
         std::to_string(slots) + " slots in flight, " + std::to_string(engine.stats().uploads) + " uploads" +
         (engine.device_lost() ? ", DEVICE LOST" : "");
}

}  // namespace ferry::ferryd
