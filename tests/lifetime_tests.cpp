// SPDX-License-Identifier: MIT
// What ferryd keeps for as long as it runs, in its own types: each quantity
// either returns to its idle value once the clients that made it are gone or
// is bounded whatever the churn (docs/DESIGN.md, "What ferryd keeps").
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "engine/run_totals.hpp"
#include "ferry/util/size.hpp"

using namespace ferry::ferryd;

namespace {
RunCounts counts(uint64_t staged, uint64_t no_room = 0) {
  RunCounts c;
  c.staged = staged;
  c.staged_bytes = staged * 4096;
  c.passed[6] = no_room;
  return c;
}
}  // namespace

TEST_CASE("ferry-run's totals: one row per user and command, the exited folded in, never lower", "[lifetime]") {
  RunTotals t;
  const auto t0 = std::chrono::system_clock::now();
  t.fold(1001, 7, "python3", counts(5), t0);
  for (int i = 0; i < 1000; ++i) t.fold(1000, 100 + i, "python3", counts(3, 1), t0 + std::chrono::seconds(i));
  REQUIRE(t.rows().size() == 2);
  const auto& r = t.rows().at({1000, "python3"});
  CHECK(r.processes == 1000);
  CHECK(r.counts.staged == 3000);
  CHECK(r.counts.passed[6] == 1000);
  // The last few that exited, each on its own, and none for long.
  const auto recent = t.recent(t0 + std::chrono::seconds(999));
  REQUIRE(recent.size() == RunTotals::kRecent);
  CHECK(recent.back().pid == 100 + 999);
  CHECK(t.recent(t0 + std::chrono::seconds(999) + RunTotals::kRecentFor + std::chrono::seconds(1)).empty());
}

TEST_CASE("ferry-run's totals: a user's commands past the bound count as other", "[lifetime]") {
  RunTotals t;
  for (size_t i = 0; i < RunTotals::kCommandsPerUser + 50; ++i) t.fold(1000, 1, "cmd" + std::to_string(i), counts(1));
  t.fold(1001, 1, "cmd0", counts(1));  // another user's are its own
  CHECK(t.rows().size() == RunTotals::kCommandsPerUser + 2);
  CHECK(t.rows().at({1000, RunTotals::kOther}).processes == 50);
  CHECK(t.row_name(1000, "cmd0") == "cmd0");  // known ones keep their row
  CHECK(t.row_name(1000, "new") == RunTotals::kOther);
}

TEST_CASE("ferry-run's counts: a client that lowers them, or overflows them, moves no total down", "[lifetime]") {
  RunCounts high = counts(10);
  high.keep_max(counts(3));
  CHECK(high.staged == 10);
  RunCounts sum = counts(UINT64_MAX - 1);
  sum.add(counts(5));
  CHECK(sum.staged == UINT64_MAX);
}

TEST_CASE("sizes read as systemd and ulimit users write them, and printed so that they read back", "[units]") {
  using ferry::util::format_size;
  using ferry::util::parse_size;
  uint64_t v = 0;
  const std::pair<const char*, uint64_t> good[] = {
      {"4096", 4096},           {"256M", 256ull << 20}, {"256MiB", 256ull << 20}, {"256 MiB", 256ull << 20},
      {"1G", 1ull << 30},       {"1g", 1ull << 30},     {"1.5G", 3ull << 29},     {"512K", 512ull << 10},
      {"2T", 2ull << 40},       {"0", 0},               {"7 B", 7},               {"64kib", 64ull << 10}};
  for (const auto& [text, bytes] : good) {
    INFO(text);
    REQUIRE(parse_size(text, &v));
    CHECK(v == bytes);
  }
  for (const char* bad : {"", "-1", "256Q", "1.5", "0.1K", "1..5G", "M", "1GB", "16777216T", "18446744073709551616"}) {
    INFO(bad);
    CHECK_FALSE(parse_size(bad, &v));
  }
  for (uint64_t bytes : {uint64_t{0}, uint64_t{4096}, uint64_t{256} << 20, uint64_t{3} << 29, uint64_t{1} << 40}) {
    REQUIRE(parse_size(format_size(bytes), &v));
    CHECK(v == bytes);
  }
  CHECK(format_size(256ull << 20) == "256 MiB");
  CHECK(format_size(3ull << 29) == "1.5 GiB");
}
