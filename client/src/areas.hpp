// SPDX-License-Identifier: MIT
// Staging areas beyond the segment (ferry_set_staging_hooks): pinned memory
// that ferryd grants on demand (proto::StagingGrow) for a direct upload that
// would otherwise wait for staging room. An area holds one upload at a time,
// whole; it is free again once the queue wrote that upload's last number,
// and goes back to ferryd after kIdle unused. Every member is used under
// the client's direct_mu (direct uploads go one call at a time).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
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

  // NULL clears them: no new area is taken.
  void set_hooks(const ferry_staging_hooks* h);
  bool enabled() const { return hooks_.attach != nullptr; }

  // A free area of at least `bytes` (done: the queue's word), made and
  // attached if none is and `grow`: nullptr and *err (-EDQUOT past the
  // user's bound, -ENOTSUP without hooks, -EAGAIN none free and no growing,
  // the hook's or the daemon's error otherwise).
  Area* take(uint64_t bytes, uint64_t done, Connection& conn, bool grow, int* err);
  // Gives back the free areas unused for kIdle (all free ones with `all`).
  void trim(uint64_t done, Connection& conn, bool all);
  // Detaches, unmaps and gives back every area (ferry_disconnect): ferryd
  // would count an area a session ends with until this process exits.
  void drop_all(Connection& conn);
  uint64_t bytes() const;

 private:
  void drop(Area& a, Connection* conn);
  // A new area of at least `bytes` from ferryd (StagingGrow): its reply and
  // descriptor, or *err; idle areas go first when the user's bound is met.
  bool ask(uint64_t bytes, uint64_t done, Connection& conn, proto::StagingReply* reply, int* fd, int* err);
  // The area ferryd sent, mapped and attached (the hooks), or nullptr and *err.
  Area* adopt(const proto::StagingReply& reply, int fd, Connection& conn, int* err);
  ferry_staging_hooks hooks_{};
  std::vector<Area> areas_;
  Clock::time_point quiet_until_{};
};

}  // namespace ferry::client
