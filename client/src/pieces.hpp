// SPDX-License-Identifier: MIT
// The one piece loop of an upload, ring or direct: each piece of the plan
// placed (in the staging area, at its turn; or in an area of the upload's
// own), its bytes copied there from the source, then handed to a sink: a
// ring entry for ferryd (upload), or the caller's queue ops (upload_direct).
// While one piece is staged the device copies earlier ones; a large upload
// stages several at once on the stager's threads.
#pragma once

#include <cstdint>

#include "client.hpp"
#include "gather.hpp"
#include "staging_plan.hpp"
#include "tsan.hpp"

namespace ferry::client {

// Whether stage_pieces runs an upload's pieces on the stager's threads too
// (else all on the caller's, in order).
inline bool on_stager(const StagingPlan& plan, bool threads, bool last_alone) {
  const uint64_t together = last_alone ? plan.pieces - 1 : plan.pieces;
  return threads && together >= 4 && plan.threads > 1;
}

struct Piece {
  uint64_t index = 0;    // in the plan
  uint64_t offset = 0;   // in the upload
  uint64_t length = 0;
  uint64_t staging = 0;  // where it lies from the staging area's start (an own area: its offset there)
  char* at = nullptr;    // its bytes, staged
};

// Where an upload's pieces go: the staging area, each placed at its turn
// (fifo); the staging area, every piece placed already (claimed, at
// offsets[i]: StagingFifo::claim_now, for uploads of kClaimed pieces at
// most); or an area of the upload's own.
struct Destination {
  static constexpr uint64_t kClaimed = 16;
  char* area = nullptr;
  bool claimed = false;
  uint64_t offsets[kClaimed] = {};
};

// Runs every piece of `plan` (`bytes` in all, from `from`) through `sink`
// (int(const Piece&): 0, or why the upload stops). `turn`: the first piece's
// ticket and placement; `to`: where the pieces go. `threads`: whether the
// stager's threads may stage pieces; `last_alone`: the last piece goes after
// every other one was sent, on this thread (it carries the upload's signal).
// 0, or the first error.
template <class Sink>
int stage_pieces(ferry_client* c, const StagingPlan& plan, uint64_t bytes, const Turn& turn, const Gather& from,
                 const Destination& to, bool threads, bool last_alone, Sink&& sink) {
  StagingFifo& fifo = c->fifo;
  auto one = [&](uint64_t i) {
    Piece p{i, plan.offset(i), plan.length(i, bytes), plan.offset(i), nullptr};
    if (to.area != nullptr) {
      p.at = to.area + p.offset;
    } else if (to.claimed) {
      p.staging = to.offsets[i];
      p.at = fifo.staging() + p.staging;
    } else {
      if (int r = fifo.place(turn.next(i), p.length, c->conn.timeout_ms(), &p.staging); r != 0) return r;
      p.at = fifo.staging() + p.staging;
    }
    from.copy(p.at, p.offset, p.length, plan.stream);
    FERRY_SLOT_HANDED_ON(fifo.staging());
    return sink(p);
  };
  const uint64_t together = last_alone ? plan.pieces - 1 : plan.pieces;
  int r = 0;
  if (on_stager(plan, threads, last_alone)) {
    r = c->stager.run(together, one, plan.threads - 1);
  } else {
    for (uint64_t i = 0; i < together && r == 0; ++i) r = one(i);
  }
  if (r == 0 && last_alone) r = one(plan.pieces - 1);
  return r;
}

}  // namespace ferry::client
