// SPDX-License-Identifier: MIT
// The staging policy (client/src/staging_plan.hpp) over a table of cases,
// with the shipped constants, and its invariants over a sweep of sizes.
#include <catch2/catch.hpp>
#include <cstdint>

#include "staging_plan.hpp"

using namespace ferry::client;

namespace {
constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;
}

TEST_CASE("staging plans: the table", "[staging]") {
  struct Case {
    const char* what;
    uint64_t bytes, slot;
    bool alone;
    uint64_t threads;
    bool hot, stream;
    uint64_t plan_threads, piece, lead, pieces;
  };
  const Case cases[] = {
      {"1 KiB alone: one piece, plain stores", 1 * KiB, 1 * MiB, true, 8, true, false, 1, 256 * KiB, 0, 1},
      {"256 KiB alone: a 64 KiB lead, then the rest", 256 * KiB, 1 * MiB, true, 8, true, false, 1, 256 * KiB, 64 * KiB, 2},
      {"256 KiB in a stream: one piece, streaming", 256 * KiB, 1 * MiB, false, 8, false, true, 1, 256 * KiB, 0, 1},
      {"1 MiB alone: the caller stages it, lead first", 1 * MiB, 1 * MiB, true, 8, true, false, 1, 256 * KiB, 64 * KiB, 5},
      {"1 MiB in a stream: the pool, four pieces", 1 * MiB, 1 * MiB, false, 8, false, true, 8, 256 * KiB, 0, 4},
      {"4 MiB alone is not hot: the pool", 4 * MiB, 1 * MiB, true, 8, false, true, 8, 256 * KiB, 0, 16},
      {"16 MiB in 4 MiB slots: two pieces per thread", 16 * MiB, 4 * MiB, false, 8, false, true, 8, 1 * MiB, 0, 16},
      {"256 MiB: whole slots, plain stores", 256 * MiB, 1 * MiB, false, 8, false, false, 8, 1 * MiB, 0, 256},
      {"4 MiB with one thread allowed", 4 * MiB, 1 * MiB, false, 1, false, true, 1, 1 * MiB, 0, 4},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const StagingPlan p = plan_staging({c.bytes, c.slot, c.alone, c.threads});
    CHECK(p.hot == c.hot);
    CHECK(p.stream == c.stream);
    CHECK(p.threads == c.plan_threads);
    CHECK(p.piece == c.piece);
    CHECK(p.lead == c.lead);
    CHECK(p.pieces == c.pieces);
    CHECK(wants_threads({c.bytes, c.slot, c.alone, c.threads}) == (!c.hot && c.bytes >= MiB));
  }
}

TEST_CASE("staging plans: pieces cover the upload exactly, each fits a slot", "[staging]") {
  for (uint64_t slot : {64 * KiB, 1 * MiB, 4 * MiB})
    for (uint64_t bytes = 1; bytes <= 64 * MiB; bytes = bytes * 3 + 7)
      for (bool alone : {false, true})
        for (uint64_t threads : {1, 2, 8}) {
          const StagingPlan p = plan_staging({bytes, slot, alone, threads});
          INFO("bytes " << bytes << " slot " << slot << " alone " << alone << " threads " << threads);
          REQUIRE(p.pieces >= 1);
          CHECK(p.threads <= threads);
          CHECK(p.lead < p.piece + (p.lead == 0 ? 1 : 0));
          uint64_t at = 0;
          for (uint64_t i = 0; i < p.pieces; ++i) {
            CHECK(p.offset(i) == at);
            const uint64_t n = p.length(i, bytes);
            CHECK(n > 0);
            CHECK(n <= slot);
            at += n;
          }
          CHECK(at == bytes);
        }
}

TEST_CASE("thread share: what ferryd published, at most the pool; the whole pool alone", "[staging]") {
  CHECK(thread_share(8, 0) == 8);  // alone: the whole pool
  CHECK(thread_share(8, 1) == 1);
  CHECK(thread_share(8, 2) == 2);
  CHECK(thread_share(8, 64) == 8);  // never more than the pool
}
