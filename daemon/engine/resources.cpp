// SPDX-License-Identifier: MIT
// Device memory lent to clients, their event pools and grants, and each
// user's bounds (resources.hpp). Every call into the backend for them is here.
#include "engine/resources.hpp"

#include <algorithm>
#include <cerrno>
#include <functional>
#include <string>

namespace ferry::ferryd {

void Resources::client_gone(ClientState& c) {
  grants_.revoke(c.id(), 0, nullptr, true);  // its grants end with it, and its buffers go
  for (const auto& [id, backend_id] : c.event_pools()) backend_.close_event_pool(backend_id);
  --holdings_.clients;
}

BufferRef Resources::lend(void* ptr, uint64_t bytes, bool imported) {
  ++holdings_.buffers;
  holdings_.device_bytes += bytes;
  auto* raw = new Buffer;
  raw->ptr = ptr;
  raw->bytes = bytes;
  raw->imported = imported;
  return BufferRef(raw, [this](Buffer* b) {
    // Every copy into it retired: no device write to its fence is queued.
    if (b->fence != 0)
      if (auto owner = b->owner.lock()) owner->give_fence(b->fence);
    // An exported allocation's memory may live on in its importers: its
    // charge stays with its user (export_buffer), now as held by nobody here.
    if (b->exported) exports_[b->uid].kept += b->charged;
    if (b->imported) {
      backend_.release_import(b->ptr);
    } else {
      backend_.free(b->ptr);
    }
    --holdings_.buffers;
    holdings_.device_bytes -= b->bytes;
    auto released = std::move(b->released);
    delete b;
    if (released) released();
  });
}

int Resources::alloc(ClientState& c, uint64_t bytes, uint64_t* id, uint32_t* fence) {
  if (lost_) return -ENODEV;
  if (bytes == 0) return -EINVAL;
  if (int r = within(c, Quota::memory, bytes); r != 0) return r;
  if (int r = within(c, Quota::buffers); r != 0) return r;
  void* p = nullptr;
  if (int r = backend_.alloc(bytes, &p); r != 0) return r;
  BufferRef b = lend(p, bytes, false);
  b->charged = bytes;
  b->uid = c.uid;
  b->owner = c.weak_from_this();
  b->fence = c.take_fence();
  if (fence != nullptr) *fence = b->fence;
  *id = c.adopt(std::move(b));
  return 0;
}

int Resources::free(ClientState& c, uint64_t id, std::function<void()> unmapped) {
  BufferRef b = c.owned(id);
  bool owned = false;
  if (int r = c.remove(id, &owned); r != 0) return r;
  if (owned) grants_.revoke(c.id(), id, nullptr, true);  // a freed buffer takes its grants with it
  if (!b || !b->imported || !unmapped) return 0;
  if (b.use_count() == 1) return 0;  // unmapped as `b` goes, before the caller answers
  b->released = std::move(unmapped);  // copies in flight still hold it
  return -EINPROGRESS;
}

int Resources::import_buffer(ClientState& c, const IpcHandle& h, uint64_t bytes, uint64_t* id, uint32_t* fence) {
  if (bytes == 0) return -EINVAL;
  if (int r = within(c, Quota::imports); r != 0) return r;
  void* p = nullptr;
  uint64_t mapped = 0;
  if (int r = backend_.import_buffer(h, bytes, &p, &mapped); r != 0) return r;
  // The whole mapping counts against the user's memory, whatever it named.
  if (int r = within(c, Quota::memory, mapped); r != 0) {
    backend_.release_import(p);
    return r;
  }
  BufferRef b = lend(p, bytes, true);
  b->charged = mapped;
  // As an allocation: its user's, a fence in its owner's segment, grantable.
  b->uid = c.uid;
  b->owner = c.weak_from_this();
  b->fence = c.take_fence();
  if (fence != nullptr) *fence = b->fence;
  *id = c.adopt(std::move(b));
  return 0;
}

int Resources::export_buffer(ClientState& c, uint64_t id, IpcHandle* h, uint64_t* bytes, bool* first,
                             ExportCharge* charge) {
  auto b = c.owned(id);
  *first = false;
  if (!b || b->imported) return -ENOENT;
  if (!b->exported)
    if (int r = within(c, Quota::exports, b->charged); r != 0) return r;
  if (int r = backend_.export_buffer(b->ptr, h); r != 0) return r;
  if (!b->exported) exports_[b->uid].bytes += b->charged;
  *first = !b->exported;
  if (*first && charge != nullptr) *charge = ExportCharge{b, b->uid, b->charged};
  b->exported = true;
  *bytes = b->bytes;
  return 0;
}

void Resources::export_unsent(const ExportCharge& charge) {
  auto it = exports_.find(charge.uid);
  if (it == exports_.end()) return;
  Exports& e = it->second;
  if (auto b = charge.buffer.lock()) {
    if (!b->exported) return;
    b->exported = false;
  } else {
    e.kept -= std::min(e.kept, charge.bytes);  // freed meanwhile: its deleter moved it to kept
  }
  e.bytes -= std::min(e.bytes, charge.bytes);
  if (e.bytes == 0 && e.kept == 0) exports_.erase(it);
}

int Resources::open_event_pool(ClientState& c, const IpcHandle& h, uint32_t count, uint64_t* id) {
  if (int r = within(c, Quota::event_pools); r != 0) return r;
  uint64_t backend_id = 0;
  if (int r = backend_.open_event_pool(h, count, &backend_id); r != 0) return r;
  *id = c.add_event_pool(backend_id);
  return 0;
}

int Resources::grant(ClientState& c, uint64_t buffer, uint32_t rights, Token* token) {
  auto b = c.owned(buffer);
  const uint32_t all = proto::kRightUpload | proto::kRightDownload;
  if (!b) return -ENOENT;  // only the owner of an allocation (or an import) grants it
  if (rights == 0 || (rights & ~all) != 0) return -EINVAL;
  if (int r = within(c, Quota::grants); r != 0) return r;
  *token = grants_.add(b, c.id(), buffer, rights)->token;
  return 0;
}

int Resources::revoke(ClientState& c, uint64_t buffer, const uint8_t* token, size_t* n) {
  *n = 0;
  if (!c.owned(buffer)) return -ENOENT;
  *n = grants_.revoke(c.id(), buffer, token);
  return *n == 0 && token != nullptr ? -ENOENT : 0;
}

int Resources::open(ClientState& c, const uint8_t* token, uint64_t* id, uint64_t* bytes, uint32_t* rights) {
  auto g = grants_.find(token);
  if (!g) return -EACCES;  // a forged or revoked token: nothing
  if (int r = within(c, Quota::opens); r != 0) return r;
  if (int r = c.open(g, id, bytes); r != 0) return r;
  *rights = g->rights;
  return 0;
}

int Resources::grow_staging(ClientState& c, uint64_t bytes, uint64_t* id, uint64_t* size, int* fd) {
  *fd = -1;
  if (bytes == 0 || bytes > proto::kMaxStagingArea) return -EINVAL;
  // Whole steps: tiny areas would buy a user descriptors of ferryd's cheaply.
  bytes = (bytes + proto::kStagingAreaStep - 1) / proto::kStagingAreaStep * proto::kStagingAreaStep;
  if (int r = within(c, Quota::staging, bytes); r != 0) return r;
  int own = -1;
  if (int r = StagingAreas::make(bytes, &own); r != 0) return r;
  const uint64_t key = ++next_area_;
  if (int r = areas_.add(key, own, fd); r != 0) return r;
  *id = c.areas().add(bytes, key);
  *size = bytes;
  return 0;
}

int Resources::release_staging(ClientState& c, uint64_t id) {
  StagingAreas::Area a;
  if (!c.areas().take(id, &a)) return -ENOENT;
  departed_areas_[a.key] = Departed{c.uid, a.bytes};  // before depart: it may settle at once
  areas_.depart(a.key, true);
  return 0;
}

void Resources::areas_gone(ClientState& c) {
  // Not punched: the client's queue may still copy from them (ferryd
  // restarted, an admin's disconnect); they are its until it lets go.
  for (const StagingAreas::Area& a : c.areas().take_all()) {
    departed_areas_[a.key] = Departed{c.uid, a.bytes};
    areas_.depart(a.key, false);
  }
}

std::vector<uid_t> Resources::area_holders() const {
  std::vector<uid_t> out;
  for (const auto& [key, d] : departed_areas_) out.push_back(d.uid);
  return out;
}

std::vector<uid_t> Resources::exporters() const {
  std::vector<uid_t> out;
  for (const auto& [uid, e] : exports_) out.push_back(uid);
  return out;
}

Usage Resources::usage(uid_t uid) const {
  Usage u;
  if (auto it = exports_.find(uid); it != exports_.end()) {
    u.exported_bytes = it->second.bytes;
    u.exports_kept_bytes = it->second.kept;
  }
  for (const auto& [key, d] : departed_areas_) {
    if (d.uid != uid) continue;
    u.staging_bytes += d.bytes;
    ++u.staging_areas;
  }
  for (const auto& [id, c] : clients_) {
    if (c->uid != uid) continue;
    ++u.clients;
    u.buffers += c->allocated();
    u.device_bytes += c->device_bytes();
    u.grants += grants_.count(id);
    u.opens += c->opened();
    u.imports += c->imported();
    u.event_pools += c->event_pools().size();
    u.staging_bytes += c->areas().bytes();
    u.staging_areas += c->areas().count();
  }
  return u;
}

int Resources::within(const ClientState& c, Quota q, uint64_t bytes) {
  const Usage u = usage(c.uid);
  const std::string who = "uid " + std::to_string(c.uid);  // for a refusal's text
  std::string why = q == Quota::memory || q == Quota::exports || q == Quota::staging ? bytes_refusal(q, u, bytes, who)
                                                                                     : count_refusal(c, q, u, who);
  if (why.empty()) return 0;
  refusal_ = std::move(why);
  return -EDQUOT;
}

// Why `bytes` more of device memory, exports or staging would pass the
// user's bound, or empty.
std::string Resources::bytes_refusal(Quota q, const Usage& u, uint64_t bytes, const std::string& who) const {
  if (q == Quota::memory) {
    const uint64_t bound = limits_.user_memory;
    if (bound == 0 || (bytes <= bound && u.device_bytes <= bound - bytes)) return {};
    return who + " holds " + std::to_string(u.device_bytes) + " B of device memory; " + std::to_string(bytes) +
           " B more would pass --user-memory " + std::to_string(bound);
  }
  if (q == Quota::exports) {
    // What one user keeps alive never passes twice --user-memory: its live
    // allocations (bounded above) and its exports, kept after their free.
    const uint64_t bound = limits_.user_memory;
    if (bound == 0 || (bytes <= bound && u.exported_bytes <= bound - bytes)) return {};
    return who + ": exports " + std::to_string(u.exported_bytes) + " B + " + std::to_string(bytes) +
           " B > export allowance --user-memory " + std::to_string(bound);
  }
  if (u.staging_areas >= proto::kMaxStagingAreas)
    return who + " holds " + std::to_string(u.staging_areas) + " staging areas, the most one user may (" +
           std::to_string(proto::kMaxStagingAreas) + ")";
  const uint64_t bound = limits_.user_staging;
  if (bytes <= bound && u.staging_bytes <= bound - bytes) return {};
  return who + " holds " + std::to_string(u.staging_bytes) + " B of staging areas; " + std::to_string(bytes) +
         " B more would pass --user-staging " + std::to_string(bound);
}

// Why one more allocation, grant, open, import or event pool would pass a
// bound (all users' allocations, the user's share of them, the user's
// own), or empty.
std::string Resources::count_refusal(const ClientState& c, Quota q, const Usage& u, const std::string& who) {
  if (q == Quota::buffers && limits_.max_buffers_total != 0) {
    const uint64_t total = limits_.max_buffers_total;
    if (holdings_.buffers >= total) {
      refused_total_.note("allocation refused: all users together hold --max-buffers-total allocations");
      return "all users together hold " + std::to_string(holdings_.buffers) + " allocations (--max-buffers-total " +
             std::to_string(total) + ")";
    }
    if (!c.admin && u.buffers >= limits_.share_of(total))
      return who + " holds " + std::to_string(u.buffers) + " allocations, its most of --max-buffers-total " +
             std::to_string(total) + " (--user-share " + std::to_string(limits_.user_share) + "%)";
  }
  struct Bound {
    uint64_t have, most;
    const char* what;
    const char* flag;
  };
  const Bound b = q == Quota::buffers  ? Bound{u.buffers, limits_.max_buffers, "allocations", "--max-buffers"}
                : q == Quota::grants   ? Bound{u.grants, limits_.max_grants, "grants", "--max-grants"}
                : q == Quota::opens    ? Bound{u.opens, limits_.max_opens, "buffers opened through grants", "--max-opens"}
                : q == Quota::imports  ? Bound{u.imports, limits_.max_imports, "imported allocations", "--max-imports"}
                                       : Bound{u.event_pools, limits_.max_event_pools, "IPC event pools", "--max-event-pools"};
  if (b.have < b.most) return {};
  return who + " holds " + std::to_string(b.have) + " " + b.what + ", the most one user may (" + b.flag + " " +
         std::to_string(b.most) + ")";
}

}  // namespace ferry::ferryd
