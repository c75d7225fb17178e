// SPDX-License-Identifier: MIT
#include "staging_plan.hpp"

#include <algorithm>
#include <cstdlib>

namespace ferry::client {

namespace {
constexpr uint64_t kPage = 4096;
uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// A piece of an upload that fits in a few slots: at least min_pieces of
// them, each at least min_piece, at most a slot.
uint64_t piece_bytes(const StagingInput& in, const StagingTuning& t) {
  if (in.bytes >= t.min_pieces * in.slot_bytes) return in.slot_bytes;
  const uint64_t p = round_up((in.bytes + t.min_pieces - 1) / t.min_pieces, kPage);
  return std::min(in.slot_bytes, std::max(p, t.min_piece));
}

// Shared by several threads: at least two pieces per thread.
uint64_t parallel_piece(const StagingInput& in, uint64_t threads, const StagingTuning& t) {
  const uint64_t p = round_up((in.bytes + 2 * threads - 1) / (2 * threads), kPage);
  return std::min(in.slot_bytes, std::max(p, t.min_piece));
}

bool hot(const StagingInput& in, const StagingTuning& t) { return in.bytes <= t.hot_below && in.alone; }
}  // namespace

bool wants_threads(const StagingInput& in, const StagingTuning& t) { return in.bytes >= t.parallel_from && !hot(in, t); }

StagingPlan plan_staging(const StagingInput& in, const StagingTuning& t) {
  StagingPlan p;
  p.hot = hot(in, t);
  p.stream = in.bytes < t.stream_below && !p.hot;
  p.threads = wants_threads(in, t) ? std::max<uint64_t>(in.threads, 1) : 1;
  p.piece = piece_bytes(in, t);
  if (p.threads > 1) p.piece = std::min(p.piece, parallel_piece(in, p.threads, t));
  // Alone, the device starts copying once the lead piece is staged rather
  // than a whole piece; in a stream it has earlier pieces to copy meanwhile.
  const uint64_t small =
      p.hot && p.threads == 1 && t.first_piece != 0 ? std::min(p.piece, std::max(t.first_piece, p.piece / 4)) : p.piece;
  p.lead = small < p.piece && in.bytes > small ? small : 0;
  p.pieces = p.lead == 0 ? (in.bytes + p.piece - 1) / p.piece : 1 + (in.bytes - p.lead + p.piece - 1) / p.piece;
  return p;
}

uint64_t thread_share(uint64_t pool, uint32_t published) {
  return published == 0 ? pool : std::clamp<uint64_t>(published, 1, pool);
}

const StagingTuning& tuning() {
  static const StagingTuning t = [] {
    StagingTuning v;
#if defined(FERRY_TUNING_ENV)
    auto read = [](const char* name, uint64_t* into, uint64_t lo, uint64_t hi) {
      const char* e = std::getenv(name);
      if (e == nullptr) return;
      const unsigned long long n = std::strtoull(e, nullptr, 10);
      if (n >= lo && n <= hi) *into = n;
    };
    read("FERRY_MIN_PIECE", &v.min_piece, kPage, uint64_t{1} << 40);
    read("FERRY_MIN_PIECES", &v.min_pieces, 1, 64);
    read("FERRY_PARALLEL_FROM", &v.parallel_from, 1, UINT64_MAX);
    read("FERRY_FIRST_PIECE", &v.first_piece, 0, uint64_t{1} << 40);
    read("FERRY_AREA_PIECE", &v.area_piece, kPage, uint64_t{1} << 40);
#endif
    return v;
  }();
  return t;
}

}  // namespace ferry::client
