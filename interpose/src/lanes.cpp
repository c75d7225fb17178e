// SPDX-License-Identifier: MIT
#include "lanes.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace ferry::run {

namespace {

// Errors after which a client uploads no more (its connection or its
// staging's bookkeeping is gone); any other error leaves it usable.
bool ends_client(int err) {
  return err == -ECONNRESET || err == -ESHUTDOWN || err == -ECONNABORTED || err == -ETIMEDOUT || err == -EIO ||
         err == -EPROTO || err == -EPIPE || err == -ENOTCONN;
}

// The daemon went away (a restart, an upgrade, a crash): no fault of the
// lane's, and a new ferryd may listen soon.
bool daemon_gone(int err) { return err == -ESHUTDOWN || err == -ECONNRESET || err == -EPIPE || err == -ENOTCONN; }
}  // namespace

Lanes& Lanes::get() {
  // Made once, never destroyed (see lanes.hpp); the fork and exit handlers
  // are registered with it.
  static Lanes* the = [] {
    auto* l = new Lanes;
    pthread_atfork([] { get().mu_.lock(); }, [] { get().mu_.unlock(); }, [] { get().after_fork_child(); });
    std::atexit([] { get().at_exit(); });
    return l;
  }();
  return *the;
}

Lanes::Lanes() : settings_(settings_from_env()) {}

// --stats and --report promise a line for every process, also one that
// never copies (a program that fails at its first call): the counts exist,
// and their exit handler is registered, from the start. Nothing of the
// runtime is touched here.
__attribute__((constructor)) static void counts_from_the_start() {
  for (const char* name : {"FERRY_RUN_STATS", "FERRY_RUN_REPORT"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0' && std::string(v) != "0") {
      (void)Lanes::get();
      return;
    }
}

Lanes::Held& Lanes::held() {
  thread_local Held h;
  return h;
}

Lanes::Lane& Lanes::new_struct(ferry_client* c) {
  std::unique_ptr<Lane> l;
  if (!spares_.empty()) {
    l = std::move(spares_.back());
    spares_.pop_back();
  } else {
    l = std::make_unique<Lane>();
    l->users.store(kClosed);
  }
  l->c = c;
  l->queue.store(0);
  l->context.store(0);
  l->dead.store(false);
  l->fresh = true;
  l->prepared.clear();
  // A thread that remembers the struct's last use sees another generation
  // once it can take it (users 0, released after everything above).
  l->generation.fetch_add(1, std::memory_order_release);
  l->users.store(0, std::memory_order_release);
  lanes_.push_back(std::move(l));
  return *lanes_.back();
}

void Lanes::close(std::unique_ptr<Lane> l) {
  for (const auto& [key, undo] : l->prepared) undo.fn(l->c, key, undo.arg);
  ferry_disconnect(l->c);
  l->c = nullptr;
  spares_.push_back(std::move(l));
}

void Lanes::retire(Lane& l, int err) {
  if (l.dead) return;
  l.dead = true;
  sweep_wanted_.store(true, std::memory_order_release);
  if (daemon_gone(err)) {
    ++gone_;
  } else {
    ++dead_;
  }
  retry_at_ = Clock::now() + kRetry;
  if (lead_.load() != l.c) return;
  // The counts move to a live client: the old one, whose session may still
  // be up, counts no more (one set of counts per process in ferryd).
  ferry_client* next = nullptr;
  for (auto& o : lanes_)
    if (!o->dead && next == nullptr) next = o->c;
  mark_lane(l.c);
  lead_.store(next);
  publish(true);
}

void Lanes::sweep() {
  for (auto& l : lanes_)
    if (!l->dead && l->users.load() == 0)
      if (int err = ferry_connection_error(l->c); err != 0) retire(*l, err);
  // A dead lane's staging is the program's queues' until they copied the
  // last of it (every number written): then it goes, registrations first.
  bool dead_left = false;
  for (auto it = lanes_.begin(); it != lanes_.end();) {
    Lane& l = **it;
    uint32_t none = 0;
    // Closed first (no thread takes it back from here on), then looked at:
    // a copy appended before the close is then seen by the flush.
    if (!l.dead || !l.users.compare_exchange_strong(none, kClosed)) {
      dead_left = dead_left || l.dead;
      ++it;
      continue;
    }
    if (publishing_.load(std::memory_order_seq_cst) != 0 || ferry_flush(l.c, 0) != 0) {
      l.users.store(0, std::memory_order_release);
      dead_left = true;
      ++it;
      continue;
    }
    close(std::move(*it));
    ++closed_;
    it = lanes_.erase(it);
  }
  // While a dead lane waits for its queues, every call comes here (take_back
  // declines), so that it is closed once they are done.
  sweep_wanted_.store(dead_left, std::memory_order_release);
}

ferry_client* Lanes::acquire(uint64_t queue, uint64_t context, uint64_t key, Prepare prepare, Unprepare unprepare,
                             void* arg, int* why, Clock::duration connect_wait) {
  if (settings_.off) {
    *why = FERRY_PASS_ERROR;
    return nullptr;
  }
  if (settings_.connect_ms >= 0) connect_wait = std::chrono::milliseconds(settings_.connect_ms);
  if (ferry_client* c = take_back(queue, context, key)) return c;
  std::unique_lock lock(mu_);
  sweep();
  bool claimed = false;
  Lane* lane = lane_for(queue, context, &claimed);
  if (lane == nullptr) lane = new_lane(lock, connect_wait, why);
  if (lane == nullptr) return nullptr;
  if (!claimed) lane->users.fetch_add(1);
  lane->fresh = false;
  lane->queue.store(queue);
  lane->context.store(context);
  if (lane->prepared.count(key) == 0) {
    if (int r = prepare(lane->c, key, arg); r != 0) {
      lane->users.fetch_sub(1);
      *why = FERRY_PASS_ERROR;
      return nullptr;
    }
    lane->prepared[key] = Lane::Undo{unprepare, arg};
  }
  held() = Held{lane, lane->generation.load(), queue, context, key};
  return lane->c;
}

ferry_client* Lanes::take_back(uint64_t queue, uint64_t context, uint64_t key) {
  const Held& h = held();
  Lane* l = h.lane;
  if (l == nullptr || h.queue != queue || h.context != context || h.key != key ||
      sweep_wanted_.load(std::memory_order_acquire))
    return nullptr;
  uint32_t none = 0;
  if (!l->users.compare_exchange_strong(none, 1, std::memory_order_acq_rel)) return nullptr;  // in use, or closed
  // Ours now: no one rebinds, closes or reuses it while we hold it. A client
  // whose daemon went or stops goes through mu_, which retires it.
  if (l->generation.load(std::memory_order_acquire) == h.generation && !l->dead.load(std::memory_order_acquire) &&
      l->queue.load(std::memory_order_relaxed) == queue && l->context.load(std::memory_order_relaxed) == context &&
      ferry_connection_error(l->c) == 0)
    return l->c;
  l->users.fetch_sub(1, std::memory_order_release);
  return nullptr;
}

Lanes::Lane* Lanes::lane_for(uint64_t queue, uint64_t context, bool* claimed) {
  for (auto it = lanes_.rbegin(); it != lanes_.rend(); ++it)  // the newest, should there be two
    if (!(*it)->dead && (*it)->queue.load() == queue && (*it)->context.load() == context) return it->get();
  // An idle lane takes the queue on: its numbers are all written, so the
  // queue switch costs no wait. A fresh one is left to the copies waiting
  // for connects (each started one): taken here, a waiter whose connect made
  // it would wait out its whole wait for a connect that never comes.
  for (auto& l : lanes_) {
    uint32_t none = 0;
    if (l->dead || (l->fresh && waiting_ != 0) || !l->users.compare_exchange_strong(none, 1)) continue;
    // Claimed from 0 first (a thread taking it back from here on finds it in
    // use, then bound elsewhere), then looked at: a copy its last thread
    // appended before the claim shows in the flush.
    if (ferry_flush(l->c, 0) == 0) {
      *claimed = true;
      return l.get();
    }
    l->users.fetch_sub(1);
  }
  return nullptr;
}

// A new lane: connected by a thread of its own, waited for a little, never
// long (a stopped daemon would hold the program for $FERRY_TIMEOUT_MS).
// Several threads that need one at once each start a connect.
Lanes::Lane* Lanes::new_lane(std::unique_lock<std::mutex>& lock, Clock::duration connect_wait, int* why) {
  const auto deadline = Clock::now() + connect_wait;
  // A connect under way for longer than a copy waits (a daemon stopped, or
  // slow to answer) is not waited for again by every copy after it.
  *why = FERRY_PASS_NO_DAEMON;
  if (connecting_ != 0 && Clock::now() - *connect_started_.begin() > connect_wait) return nullptr;
  bool started = false;
  for (;;) {
    uint32_t live = 0;
    for (auto& l : lanes_) live += l->dead ? 0 : 1;
    if (!started && live + connecting_ < settings_.max_lanes) {
      if (dead_ >= kMaxDead || (connecting_ == 0 && Clock::now() < retry_at_)) return nullptr;
      connect_async();
      started = true;
    }
    if (connecting_ == 0 && !started) {
      *why = FERRY_PASS_BUSY;
      return nullptr;
    }
    const uint64_t seen = connects_;
    ++waiting_;
    const bool moved = cv_.wait_until(lock, deadline, [&] { return connects_ != seen; });
    --waiting_;
    if (!moved) return nullptr;  // still connecting: copies go to the driver meanwhile
    for (auto& l : lanes_)
      if (!l->dead && l->fresh) return l.get();
    if (connecting_ == 0 && Clock::now() < retry_at_) return nullptr;
    // Every connect ended and none left a lane for this copy (a copy that
    // started none took it): it may start one again, or is told busy.
    if (connecting_ == 0) started = false;
  }
}

void Lanes::connect_async() {
  ++connecting_;
  const auto started = connect_started_.insert(Clock::now());
  std::thread([this, started] {
    ferry_client* c = nullptr;
    const int r = ferry_connect(settings_.socket.empty() ? nullptr : settings_.socket.c_str(), &c);
    std::lock_guard lock(mu_);
    --connecting_;
    connect_started_.erase(started);
    ++connects_;
    if (r != 0) {
      retry_at_ = Clock::now() + kRetry;
    } else {
      new_struct(c);
      if (lead_.load() == nullptr) {
        lead_.store(c);
        publish(true);
      } else {
        mark_lane(c);
      }
    }
    cv_.notify_all();
  }).detach();
}

void Lanes::mark_lane(ferry_client* c) {
  ferry_run_counts rc{};
  rc.size = sizeof rc;
  rc.role = FERRY_RUN_LANE;  // the process's counts are the lead's alone
  ferry_publish_run(c, &rc);
}

void Lanes::done(ferry_client* c, int err) {
  const bool ends = err != 0 && ends_client(err);
  if (Lane* l = held().lane; !ends && l != nullptr && l->c == c) {
    l->users.fetch_sub(1, std::memory_order_release);  // the lane this thread took, still its own
    return;
  }
  std::lock_guard lock(mu_);
  for (auto& l : lanes_) {
    if (l->c != c) continue;
    // Retired before it is let go: a thread that takes it back then sees it
    // dead. Kept mapped until its queues are done with it (sweep).
    if (ends) retire(*l, err);
    l->users.fetch_sub(1);
  }
}

void Lanes::staged(uint64_t bytes) {
  staged_.fetch_add(1, std::memory_order_relaxed);
  staged_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  publish(true);
}

void Lanes::passed(int why, uint64_t bytes) {
  if (why < 0 || why >= FERRY_PASS_REASONS) why = FERRY_PASS_ERROR;
  const uint64_t n = passed_[why].fetch_add(1, std::memory_order_relaxed);
  passed_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  // Small copies come by the million: their count is shown now and then.
  publish(why != FERRY_PASS_SMALL || n % 256 == 0);
}

void Lanes::publish(bool force) {
  if (!force) return;
  // Counted before the lead is read: sweep() disconnects no lane while a
  // publisher may still hold one it read before the lead moved on.
  publishing_.fetch_add(1, std::memory_order_seq_cst);
  struct Done {
    std::atomic<uint32_t>& n;
    ~Done() { n.fetch_sub(1, std::memory_order_seq_cst); }
  } done{publishing_};
  ferry_client* lead = lead_.load(std::memory_order_seq_cst);
  if (lead == nullptr) return;
  ferry_run_counts rc{};
  rc.size = sizeof rc;
  rc.role = FERRY_RUN_LEAD;
  rc.staged = staged_.load(std::memory_order_relaxed);
  rc.staged_bytes = staged_bytes_.load(std::memory_order_relaxed);
  for (int i = 0; i < FERRY_PASS_REASONS; ++i) rc.passed[i] = passed_[i].load(std::memory_order_relaxed);
  rc.passed_bytes = passed_bytes_.load(std::memory_order_relaxed);
  ferry_publish_run(lead, &rc);
}

std::string Lanes::report() const {
  char comm[64] = "?";
  if (FILE* f = std::fopen("/proc/self/comm", "r")) {
    if (std::fgets(comm, sizeof comm, f) == nullptr) comm[0] = '\0';
    std::fclose(f);
    for (char* p = comm; *p != '\0'; ++p)
      if (*p == '\n' || *p == '"' || *p == '\\' || static_cast<unsigned char>(*p) < 0x20) *p = '\0';
  }
  std::string s = "{\"pid\":" + std::to_string(::getpid()) + ",\"comm\":\"" + comm + "\"";
  s += ",\"staged\":" + std::to_string(staged_.load()) + ",\"staged_bytes\":" + std::to_string(staged_bytes_.load());
  s += ",\"passed\":{";
  for (int i = 0; i < FERRY_PASS_REASONS; ++i)
    s += std::string(i == 0 ? "" : ",") + "\"" + ferry_pass_reason_name(static_cast<int>(i)) + "\":" + std::to_string(passed_[i].load());
  s += "},\"passed_bytes\":" + std::to_string(passed_bytes_.load());
  {
    std::lock_guard lock(mu_);
    s += ",\"lanes\":" + std::to_string(lanes_.size()) + ",\"dead_lanes\":" + std::to_string(dead_) +
         ",\"lanes_gone\":" + std::to_string(gone_) + ",\"lanes_closed\":" + std::to_string(closed_);
  }
  return s + "}\n";
}

void Lanes::after_fork_child() {
  // The forking thread holds mu_ (the prepare handler took it). The
  // parent's clients are the parent's: this process closes its copies of
  // their sockets (ferry_disconnect in a child does only that) and starts
  // afresh, counts included.
  for (auto& l : lanes_) {
    // Kept as spares, not freed: a thread's remembered lane stays memory it may look at.
    l->users.store(kClosed);
    ferry_disconnect(l->c);
    l->c = nullptr;
    spares_.push_back(std::move(l));
  }
  lanes_.clear();
  dead_ = 0;
  gone_ = closed_ = 0;
  connecting_ = 0;
  connect_started_.clear();  // the parent's connect threads are not this process's
  retry_at_ = {};
  lead_.store(nullptr);
  staged_.store(0);
  staged_bytes_.store(0);
  passed_bytes_.store(0);
  for (auto& p : passed_) p.store(0);
  settings_ = settings_from_env();
  mu_.unlock();
}

void Lanes::at_exit() {
  publish(true);
  if (settings_.report.empty() && !settings_.stats) return;
  const std::string line = report();
  if (!settings_.report.empty()) {
    // One write with O_APPEND: lines of several processes do not interleave.
    const int fd = ::open(settings_.report.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  if (settings_.stats) std::fprintf(stderr, "ferry-run: %s", line.c_str());
}

}  // namespace ferry::run
