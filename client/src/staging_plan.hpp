// SPDX-License-Identifier: MIT
// The staging policy: how one upload is cut into pieces and who stages them,
// decided from what is known when the call is made. A pure function of its
// input (no globals, no environment), unit-tested over a table of cases
// (tests/staging_plan_tests.cpp). Each constant's reason, with the figures it
// came from, is in docs/DESIGN.md ("Staging").
#pragma once

#include <cstdint>

#include "ferry/proto.hpp"

namespace ferry::client {

// The constants of the policy. The defaults are what ships; a build with
// FERRY_TUNING_ENV reads overrides from the environment, for measuring them
// (tuning()).
struct StagingTuning {
  uint64_t min_piece = 256 * 1024;      // every piece costs ferryd a submission
  uint64_t min_pieces = 4;              // an upload of a few slots: this many, to overlap staging and copying
  uint64_t parallel_from = proto::kThreadedUpload;  // the staging threads' wake-ups pay from here
  uint64_t first_piece = 64 * 1024;     // an upload alone leads with a quarter piece, at least this (0: none)
  uint64_t hot_below = 2ull << 20;      // alone and this small: plain stores into cache-hot bytes
  uint64_t stream_below = 128ull << 20; // streaming stores pay below this; above, plain stores won
  uint64_t area_piece = 4ull << 20;     // an upload staged in an area of its own: pieces at most this
};

struct StagingInput {
  uint64_t bytes = 0;       // the upload's size (> 0)
  uint64_t slot_bytes = 0;  // the client's slot size (> 0)
  bool alone = false;       // nothing else of this client's is in flight
  uint64_t threads = 1;     // staging threads this client may use, the caller included (thread_share)
};

struct StagingPlan {
  bool hot = false;       // staged by the caller alone, with plain stores, at the area's start
  bool stream = false;    // streaming stores for its pieces
  uint64_t threads = 1;   // threads that stage it, the caller included
  uint64_t piece = 0;     // bytes per piece (the last may be shorter)
  uint64_t lead = 0;      // the first piece's bytes when it is smaller than the rest; 0: all alike
  uint64_t pieces = 0;
  // Where piece i starts, and how long it is, in an upload of `bytes`.
  uint64_t offset(uint64_t i) const { return lead == 0 ? i * piece : i == 0 ? 0 : lead + (i - 1) * piece; }
  uint64_t length(uint64_t i, uint64_t bytes) const {
    return (i + 1 == pieces ? bytes : offset(i + 1)) - offset(i);
  }
};

StagingPlan plan_staging(const StagingInput& in, const StagingTuning& t = {});

// Whether plan_staging would use more threads than the caller, were they
// there: a client's staging threads are started only when first wanted.
bool wants_threads(const StagingInput& in, const StagingTuning& t = {});

// Threads one client stages a large upload with: what ferryd published for
// it (proto::Segment::staging_threads), at most its pool; its whole pool
// while ferryd publishes 0 (it is the only client moving data).
uint64_t thread_share(uint64_t pool, uint32_t published);

// The shipped tuning, or (built with FERRY_TUNING_ENV) the environment's
// FERRY_MIN_PIECE, FERRY_MIN_PIECES, FERRY_PARALLEL_FROM, FERRY_FIRST_PIECE,
// FERRY_AREA_PIECE.
const StagingTuning& tuning();

}  // namespace ferry::client
