// SPDX-License-Identifier: MIT
// The daemon's clients, each with its staging segment: made (a segment from
// the segment pool, or made here), counted active or idle for the cores
// they share, and given back at their end.
//
// Contract: everything runs on the io thread; the pool's thread hands a
// segment made on order over by a post. A client's resources go back when
// its last reference goes (its session's, or a copy in flight's): its grants
// and event pools (Resources), its segment (handed to the pool's thread,
// which unregisters and unmaps it, or that done here), its slot waits (into
// the departed ones).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "device/backend.hpp"
#include "engine/client.hpp"
#include "engine/resources.hpp"
#include "engine/run_totals.hpp"
#include "engine/segment_pool.hpp"
#include "engine/stats.hpp"

namespace ferry::ferryd {

class Clients {
 public:
  // `resources` may still be under construction: it is used only from the
  // first client on.
  Clients(boost::asio::io_context& io, Backend& backend, Resources& resources, EngineStats& stats)
      : io_(io), backend_(backend), resources_(resources), stats_(stats), idle_timer_(io) {}
  Clients(const Clients&) = delete;
  Clients& operator=(const Clients&) = delete;

  // Segments made and registered ahead, `ready` at a time, on a thread of
  // their own (without: add_client makes each itself).
  void use_segment_pool(uint32_t slots, uint64_t slot_bytes, size_t ready) {
    pool_ = std::make_unique<SegmentPool>(slots, slot_bytes, ready, &backend_);
  }
  // A new client with a staging segment of `slots` slots, registered with the
  // device where the backend can.
  int add_client(uint32_t slots, uint64_t slot_bytes, ClientRef* out);
  // The same without making a segment on this thread: `done` is called at
  // once when one is ready (or there is no pool), else on this thread once
  // the pool's thread made one (-ECANCELED, no client, when `cancelled` was
  // set first).
  using ClientDone = std::function<void(int, ClientRef)>;
  void add_client(uint32_t slots, uint64_t slot_bytes, std::shared_ptr<std::atomic<bool>> cancelled, ClientDone done);
  // Every client whose resources still exist, by id.
  const std::map<uint64_t, ClientState*>& all() const { return clients_; }
  // Client states that outlive their session (held transfers, copies in
  // flight): they count against --max-clients as connected ones do.
  size_t departed() const;
  size_t connected() const;
  // Stores each connected client's staging threads (staging_share) into its
  // segment (proto::Segment::staging_threads): called when one comes or
  // goes, starts transferring, or has been idle for kIdleCheck.
  void publish();
  // A client's staging threads when `active` clients of `users` users
  // transfer, `of_user` of them its user's (itself counted): 0 (its whole
  // pool) when it is alone, else a quarter of `cores` shared out by user,
  // then among the user's clients, at least 1.
  static uint32_t staging_share(uint64_t cores, uint32_t active, uint32_t users, uint32_t of_user);
  // A client that moved no transfer for this long counts as idle.
  static constexpr auto kIdleCheck = std::chrono::milliseconds(500);
  // Slot waits as clients published them: the gone ones and the live ones.
  Histogram slot_waits() const;
  // What processes under ferry-run did, the departed ones folded in by user
  // and command (their lead clients' last counts), the live ones in their rows.
  RunTotals& run_totals() { return run_totals_; }
  // The segment pool's queues (zeros without a pool).
  SegmentPool::Counts pool_counts() const { return pool_ ? pool_->counts() : SegmentPool::Counts{}; }
  const RunTotals& run_totals() const { return run_totals_; }
  void stop() { idle_timer_.cancel(); }

 private:
  ClientRef adopt(StagingSegment seg, bool registered);
  void release(ClientState* c);
  // Every kIdleCheck while any client is active: idle ones stop counting.
  void arm_idle_check();

  boost::asio::io_context& io_;
  Backend& backend_;
  Resources& resources_;
  EngineStats& stats_;
  std::unique_ptr<SegmentPool> pool_;
  std::map<uint64_t, ClientState*> clients_;
  uint64_t next_client_ = 0;
  Histogram departed_slot_waits_;  // of clients already gone
  RunTotals run_totals_;
  boost::asio::steady_timer idle_timer_;
  bool idle_timer_armed_ = false;
};

}  // namespace ferry::ferryd
