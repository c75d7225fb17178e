// SPDX-License-Identifier: MIT
#include "areas.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "ferry/util/mapping.hpp"

namespace ferry::client {

namespace {
// Areas come in whole steps (ferryd rounds up to them): an upload slightly
// larger than the last one reuses its area, and huge pages can back them.
constexpr uint64_t kStep = proto::kStagingAreaStep;
}  // namespace

Areas::~Areas() {
  {
    std::lock_guard lock(grow_mu_);
    stop_ = true;
  }
  grow_cv_.notify_all();
  if (grower_.joinable()) grower_.join();
  for (Area& a : grown_) ::munmap(a.base, a.bytes);
  for (Area& a : areas_) ::munmap(a.base, a.bytes);
}

void Areas::set_hooks(const ferry_staging_hooks* h) {
  {
    std::unique_lock lock(grow_mu_);
    wanted_ = 0;
    grow_cv_.wait(lock, [&] { return making_ == 0; });
  }
  hooks_ = h != nullptr ? *h : ferry_staging_hooks{};
}

uint64_t Areas::bytes() const {
  uint64_t n = 0;
  for (const Area& a : areas_) n += a.bytes;
  return n;
}

Areas::Area* Areas::take(uint64_t bytes, uint64_t done, Connection& conn, bool grow, int* err) {
  *err = -ENOTSUP;
  if (!enabled()) return nullptr;
  adopt_grown();
  // The smallest free one that holds it.
  Area* best = nullptr;
  for (Area& a : areas_)
    if (a.busy_until <= done && a.bytes >= bytes && (best == nullptr || a.bytes < best->bytes)) best = &a;
  if (best != nullptr) return best;
  *err = -EAGAIN;
  if (!grow) return nullptr;
  // ferryd did not answer the last ask in time (stopped, say): not asked
  // again for a while, so each upload does not wait kAskMs for nothing.
  if (Clock::now() < quiet_until_ ||
      Clock::now().time_since_epoch().count() < grow_quiet_until_.load(std::memory_order_relaxed))
    return nullptr;
  // Those the grower is making count too: the bound holds whichever thread makes them.
  auto coming = [&] {
    std::lock_guard lock(grow_mu_);
    return this->coming();
  };
  if (areas_.size() + coming() >= kMaxAreas) {
    trim(done, conn, true);
    if (areas_.size() + coming() >= kMaxAreas) return nullptr;
  }
  proto::StagingReply reply{};
  int fd = -1;
  if (!ask(bytes, done, conn, &reply, &fd, err)) return nullptr;
  return adopt(reply, fd, conn, err);
}

int Areas::grow_later(uint64_t bytes, uint64_t done, Connection& conn) {
  if (!enabled()) return -ENOTSUP;
  adopt_grown();
  for (const Area& a : areas_)
    if (a.busy_until <= done && a.bytes >= bytes) return 0;
  if (Clock::now() < quiet_until_ ||
      Clock::now().time_since_epoch().count() < grow_quiet_until_.load(std::memory_order_relaxed))
    return -EAGAIN;
  std::unique_lock lock(grow_mu_);
  if (std::max(wanted_, making_) >= bytes) return 0;  // on its way
  const bool refused = std::exchange(refused_, false);
  if (refused || areas_.size() + coming() >= kMaxAreas) {
    lock.unlock();
    trim(done, conn, true);  // free areas of ours may be what stands in the way
    lock.lock();
    if (areas_.size() + coming() >= kMaxAreas) return -EAGAIN;
  }
  wanted_ = bytes;
  grow_hooks_ = hooks_;
  if (!grower_.joinable()) grower_ = std::thread([this, c = &conn] { grow_loop(c); });
  lock.unlock();
  grow_cv_.notify_one();
  return 0;
}

void Areas::grow_loop(Connection* conn) {
  std::unique_lock lock(grow_mu_);
  for (;;) {
    if (!grow_cv_.wait_for(lock, kIdle, [&] { return stop_ || wanted_ != 0; })) {
      lock.unlock();
      if (idle_) idle_();
      lock.lock();
      continue;
    }
    if (stop_) return;
    const uint64_t bytes = std::exchange(wanted_, 0);
    making_ = bytes;
    const ferry_staging_hooks hooks = grow_hooks_;
    lock.unlock();
    proto::StagingReply reply{};
    int fd = -1, err = 0;
    Area a;
    const bool made = ask_once(bytes, *conn, &reply, &fd, &err) && map_area(reply, fd, *conn, hooks, &a, &err);
    if (err == -ETIMEDOUT)
      grow_quiet_until_.store((Clock::now() + kQuiet).time_since_epoch().count(), std::memory_order_relaxed);
    lock.lock();
    making_ = 0;
    grow_cv_.notify_all();  // set_hooks may wait for it
    refused_ = err == -EDQUOT;
    if (made) {
      grown_.push_back(a);
      any_grown_.store(true, std::memory_order_release);
    }
  }
}

void Areas::adopt_grown() {
  if (!any_grown_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(grow_mu_);
  for (Area& a : grown_) {
    a.used = Clock::now();
    areas_.push_back(a);
  }
  grown_.clear();
  any_grown_.store(false, std::memory_order_relaxed);
}

bool Areas::ask(uint64_t bytes, uint64_t done, Connection& conn, proto::StagingReply* reply, int* fd, int* err) {
  bool got = ask_once(bytes, conn, reply, fd, err);
  if (!got && *err == -EDQUOT) {
    // Idle areas of ours may be what stands in the way.
    trim(done, conn, true);
    got = ask_once(bytes, conn, reply, fd, err);
  }
  if (*err == -ETIMEDOUT) quiet_until_ = Clock::now() + kQuiet;
  return got;
}

bool Areas::ask_once(uint64_t bytes, Connection& conn, proto::StagingReply* reply, int* fd, int* err) {
  auto m = proto::make<proto::StagingGrow>(proto::Type::staging_grow);
  m.bytes = (bytes + kStep - 1) / kStep * kStep;
  *fd = -1;
  // A daemon that does not answer at once (stopped, say) is not waited for:
  // the upload has somewhere else to go (room later, or the driver).
  *err = conn.request(&m, sizeof m, &m.request, reply, -1, fd, kAskMs);
  if (*err == 0 && reply->status != 0) *err = reply->status;
  if (*err == 0 && (*fd < 0 || reply->bytes < bytes)) *err = -EPROTO;
  if (*err == 0) return true;
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
  return false;
}

bool Areas::map_area(const proto::StagingReply& reply, int fd, Connection& conn, const ferry_staging_hooks& hooks,
                     Area* out, int* err) {
  // A descriptor smaller than it says, or one it could shrink later, would
  // kill this process with SIGBUS: the server is no ferryd, and is done with.
  if (ferry::util::sealed_for(fd, reply.bytes) != 0) {
    ::close(fd);
    *err = -EPROTO;
    conn.fail(-EPROTO, "a staging area smaller than it said, or one it could shrink (not sealed)");
    return false;
  }
  // Populated now, in one pass: an upload would otherwise take a page fault
  // per page it stages (a fresh 64 MiB area cost 250 ms in faults on a VM).
  void* p = ::mmap(nullptr, reply.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  Area a{reply.area, static_cast<char*>(p), reply.bytes, 0, Clock::now(), hooks};
  if (p == MAP_FAILED) {
    *err = -map_err;
    a.base = nullptr;
    drop(a, &conn);
    return false;
  }
  // Not inherited by a forked child (a DataLoader's workers, say), as the
  // segment is not: it could not use it (its calls are refused), and its
  // mapping would keep a released area charged to the user for its life.
  (void)::madvise(a.base, a.bytes, MADV_DONTFORK);
  if (int r = hooks.attach(hooks.ctx, a.base, a.bytes); r != 0) {
    *err = r < 0 ? r : -EIO;
    ::munmap(a.base, a.bytes);
    a.base = nullptr;  // never attached: nothing to detach
    drop(a, &conn);
    return false;
  }
  *out = a;
  return true;
}

Areas::Area* Areas::adopt(const proto::StagingReply& reply, int fd, Connection& conn, int* err) {
  Area a;
  if (!map_area(reply, fd, conn, hooks_, &a, err)) return nullptr;
  areas_.push_back(a);
  return &areas_.back();
}

void Areas::drop(Area& a, Connection* conn) {
  if (a.base != nullptr) {
    if (a.hooks.detach != nullptr) a.hooks.detach(a.hooks.ctx, a.base, a.bytes);
    ::munmap(a.base, a.bytes);
  }
  if (conn == nullptr) return;
  auto m = proto::make<proto::StagingRelease>(proto::Type::staging_release);
  m.area = a.id;
  // Its answer says nothing this client needs: not waited for (a stopped
  // daemon would hold the upload that trims).
  conn->tell(&m, sizeof m, &m.request);
}

void Areas::drop_all(Connection& conn) {
  {
    std::lock_guard lock(grow_mu_);
    stop_ = true;
  }
  grow_cv_.notify_all();
  if (grower_.joinable()) grower_.join();
  any_grown_.store(true, std::memory_order_relaxed);
  adopt_grown();
  for (Area& a : areas_) drop(a, &conn);
  areas_.clear();
}

void Areas::trim(uint64_t done, Connection& conn, bool all) {
  adopt_grown();  // listed, hooks or not, so that they go back too
  if (areas_.empty()) return;
  const auto now = Clock::now();
  auto gone = std::stable_partition(areas_.begin(), areas_.end(), [&](const Area& a) {
    return a.busy_until > done || (!all && now - a.used < kIdle);
  });
  for (auto it = gone; it != areas_.end(); ++it) drop(*it, &conn);
  areas_.erase(gone, areas_.end());
}

}  // namespace ferry::client
