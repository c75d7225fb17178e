#include "engine.hpp"

#include <pthread.h>
#include <sys/random.h>

#include <cstring>

#include <boost/asio/post.hpp>
#include <cerrno>

#include "log.hpp"

namespace ferry {

namespace {
uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
}  // namespace

// ---------------------------------------------------------------- client state
Histogram& departed_slot_waits() {
  static Histogram h;
  return h;
}

void add_slot_waits(const StagingSegment& seg, Histogram& h) {
  if (seg.header() == nullptr) return;
  const auto* m = reinterpret_cast<const proto::ClientMetrics*>(reinterpret_cast<const char*>(seg.header()) +
                                                                proto::kClientMetricsOffset);
  h.count += m->slot_waits.load(std::memory_order_relaxed);
  h.sum_ns += m->slot_wait_ns.load(std::memory_order_relaxed);
  for (size_t i = 0; i < proto::kLatencyBuckets; ++i) h.buckets[i] += m->buckets[i].load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------- grants
GrantRegistry& grants() {
  static GrantRegistry r;
  return r;
}

std::shared_ptr<GrantInfo> GrantRegistry::add(const std::shared_ptr<Buffer>& b, uint64_t owner, uint64_t owner_buffer,
                                              uint32_t rights) {
  auto g = std::make_shared<GrantInfo>();
  g->buffer = b;
  g->owner = owner;
  g->owner_buffer = owner_buffer;
  g->rights = rights;
  // 256 bits from the kernel's CSPRNG: unguessable, so the token is the right.
  size_t got = 0;
  while (got < g->token.size()) {
    ssize_t n = ::getrandom(g->token.data() + got, g->token.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  grants_[g->token] = g;
  return g;
}

std::shared_ptr<GrantInfo> GrantRegistry::find(const uint8_t* token) const {
  std::array<uint8_t, proto::kTokenBytes> key;
  std::memcpy(key.data(), token, key.size());
  auto it = grants_.find(key);
  return it == grants_.end() ? nullptr : it->second;
}

size_t GrantRegistry::revoke(uint64_t owner, uint64_t owner_buffer, const uint8_t* token) {
  size_t n = 0;
  for (auto it = grants_.begin(); it != grants_.end();) {
    GrantInfo& g = *it->second;
    const bool match = g.owner == owner && (owner_buffer == 0 || g.owner_buffer == owner_buffer) &&
                       (token == nullptr || std::memcmp(token, g.token.data(), g.token.size()) == 0);
    if (match) {
      g.revoked = true;  // clients that opened it keep the GrantInfo, and are refused
      it = grants_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

ClientState::~ClientState() {
  add_slot_waits(segment_, departed_slot_waits());
  grants().revoke(id_, 0, nullptr);  // its grants end with it
  for (const auto& [id, backend_id] : event_pools_) backend_->close_event_pool(backend_id);
  buffers_.clear();  // frees device memory no copy still holds
  if (registered_) backend_->unregister_host(segment_.slots_begin());
  live.fetch_sub(1);
}

int ClientState::create_segment(uint32_t slots, uint64_t slot_bytes) {
  if (int r = segment_.create(slots, slot_bytes); r != 0) return r;
  slot_count_ = slots;
  slot_bytes_ = slot_bytes;
  slot_state_.assign(slots, kFree);
  slot_status_.assign(slots, 0);
  // Registered once, for the client's whole life: copies from it then skip
  // the per-call import a pageable source costs.
  registered_ = backend_->register_host(segment_.slots_begin(), segment_.slots_bytes()) == 0;
  return 0;
}

int ClientState::alloc(uint64_t bytes, uint64_t limit, uint64_t* id) {
  if (bytes == 0) return -EINVAL;
  if (limit != 0 && (bytes > limit || device_bytes_ > limit - bytes)) return -EDQUOT;
  void* p = nullptr;
  if (int r = backend_->alloc(bytes, &p); r != 0) return r;
  *id = ++next_buffer_;
  buffers_[*id].owned = std::make_shared<Buffer>(backend_, p, bytes);
  device_bytes_ += bytes;
  return 0;
}

int ClientState::adopt(std::shared_ptr<Buffer> b, uint64_t* id) {
  *id = ++next_buffer_;
  buffers_[*id].owned = std::move(b);
  return 0;
}

int ClientState::open(const std::shared_ptr<GrantInfo>& g, uint64_t* id, uint64_t* bytes) {
  auto b = g->buffer.lock();
  if (!b || g->revoked) return -EACCES;
  *id = ++next_buffer_;
  buffers_[*id].grant = g;
  *bytes = b->bytes;
  return 0;
}

int ClientState::free(uint64_t id) {
  auto it = buffers_.find(id);
  if (it == buffers_.end()) return -ENOENT;
  if (it->second.owned) {
    if (!it->second.owned->imported) device_bytes_ -= it->second.owned->bytes;
    grants().revoke(id_, id, nullptr);  // a freed buffer takes its grants with it
  }
  buffers_.erase(it);  // device memory goes once copies in flight to it end
  return 0;
}

std::shared_ptr<Buffer> ClientState::owned(uint64_t id) const {
  auto it = buffers_.find(id);
  return it == buffers_.end() ? nullptr : it->second.owned;
}

std::shared_ptr<Buffer> ClientState::find(uint64_t id, uint32_t rights, int* err) const {
  auto it = buffers_.find(id);
  if (it == buffers_.end()) {
    *err = -ENOENT;
    return nullptr;
  }
  if (it->second.owned) return it->second.owned;
  const GrantInfo& g = *it->second.grant;
  if (g.revoked || (g.rights & rights) != rights) {
    *err = -EACCES;
    return nullptr;
  }
  auto b = g.buffer.lock();
  if (!b) *err = -ENOENT;
  return b;
}

int ClientState::add_event_pool(uint64_t backend_id, uint64_t* id) {
  *id = ++next_pool_;
  event_pools_[*id] = backend_id;
  return 0;
}

bool ClientState::event_pool(uint64_t id, uint64_t* backend_id) const {
  auto it = event_pools_.find(id);
  if (it == event_pools_.end()) return false;
  *backend_id = it->second;
  return true;
}

const char* ClientState::check_ticket(uint64_t ticket, uint32_t slot) const {
  if (slot_count_ == 0) return "no staging segment: send Hello first";
  if (ticket <= completed_ || ticket - completed_ > slot_count_) return "ticket outside the client's window";
  if (slot != (ticket - 1) % slot_count_) return "slot does not match the ticket";
  if (slot_state_[slot] != kFree) return "ticket already in flight";
  return nullptr;
}

void ClientState::mark_in_flight(uint64_t ticket, uint64_t bytes) {
  slot_state_[(ticket - 1) % slot_count_] = kBusy;
  ++in_flight_;
  in_flight_bytes_ += bytes;
}

bool ClientState::finish(uint64_t ticket, uint64_t bytes, int status, std::vector<std::pair<uint64_t, int>>& failed) {
  const uint32_t s = static_cast<uint32_t>((ticket - 1) % slot_count_);
  slot_state_[s] = kDone;
  slot_status_[s] = status;
  --in_flight_;
  in_flight_bytes_ -= bytes;
  // Tickets complete in order: `completed` moves only over a contiguous run.
  bool moved = false;
  for (;;) {
    const uint32_t next = static_cast<uint32_t>(completed_ % slot_count_);
    if (slot_state_[next] != kDone) break;
    if (slot_status_[next] != 0) {
      failed.emplace_back(completed_ + 1, slot_status_[next]);
      ++stats_.errors;
    }
    slot_state_[next] = kFree;
    slot_status_[next] = 0;
    ++completed_;
    moved = true;
  }
  return moved;
}

// ---------------------------------------------------------------- engine
TransferEngine::TransferEngine(boost::asio::io_context& io, std::unique_ptr<Backend> backend)
    : io_(io), backend_(std::move(backend)), retirer_([this] { retire_loop(); }) {}

TransferEngine::~TransferEngine() { stop(); }

void TransferEngine::stop() {
  if (stop_.exchange(true)) return;
  retirer_.join();
  records_.clear();
}

int TransferEngine::submit(const std::shared_ptr<ClientState>& client, uint64_t ticket, bool download, void* dst,
                           const void* src, uint64_t bytes, std::shared_ptr<Buffer> buffer, const Signal* signal) {
  if (device_lost_) return -ENODEV;
  const uint64_t cookie = next_cookie_++;
  // Record first: the retire thread may report the copy before submit returns,
  // but its batch is handled on this thread, after we return.
  records_.push_back({cookie, client, std::move(buffer), ticket, bytes, download, now_ns()});
  if (int r = backend_->submit(dst, src, bytes, cookie, signal); r != 0) {
    records_.pop_back();
    return r;
  }
  client->mark_in_flight(ticket, bytes);
  ++stats_.in_flight;
  stats_.in_flight_bytes += bytes;
  return 0;
}

void TransferEngine::fail(const std::shared_ptr<ClientState>& client, uint64_t ticket, int status) {
  client->mark_in_flight(ticket, 0);
  settle(client, ticket, 0, status);
}

void TransferEngine::settle(const std::shared_ptr<ClientState>& client, uint64_t ticket, uint64_t bytes, int status) {
  std::vector<std::pair<uint64_t, int>> failed;
  const bool moved = client->finish(ticket, bytes, status, failed);
  if (!failed.empty()) stats_.failed += failed.size();
  if ((moved || !failed.empty()) && on_progress) on_progress(*client, failed);
}

void TransferEngine::retire(const std::vector<Done>& batch) {
  for (const Done& d : batch) {
    if (records_.empty() || records_.front().cookie != d.cookie) {
      FERRY_LOG(error, "retire: completion %llu out of order", static_cast<unsigned long long>(d.cookie));
      continue;
    }
    Record r = std::move(records_.front());
    records_.pop_front();
    --stats_.in_flight;
    stats_.in_flight_bytes -= r.bytes;
    if (d.status == 0) {
      if (r.download) {
        ++stats_.downloads;
        ++r.client->stats().downloads;
      } else {
        ++stats_.uploads;
        stats_.upload_bytes += r.bytes;
        stats_.upload_latency.add(now_ns() - r.submitted_ns);
        ++r.client->stats().uploads;
        r.client->stats().upload_bytes += r.bytes;
      }
    }
    settle(r.client, r.ticket, r.bytes, d.status);
    if (d.status != 0 && !device_lost_ && backend_->lost()) {
      device_lost_ = true;
      FERRY_LOG(error, "the device is lost: every later transfer and allocation is refused (-ENODEV); "
                       "restart ferryd once the device is back");
    }
  }
}

void TransferEngine::retire_loop() {
  pthread_setname_np(pthread_self(), "ferry-retire");
  std::vector<Done> batch;
  while (!stop_.load(std::memory_order_relaxed)) {
    batch.clear();
    // A short timeout keeps stop() prompt; a busy device returns at once.
    if (backend_->reap(batch, 50'000'000) == 0) continue;
    bool post;
    {
      std::lock_guard lock(done_mu_);
      post = done_.empty();  // else a posted handler has yet to run and will take these too
      done_.insert(done_.end(), batch.begin(), batch.end());
    }
    if (post) {
      boost::asio::post(io_, [this] {
        std::vector<Done> b;
        {
          std::lock_guard lock(done_mu_);
          b.swap(done_);
        }
        retire(b);
      });
    }
  }
}

}  // namespace ferry
