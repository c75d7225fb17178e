// SPDX-License-Identifier: MIT
// Staging areas beyond the segment (ferry_set_staging_hooks): pinned memory
// that ferryd grants on demand (proto::StagingGrow) for a direct upload that
// would otherwise wait for staging room. An area holds one upload at a time,
// whole; it is free again once the queue wrote that upload's last number,
// and goes back to ferryd after kIdle unused. Every member is used under
// the client's direct_mu (direct uploads go one call at a time), but for
// the grower's (grow_later): a thread of its own that makes areas ahead,
// asked for and mapped outside that lock, handed over under grow_mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "connection.hpp"
#include "ferry/ferry.h"

namespace ferry::client {

class Areas {
 public:
  using Clock = std::chrono::steady_clock;
  // How long an area may lie unused before it goes back.
  // Long enough that a program uploading now and then keeps its area (making
  // one costs a registration: tens of ms for 256 MiB), short enough that
  // pinned memory it stopped using goes back.
  static constexpr auto kIdle = std::chrono::seconds(10);
  // Areas one client keeps at once (the user's --user-staging bounds the
  // bytes): enough to run a few uploads ahead of a busy queue; more only
  // let the host run further ahead of the device, each at the price of
  // registering it (an H200 loop of 16 MiB uploads lost 15% to making 32).
  static constexpr size_t kMaxAreas = 8;
  // How long a request for an area (or its return) waits for ferryd, whose
  // answer takes microseconds: a stopped daemon costs an upload this much.
  static constexpr int kAskMs = 500;
  // After an ask that went unanswered, how long no area is asked for.
  static constexpr auto kQuiet = std::chrono::seconds(5);

  struct Area {
    uint64_t id = 0;
    char* base = nullptr;
    uint64_t bytes = 0;
    uint64_t busy_until = 0;  // the direct number whose copy reads it last
    Clock::time_point used{};
    ferry_staging_hooks hooks{};  // those that attached it detach it
  };

  Areas() = default;
  Areas(const Areas&) = delete;
  Areas& operator=(const Areas&) = delete;
  ~Areas();  // unmaps what is left (the connection is gone by then)

  // NULL clears them: no new area is taken. An area the grower is making
  // is waited for (its attach may be the old hooks'); one it was asked for
  // and has not begun is not made.
  void set_hooks(const ferry_staging_hooks* h);
  // What the grower's thread runs every kIdle while it has nothing to make:
  // the client's trim of idle areas (under its own lock, taken if free), so
  // that areas of a client that stopped uploading go back too.
  void set_idle(std::function<void()> f) { idle_ = std::move(f); }
  // Largest area ferry_staging_grow asks for (ferryd bounds it further).
  static constexpr uint64_t kMaxBytes = uint64_t{1} << 48;
  bool enabled() const { return hooks_.attach != nullptr; }

  // A free area of at least `bytes` (done: the queue's word), made and
  // attached if none is and `grow`: nullptr and *err (-EDQUOT past the
  // user's bound, -ENOTSUP without hooks, -EAGAIN none free and no growing,
  // the hook's or the daemon's error otherwise).
  Area* take(uint64_t bytes, uint64_t done, Connection& conn, bool grow, int* err);
  // Has an area of at least `bytes` made on the grower's thread for a later
  // upload, unless a free one (done: the queue's word) or one being made
  // holds it; returns at once. 0, -ENOTSUP without hooks, -EAGAIN at
  // kMaxAreas with none free, or while ferryd is not asked (kQuiet).
  int grow_later(uint64_t bytes, uint64_t done, Connection& conn);
  // Gives back the free areas unused for kIdle (all free ones with `all`).
  void trim(uint64_t done, Connection& conn, bool all);
  // Stops the grower, then detaches, unmaps and gives back every area
  // (ferry_disconnect): ferryd would count an area a session ends with
  // until this process exits.
  void drop_all(Connection& conn);
  uint64_t bytes() const;

 private:
  void drop(Area& a, Connection* conn);
  // A new area of at least `bytes` from ferryd (StagingGrow): its reply and
  // descriptor, or *err; idle areas go first when the user's bound is met.
  bool ask(uint64_t bytes, uint64_t done, Connection& conn, proto::StagingReply* reply, int* fd, int* err);
  // One StagingGrow and its reply checked (no trim: the grower's too).
  bool ask_once(uint64_t bytes, Connection& conn, proto::StagingReply* reply, int* fd, int* err);
  // The area ferryd sent, mapped and attached with `hooks` into *a; false and *err.
  bool map_area(const proto::StagingReply& reply, int fd, Connection& conn, const ferry_staging_hooks& hooks,
                Area* a, int* err);
  // The area ferryd sent, mapped, attached and listed, or nullptr and *err.
  Area* adopt(const proto::StagingReply& reply, int fd, Connection& conn, int* err);
  // Areas the grower made join the list (under direct_mu; no lock unless one did).
  void adopt_grown();
  // Areas coming from the grower (made, being made, asked for): grow_mu_ held.
  size_t coming() const { return grown_.size() + (making_ != 0 ? 1 : 0) + (wanted_ != 0 ? 1 : 0); }
  void grow_loop(Connection* conn);
  ferry_staging_hooks hooks_{};
  std::vector<Area> areas_;
  Clock::time_point quiet_until_{};

  // The grower: one area at a time, the largest asked for since it began.
  std::mutex grow_mu_;
  std::condition_variable grow_cv_;
  std::thread grower_;
  uint64_t wanted_ = 0;         // bytes asked for and not begun (0: none)
  uint64_t making_ = 0;         // bytes of the area being made (0: none)
  ferry_staging_hooks grow_hooks_{};
  std::vector<Area> grown_;     // made, not yet listed
  bool refused_ = false;        // the last growth met the user's bound: trim first
  bool stop_ = false;
  std::atomic<bool> any_grown_{false};
  std::atomic<int64_t> grow_quiet_until_{0};  // steady-clock ns: ferryd left the grower unanswered
  std::function<void()> idle_;
};

}  // namespace ferry::client
