// SPDX-License-Identifier: MIT
// Held transfers (holds.hpp).
#include "engine/holds.hpp"

#include <algorithm>
#include <chrono>

namespace ferry::ferryd {


void Holds::add(const ClientRef& c, const ClientState::Held& h) {
  if (!c->marks.holder) {
    c->marks.holder = true;
    holders_.push_back(c);  // kept until its holds are gone, connected or not
  }
  since_ = std::chrono::steady_clock::now();  // a hold came
  ClientState::Held held = h;
  held.since = since_;
  c->hold(held);
  if (asleep_) arm();  // awake, the poller looks on every round
}

void Holds::arm() {
  if (timer_armed_ || holders_.empty()) return;
  timer_armed_ = true;
  const auto age = std::chrono::steady_clock::now() - since_;
  timer_.expires_after(IdlePolicy::hold_poll(age));  // awake, the poller looks on every round
  timer_.async_wait([this](const boost::system::error_code& ec) {
    timer_armed_ = false;
    if (ec) return;
    // Nothing released: the poller may go back to sleep at once.
    if (poll() == 0) idle_wake_ = true;
    if (asleep_) arm();
  });
}

void Holds::drop(const ClientRef& c, const ClientState::Held& h) {
  // The fence it would have published into is the destination's.
  if (h.e.fenced() && h.e.event != 0) {
    int err = 0;
    if (BufferRef b = c->find(h.e.buffer, proto::kRightUpload, &err); b && b->fence != 0)
      if (ClientRef owner = b->owner.lock()) fail_fence_(std::move(owner), b->fence, h.e.event);
  }
}

size_t Holds::drop_departed(std::optional<uid_t> uid) {
  size_t gone = 0;
  for (size_t i = 0; i < holders_.size();) {
    const ClientRef c = holders_[i];
    if (c->connected() || (uid && c->uid != *uid)) {
      ++i;
      continue;
    }
    for (const ClientState::Held& h : c->held()) drop(c, h);
    c->held().clear();
    c->marks.holder = false;
    holders_[i] = std::move(holders_.back());
    holders_.pop_back();
    ++gone;
  }
  return gone;
}

void Holds::drop_all() {
  for (const ClientRef& c : holders_) {
    for (const ClientState::Held& h : c->held()) drop(c, h);
    c->held().clear();
    c->marks.holder = false;
  }
  holders_.clear();
}

size_t Holds::poll() {
  size_t released = 0;
  for (size_t i = 0; i < holders_.size();) {
    // A copy, not a reference: issuing may settle tickets, drain the ring
    // and add to holders_ (which moves its elements).
    const ClientRef c = holders_[i];
    auto& held = c->held();
    while (!held.empty()) {
      const ClientState::Held& h = held.front();
      // A client that left still sends what it queued (as its copies in
      // flight still finish): an upload waiting for a fence's release goes
      // once the owner releases it. Its own application's value will never
      // come: such a hold is dropped, and a fence it would have published
      // into still moves, marked failed, so the owner's queue goes on.
      if (!c->connected() && h.e.after != 0 && c->app_value() < h.e.after) {
        drop(c, h);
        held.pop_front();
        ++released;
        continue;
      }
      if (!c->hold_over(h)) break;
      // Held or not, large transfers stay slot_count in flight.
      if (!c->window().room_for(h.e.length)) break;
      const Entry go = h.e;
      waited_.add(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - h.since).count()));
      held.pop_front();
      issue_(c, go);
      ++released;
    }
    if (released != 0) since_ = std::chrono::steady_clock::now();
    if (held.empty()) {
      c->marks.holder = false;
      holders_[i] = std::move(holders_.back());  // no hold keeps it any more
      holders_.pop_back();
    } else {
      ++i;
    }
  }
  return released;
}

}  // namespace ferry::ferryd
