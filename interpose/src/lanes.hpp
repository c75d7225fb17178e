// SPDX-License-Identifier: MIT
// A process's ferry clients, one queue at a time each (lanes), and its
// counts. ferry's direct uploads go one queue at a time per client: a queue
// gets a lane of its own, so two queues never wait on the host for each
// other. A lane is made when a queue first needs one (and no idle lane can
// be rebound), up to Settings::max_lanes; a connect that takes longer than
// kConnectWait goes on in the background while copies go to the driver.
//
// A lane whose client failed (ferryd gone, a queue that refused the
// timeline write) takes no more copies. Once the program's queues finished
// every copy from its staging, it is disconnected (its staging unregistered
// and unmapped); until then it stays mapped. A lane whose daemon went away
// (stopped for a restart or an upgrade, or killed) is not held against the
// process: new lanes connect to whichever ferryd listens next, so a program
// that outlives its ferryd is staged again once a new one is up. After
// fork() the child starts with no lanes (the parent's clients are its own).
//
// A thread that copies on one queue again and again takes no lock: it
// remembers the lane it had (thread-local) and takes it back by one
// compare-and-swap of the lane's `users` from 0, when that lane still
// serves the same queue and was prepared for the same key. Anything else (a
// lane in use by another thread, rebound, dead, a first copy) goes through
// mu_. Lane structs are never freed, only reused (with a new generation):
// a thread's remembered lane is always memory it may look at.
#pragma once

#include <ferry/ferry.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <map>
#include <set>
#include <vector>

#include "settings.hpp"

namespace ferry::run {

// What a backend does to a lane's client before a queue copies from its
// staging (register or import the segment, set the staging hooks): 0 or a
// negative errno. Called once per client and `key` (CUDA registers once for
// every context, Level Zero imports once per driver).
using Prepare = int (*)(ferry_client* c, uint64_t key, void* arg);
// Undoes Prepare before the client is disconnected (its copies all done).
using Unprepare = void (*)(ferry_client* c, uint64_t key, void* arg);

class Lanes {
 public:
  using Clock = std::chrono::steady_clock;
  // How long a copy waits for a new lane's connect: CUDA's own path is safe,
  // a tenth of a second is enough; Level Zero's reads the source late, so
  // its copies wait longer for ferry before they take that path.
  static constexpr auto kConnectWait = std::chrono::milliseconds(100);
  static constexpr auto kConnectWaitUnsafe = std::chrono::seconds(2);
  static constexpr auto kRetry = std::chrono::seconds(1);
  static constexpr uint32_t kMaxDead = 16;  // lanes that failed (not: their daemon went): then ferry is given up

  // The process's one instance, made at first use (never destroyed: the
  // program's queues may copy from its staging until the very end).
  static Lanes& get();
  const Settings& settings() const { return settings_; }

  // A client for one call on queue (queue, context), held until done():
  // nullptr with *why (FERRY_PASS_*) when there is none to be had now.
  ferry_client* acquire(uint64_t queue, uint64_t context, uint64_t key, Prepare prepare, Unprepare unprepare, void* arg,
                        int* why, Clock::duration connect_wait = kConnectWait);
  // The call ended with `err` (0, or the upload's error): a lane whose
  // client can no longer upload is retired.
  void done(ferry_client* c, int err);

  // Counts, published in the lead client's segment for ferryctl.
  void staged(uint64_t bytes);
  void passed(int why, uint64_t bytes);
  // The counts as one line of JSON (the report at exit).
  std::string report() const;

 private:
  struct Lane {
    ferry_client* c = nullptr;  // written under mu_ before `users` leaves kClosed
    std::atomic<uint64_t> queue{0}, context{0};  // written under mu_
    std::atomic<uint32_t> users{0};  // calls using it now; kClosed: disconnected, a spare
    std::atomic<bool> dead{false};
    std::atomic<uint64_t> generation{0};  // raised each time the struct is reused
    bool fresh = false;  // connected, not yet given to a queue (mu_)
    struct Undo {
      Unprepare fn;
      void* arg;
    };
    std::map<uint64_t, Undo> prepared;  // keys prepare() ran for, and how to undo each
  };
  static constexpr uint32_t kClosed = 1u << 30;
  // The lane a thread took last, to take it back without mu_.
  struct Held {
    Lane* lane = nullptr;
    uint64_t generation = 0, queue = 0, context = 0, key = 0;
  };
  static Held& held();
  Lanes();
  // The thread's last lane, taken back without a lock if it still serves
  // (queue, context) and `key`: its client, or nullptr.
  ferry_client* take_back(uint64_t queue, uint64_t context, uint64_t key);
  // mu_ held: the queue's own lane, else an idle one that may take it on
  // (claimed: its users went from 0 to 1).
  Lane* lane_for(uint64_t queue, uint64_t context, bool* claimed);
  // mu_ held: a Lane for a new client: a spare one reused, or a new one.
  Lane& new_struct(ferry_client* c);
  // mu_ held: l's client disconnected; the struct becomes a spare.
  void close(std::unique_ptr<Lane> l);
  // mu_ held (by lock, which the wait lets go): a lane just connected, or
  // nullptr with *why.
  Lane* new_lane(std::unique_lock<std::mutex>& lock, Clock::duration connect_wait, int* why);
  void publish(bool force);
  // mu_ held: lanes whose connection ended are marked dead; dead ones whose
  // copies are all done are disconnected.
  void sweep();
  void retire(Lane& l, int err);  // mu_ held: it takes no more copies
  void connect_async();  // mu_ held
  static void mark_lane(ferry_client* c);  // says it carries no counts
  void after_fork_child();
  void at_exit();

  Settings settings_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<std::unique_ptr<Lane>> spares_;  // disconnected lanes' structs, for reuse (never freed)
  uint32_t dead_ = 0;   // lanes that failed (kMaxDead)
  uint64_t gone_ = 0;   // lanes whose daemon went away
  uint64_t closed_ = 0; // dead lanes disconnected
  uint32_t connecting_ = 0;  // connects under way
  uint32_t waiting_ = 0;     // copies waiting for a connect of theirs (a fresh lane is theirs)
  // When each of them started (the oldest first): a copy asks how long the
  // oldest still under way has taken, not how long connects have overlapped.
  std::multiset<Clock::time_point> connect_started_;
  uint64_t connects_ = 0;  // connects finished (either way)
  Clock::time_point retry_at_{};
  std::atomic<ferry_client*> lead_{nullptr};
  std::atomic<bool> sweep_wanted_{false};  // a dead lane is not closed yet: calls go through mu_
  std::atomic<uint32_t> publishing_{0};  // publish() calls under way (sweep)
  std::atomic<uint64_t> staged_{0}, staged_bytes_{0}, passed_bytes_{0};
  std::atomic<uint64_t> passed_[FERRY_PASS_REASONS] = {};
};

}  // namespace ferry::run
