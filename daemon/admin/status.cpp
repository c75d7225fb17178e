// SPDX-License-Identifier: MIT
#include "admin/status.hpp"

#include <boost/json.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace ferry::ferryd {

namespace {

namespace json = boost::json;

// {"bounds_ns":[...],"counts":[...],"count":n,"sum_ns":s}; counts per bucket, the last one above every bound.
json::object histogram_json(const Histogram& h) {
  json::array bounds, counts;
  for (size_t i = 0; i + 1 < proto::kLatencyBuckets; ++i) bounds.push_back(proto::kLatencyBoundsNs[i]);
  for (size_t i = 0; i < proto::kLatencyBuckets; ++i) counts.push_back(h.buckets[i]);
  return {{"bounds_ns", std::move(bounds)}, {"counts", std::move(counts)}, {"count", h.count}, {"sum_ns", h.sum_ns}};
}

int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

}  // namespace

namespace {
// What each user holds against Limits (an admin sees every user, anyone
// else its own), and the bounds themselves.
json::array users_json(const StatusInputs& ctx, bool all, uid_t viewer) {
  const auto& conns = ctx.connections;
  std::set<uid_t> uids;
  for (const auto& [uid, n] : conns) uids.insert(uid);
  for (const auto& [id, c] : ctx.engine.clients().all()) uids.insert(c->uid);
  for (uid_t uid : ctx.engine.resources().exporters()) uids.insert(uid);  // charged with no client left
  for (uid_t uid : ctx.engine.resources().area_holders()) uids.insert(uid);  // areas still mapped somewhere
  json::array rows;
  for (uid_t uid : uids) {
    if (!all && uid != viewer) continue;
    const Usage u = ctx.engine.resources().usage(uid);
    auto it = conns.find(uid);
    rows.push_back(json::object{{"uid", uid}, {"connections", it != conns.end() ? it->second : 0}, {"clients", u.clients},
                                {"buffers", u.buffers}, {"device_bytes", u.device_bytes}, {"grants", u.grants},
                                {"opens", u.opens}, {"imports", u.imports}, {"event_pools", u.event_pools},
                                {"staging_bytes", u.staging_bytes}, {"staging_areas", u.staging_areas},
                                {"exported_bytes", u.exported_bytes},
                                {"exports_kept_bytes", u.exports_kept_bytes}});
  }
  return rows;
}

// Processes under ferry-run, per user and command: those that exited
// (RunTotals) and those running now (their lead clients' rows), so that a
// total never goes down; and the last ones that exited, each on its own.
json::object run_json(const RunCounts& c) {
  json::object passed;
  for (uint32_t i = 0; i < proto::kPassReasons; ++i) passed[proto::kPassNames[i]] = c.passed[i];
  return {{"staged", c.staged}, {"staged_bytes", c.staged_bytes}, {"passed", std::move(passed)},
          {"passed_bytes", c.passed_bytes}};
}

json::array run_totals_json(const TransferEngine& engine, const RunTotals& totals, bool all, uid_t viewer) {
  struct Sum {
    uint64_t processes = 0, running = 0;
    RunCounts counts;
  };
  std::map<std::pair<uid_t, std::string>, Sum> sums;
  for (const auto& [key, row] : totals.rows()) {
    Sum& s = sums[key];
    s.processes = row.processes;
    s.counts.add(row.counts);
  }
  for (const auto& [id, c] : engine.clients().all()) {
    const ClientState::Run run = c->run();
    if (run.role != proto::kRunLead) continue;
    Sum& s = sums[{c->uid, totals.row_name(c->uid, c->name)}];
    ++s.running;
    s.counts.add(run.counts);
  }
  json::array rows;
  for (const auto& [key, s] : sums) {
    if (!all && key.first != viewer) continue;
    json::object r = run_json(s.counts);
    r["uid"] = key.first;
    r["command"] = key.second;
    r["processes_exited"] = s.processes;
    r["processes_running"] = s.running;
    rows.push_back(std::move(r));
  }
  return rows;
}

json::array run_exited_json(const RunTotals& totals, bool all, uid_t viewer) {
  json::array rows;
  for (const RunTotals::Exited& e : totals.recent()) {
    if (!all && e.uid != viewer) continue;
    json::object r = run_json(e.counts);
    r["pid"] = e.pid;
    r["uid"] = e.uid;
    r["command"] = e.command;
    r["exited"] = unix_seconds(e.at);
    rows.push_back(std::move(r));
  }
  return rows;
}

// What ferryd keeps now, each thing counted (docs/DESIGN.md, "What ferryd
// keeps"): an admin's view of what must return to idle.
json::object kept_json(const StatusInputs& ctx) {
  const TransferEngine::Kept k = ctx.engine.kept();
  return {{"sessions", ctx.sessions},
          {"user_rows", ctx.user_rows},
          {"client_states", k.client_states},
          {"departed_clients", k.departed_clients},
          {"holders", k.holders},
          {"held_transfers", k.held_transfers},
          {"rings", k.rings},
          {"copies_in_flight", k.copies_in_flight},
          {"grants", k.grants},
          {"export_rows", k.export_rows},
          {"departed_area_charges", k.departed_area_charges},
          {"area_watches", k.area_watches},
          {"run_rows", k.run_rows},
          {"run_exited", k.run_exited},
          {"segments_ready", k.segments.ready},
          {"segments_target", k.segments.target},
          {"segments_to_unmap", k.segments.to_unmap},
          {"segment_orders", k.segments.orders}};
}

json::object limits_json(const Limits& l) {
  return {{"max_clients", l.max_clients},         {"max_connections", l.max_connections},
          {"admin_seats", Limits::kAdminSeats},   {"user_share_percent", l.user_share},
          {"user_memory_bytes", l.user_memory},   {"max_buffers", l.max_buffers},
          {"max_buffers_total", l.max_buffers_total}, {"max_grants", l.max_grants},
          {"max_opens", l.max_opens},             {"max_imports", l.max_imports},
          {"max_event_pools", l.max_event_pools}, {"user_staging_bytes", l.user_staging}};
}
}  // namespace

namespace {
json::value or_null(const std::string& s) { return s.empty() ? json::value(nullptr) : json::value(s); }

// One client's row: its ring, its holdings, its counts.
json::object client_json(const TransferEngine& engine, const ClientState& c) {
  const ClientStats& cs = c.stats();
  const ClientState::Direct direct = c.direct();
  json::object row{{"id", c.id()},
                   {"pid", c.pid},
                   {"uid", c.uid},
                   {"name", c.name},
                   {"slots", c.slot_count()},
                   {"entries", c.ring_entries()},
                   {"transfers_in_flight", c.in_flight()},
                   {"bytes_in_flight", c.in_flight_bytes()},
                   {"buffers", c.buffer_count()},
                   {"device_bytes", c.device_bytes()},
                   {"uploads", cs.uploads},
                   {"upload_pieces", cs.upload_pieces},
                   {"upload_bytes", cs.upload_bytes},
                   {"downloads", cs.downloads},
                   {"errors", cs.errors},
                   {"completed", c.completed()},
                   // As the client reports them (ferry_upload_direct): its row only.
                   {"direct_uploads", direct.uploads},
                   {"direct_bytes", direct.bytes},
                   {"direct_in_flight", direct.in_flight},
                   {"staging_area_bytes", c.areas().bytes()},
                   // Its doorbell's rings in vain in a row (a pause past 4).
                   {"doorbell_idle_rings", engine.doorbell_idle_rings(c)},
                   {"connected_since", unix_seconds(c.since)}};
  // A process under ferry-run, as its lead client counts it (its row only).
  if (const ClientState::Run run = c.run(); run.role != 0) {
    json::object r = run_json(run.counts);
    r["role"] = run.role == proto::kRunLead ? "lead" : "lane";
    row["run"] = std::move(r);
  }
  return row;
}

// What one viewer may see: every client's traffic (an admin), or its own
// clients' alone, their ring counts, totals, holdings and histograms included.
struct Seen {
  json::array clients;
  uint64_t entries = 0, busy = 0, bytes_busy = 0;
  ClientStats totals{};
  uint64_t connections = 0, copies = 0;
  Holdings held{};
  Histogram latency{}, slot_wait{}, hold_wait{};
  EngineStats poll{};
};

Seen seen_by(const StatusInputs& ctx, bool all, uid_t viewer) {
  const TransferEngine& engine = ctx.engine;
  const EngineStats& st = engine.stats();
  Seen s;
  if (all) {
    s.totals = ClientStats{st.uploads, st.upload_pieces, st.upload_bytes, st.downloads, st.failed};
    s.connections = ctx.stats.clients;
    s.copies = st.in_flight;
    s.held = engine.resources().holdings();
    s.latency = st.upload_latency;
    s.slot_wait = engine.clients().slot_waits();
    s.hold_wait = engine.hold_waits();
    s.poll = st;
  }
  for (const auto& [id, c] : engine.clients().all()) {
    if (!c->connected() || (!all && c->uid != viewer)) continue;
    s.entries += c->ring_entries();
    s.busy += c->in_flight();
    s.bytes_busy += c->in_flight_bytes();
    s.clients.push_back(client_json(engine, *c));
    if (all) continue;
    const ClientStats& cs = c->stats();
    s.totals.uploads += cs.uploads;
    s.totals.upload_pieces += cs.upload_pieces;
    s.totals.upload_bytes += cs.upload_bytes;
    s.totals.downloads += cs.downloads;
    s.totals.errors += cs.errors;
    ++s.connections;
    s.copies += c->in_flight();
    ++s.held.clients;
    s.held.buffers += c->buffer_count();
    s.held.device_bytes += c->device_bytes();
  }
  if (all) s.bytes_busy = st.in_flight_bytes;
  return s;
}

json::object device_json(const StatusInputs& ctx) {
  const DeviceInfo& info = ctx.engine.device();
  return {{"index", ctx.options.device},
          {"backend", info.backend},
          {"name", info.name},
          {"driver", info.driver},
          {"memory_bytes", info.memory_bytes},
          {"copy_engine", info.copy_engine},
          {"host_import", info.host_import},
          {"lost", ctx.engine.device_lost()},
          {"timeline", ctx.engine.device_timeline() ? "device" : "host"},
          {"sharing", or_null(info.sharing)},
          {"fallback", or_null(info.fallback)},
          {"uuid", or_null(info.uuid)},
          {"pci_bus_id", or_null(info.pci_bus_id)}};
}

json::object ring_json(const Options& opts, const Seen& s) {
  return {{"slot_bytes", opts.slot_bytes},
          {"slots_per_client", opts.slots},
          {"entries_per_client", proto::ring_entries(opts.slots)},
          {"max_clients", opts.limits.max_clients},
          {"entries_total", s.entries},
          {"transfers_in_flight", s.busy},
          {"entries_free", s.entries - s.busy},
          {"bytes_in_flight", s.bytes_busy}};
}

// uploads: ferry_upload calls done; upload_pieces: the copies they took.
// connections: clients (Hellos), not status requests such as ferryctl's.
json::object totals_json(const StatusInputs& ctx, const Seen& s, bool all) {
  const ServerStats& st = ctx.stats;
  return {{"uploads", s.totals.uploads},
          {"upload_pieces", s.totals.upload_pieces},
          {"upload_bytes", s.totals.upload_bytes},
          {"downloads", s.totals.downloads},
          {"failed", s.totals.errors},
          {"connections", s.connections},
          {"status_requests", all ? st.connections - st.clients : 0},
          {"connections_refused", all ? st.refused : 0},
          {"accept_failures", all ? st.accept_failures : 0},
          {"hellos_gone", all ? st.hellos_gone : 0},
          {"log_lines_left_out", all ? st.log_lines_left_out : 0}};
}

json::object poller_json(const EngineStats& poll) {
  return {{"ring_entries", poll.ring_entries},        {"doorbells", poll.doorbells},
          {"device_wakes", poll.device_wakes},        {"sleeps", poll.poller_sleeps},
          {"naps", poll.poller_naps},                 {"segments_pooled", poll.segments_pooled},
          {"segments_ordered", poll.segments_ordered}, {"segments_made", poll.segments_made}};
}
}  // namespace

std::string status_json(const StatusInputs& ctx, const PeerCred& who) {
  const uid_t viewer = who.uid;
  const bool all = is_admin(ctx.options, who);
  // The ring's counts, as everything below, are of the clients the viewer
  // may see: another user's traffic is theirs.
  Seen s = seen_by(ctx, all, viewer);
  const auto& run_totals = ctx.engine.clients().run_totals();
  json::object doc{
      {"version", FERRY_VERSION},
      {"pid", ::getpid()},
      {"started", ctx.stats.started_unix},
      {"device", device_json(ctx)},
      {"ring", ring_json(ctx.options, s)},
      {"totals", totals_json(ctx, s, all)},
      {"poller", poller_json(s.poll)},
      {"held",
       {{"clients", s.held.clients},
        {"buffers", s.held.buffers},
        {"device_bytes", s.held.device_bytes},
        {"copies_in_flight", s.copies}}},
      {"clients", std::move(s.clients)},
      {"users", users_json(ctx, all, viewer)},
      {"run_totals", run_totals_json(ctx.engine, run_totals, all, viewer)},
      {"run_exited", run_exited_json(run_totals, all, viewer)},
      {"limits", limits_json(ctx.options.limits)},
      {"kept", all ? kept_json(ctx) : json::object{}},
      {"all_clients_visible", all},
      {"scope", all ? "daemon" : "own clients"},
      {"histograms", {{"upload_latency", histogram_json(s.latency)}, {"slot_wait", histogram_json(s.slot_wait)},
                      {"hold_wait", histogram_json(s.hold_wait)}}}};
  return json::serialize(doc);
}

std::string status_line(const TransferEngine& engine) {
  uint64_t entries = 0, busy = 0;
  for (const auto& [id, c] : engine.clients().all())
    if (c->connected()) entries += c->ring_entries(), busy += c->in_flight();
  return std::to_string(engine.clients().connected()) + " clients, " + std::to_string(busy) + "/" +
         std::to_string(entries) + " transfers in flight, " + std::to_string(engine.stats().uploads) + " uploads" +
         (engine.device_lost() ? ", DEVICE LOST" : "");
}

}  // namespace ferry::ferryd
