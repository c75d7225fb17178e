// SPDX-License-Identifier: MIT
// Transfers held on the host until their value comes (an upload after the
// client's app_value reaches a value; a fenced upload after the destination's
// fence is released), and the clients that have them.
//
// Contract: io thread only. A client with held transfers is kept alive here
// until its last hold goes, connected or not; its holds leave in ticket
// order, each handed to `issue` once its value came (and, for a large one,
// once a slot's worth is free). A client that left drops holds waiting on
// its own application's value (that value never comes; their tickets are
// never settled, as no one waits for them) and has the fence they would
// have published into marked failed (`fail_fence`), so the owner's queue
// goes on. The poller looks on every round while awake; while
// it sleeps, a timer looks (IdlePolicy::hold_poll).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <functional>
#include <utility>
#include <vector>

#include "engine/client.hpp"
#include "engine/idle.hpp"
#include "engine/stats.hpp"

namespace ferry::ferryd {

class Holds {
 public:
  using Issue = std::function<void(const ClientRef&, const Entry&)>;
  using FailFence = std::function<void(ClientRef owner, uint32_t fence, uint64_t value)>;
  // `asleep`: the poller's state, read when the timer fires.
  Holds(boost::asio::io_context& io, const bool& asleep, Issue issue, FailFence fail_fence)
      : timer_(io), asleep_(asleep), issue_(std::move(issue)), fail_fence_(std::move(fail_fence)) {}

  // `h` waits: behind the client's earlier holds, or for its own value.
  void add(const ClientRef& c, const ClientState::Held& h);
  // Releases the holds whose value came; how many.
  size_t poll();
  // Drops every hold of the departed clients of `uid`, as poll() drops those
  // whose application's value can no longer come (a fence they would have
  // published into is marked failed, so its owner's queue goes on), so that
  // their state goes: a user at its bound of clients makes room with its
  // own departed ones. How many clients let go.
  size_t drop_departed(std::optional<uid_t> uid);
  // ferryd stops with holds left past its drain time: each is given up as
  // a departed client's is (a fence it would publish into marked failed),
  // so that no consumer's queue waits for ever on a fence nobody will write.
  void drop_all();
  // While the poller sleeps: a look after a while.
  void arm();
  void stop() { timer_.cancel(); }
  bool empty() const { return holders_.empty(); }
  size_t holders() const { return holders_.size(); }
  // Transfers held now, of every holder.
  size_t held() const {
    size_t n = 0;
    for (const auto& c : holders_) n += c->held().size();
    return n;
  }
  // A hold came or moved within IdlePolicy::kHoldAwake: the poller stays awake for it.
  bool near() const {
    return !holders_.empty() && std::chrono::steady_clock::now() - since_ < IdlePolicy::kHoldAwake;
  }
  // Whether the timer's last look released nothing (the poller then goes
  // back to sleep at once); clears it.
  bool take_idle_wake() { return std::exchange(idle_wake_, false); }
  void clear_idle_wake() { idle_wake_ = false; }
  // How long the holds released so far waited for their values (status's
  // histograms.hold_wait): a fenced upload's wait is its consumer's.
  const Histogram& waited() const { return waited_; }

 private:
  // A hold given up: its fence publish, if any, marked failed.
  void drop(const ClientRef& c, const ClientState::Held& h);
  std::vector<ClientRef> holders_;  // clients with held transfers
  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
  std::chrono::steady_clock::time_point since_;  // a hold last came or moved
  bool idle_wake_ = false;
  Histogram waited_;
  const bool& asleep_;
  Issue issue_;
  FailFence fail_fence_;
};

}  // namespace ferry::ferryd
