// SPDX-License-Identifier: MIT
// A client inherited across fork(): every call in the child fails with
// -ECHILD and touches nothing of the parent's (no staging byte, no ring
// entry, no message), while the parent goes on; the child connects its own.
#include <ferry/ferry.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "daemon_fixture.hpp"

using namespace ferry::test;

namespace {

std::vector<uint8_t> pattern(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Whether any mapping of this process covers `p` (/proc/self/maps).
bool mapped_here(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) return true;
  }
  return false;
}

// Round trips of `rounds` patterns through buffer b; how many came back wrong.
int round_trips(ferry_client* c, ferry_buffer b, uint64_t n, int rounds, uint64_t seed) {
  int wrong = 0;
  std::vector<uint8_t> back(n);
  for (int i = 0; i < rounds; ++i) {
    const auto src = pattern(n, seed + static_cast<uint64_t>(i));
    ferry_ticket t = 0;
    if (ferry_upload(c, b, 0, src.data(), n, &t) != 0 || ferry_wait(c, t, -1) != 0) return -1;
    if (ferry_download(c, b, 0, back.data(), n) != 0) return -1;
    wrong += back != src;
  }
  return wrong;
}

}  // namespace

TEST_CASE("a client used after fork fails with -ECHILD in the child and stays whole in the parent", "[fork]") {
  Daemon d({"--slot-size", "65536", "--slots", "4"});
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  const uint64_t n = 200'000;  // several pieces: the ring and the staging area both in use
  ferry_buffer b{};
  REQUIRE(ferry_buffer_alloc(c, n, &b) == 0);
  ferry_timeline tl{};
  REQUIRE(ferry_get_timeline(c, &tl) == 0);
  const pid_t parent = getpid();

  pid_t child = fork_child([&] {
    // The parent's segment is not even mapped here (looked at first: later
    // allocations of the child may be placed at that address).
    if (mapped_here(tl.segment)) return 89;
    int failed = 0;
    auto expect = [&](int r, const char* what) {
      if (r != -ECHILD) {
        std::fprintf(stderr, "%s returned %d, not -ECHILD\n", what, r);
        ++failed;
      }
    };
    // The parent's repro: the same uploads and downloads, 200 rounds.
    std::vector<uint8_t> back(n);
    for (int i = 0; i < 200; ++i) {
      const auto src = pattern(n, 1000 + static_cast<uint64_t>(i));
      ferry_ticket t = 0;
      expect(ferry_upload(c, b, 0, src.data(), n, &t), "ferry_upload");
      expect(ferry_download(c, b, 0, back.data(), n), "ferry_download");
    }
    uint8_t byte = 0;
    uint64_t size = 0, pool = 0;
    ferry_buffer nb{};
    ferry_ticket t = 0;
    ferry_reservation r{};
    ferry_token tok{};
    ferry_ipc_handle h{};
    ferry_info info{};
    ferry_timeline ctl{};
    expect(ferry_upload_after(c, b, 0, &byte, 1, 1, &t), "ferry_upload_after");
    expect(ferry_upload_signal(c, b, 0, &byte, 1, 1, 0, &t), "ferry_upload_signal");
    expect(ferry_upload_reserve(c, 1, &r), "ferry_upload_reserve");
    r.ticket = 1;
    expect(ferry_upload_commit(c, &r, b, 0, &t), "ferry_upload_commit");
    expect(ferry_upload_cancel(c, &r), "ferry_upload_cancel");
    expect(ferry_wait(c, 1, 0), "ferry_wait");
    expect(ferry_flush(c, 0), "ferry_flush");
    expect(ferry_signal(c, 5), "ferry_signal");
    expect(ferry_buffer_alloc(c, 4096, &nb), "ferry_buffer_alloc");
    expect(ferry_buffer_size(c, b, &size), "ferry_buffer_size");
    expect(ferry_buffer_grant(c, b, FERRY_RIGHT_UPLOAD, &tok), "ferry_buffer_grant");
    expect(ferry_buffer_revoke(c, b, nullptr), "ferry_buffer_revoke");
    expect(ferry_buffer_open(c, &tok, &nb, &size), "ferry_buffer_open");
    expect(ferry_buffer_export(c, b, &h), "ferry_buffer_export");
    h.kind = FERRY_IPC_CUDA;
    h.bytes = 4096;
    expect(ferry_buffer_import(c, &h, &nb), "ferry_buffer_import");
    expect(ferry_event_pool_register(c, &h, 1, &pool), "ferry_event_pool_register");
    expect(ferry_get_info(c, &info), "ferry_get_info");
    expect(ferry_get_timeline(c, &ctl), "ferry_get_timeline");
    expect(ferry_buffer_free(c, b), "ferry_buffer_free");
    if (ferry_completed(c) != 0) ++failed;
    // The message names both processes and what to do.
    const std::string why = ferry_last_error();
    if (why.find(std::to_string(parent)) == std::string::npos || why.find("ferry_connect") == std::string::npos) {
      std::fprintf(stderr, "ferry_last_error: %s\n", why.c_str());
      ++failed;
    }
    ferry_disconnect(c);  // closes this process's socket copy only
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer takes the child's new threads for copies of the
    // parent's ("dup thread with used id"): the second case connects from a
    // child of a process that holds no client.
    return failed == 0 ? 0 : 93;
#endif
    // A client of its own works.
    ferry_client* mine = nullptr;
    if (ferry_connect(d.socket.c_str(), &mine) != 0) return 90;
    ferry_buffer mb{};
    if (ferry_buffer_alloc(mine, 70'000, &mb) != 0) return 91;
    if (round_trips(mine, mb, 70'000, 5, 7) != 0) return 92;
    ferry_disconnect(mine);
    return failed == 0 ? 0 : 93;
  });
  REQUIRE(child > 0);
  // Meanwhile the parent's own rounds, through the same client.
  CHECK(round_trips(c, b, n, 200, 1) == 0);
  CHECK(reap(child) == 0);
  // After the child disconnected and exited, the parent's connection still works...
  CHECK(round_trips(c, b, n, 3, 5000) == 0);
  // ...and the daemon saw exactly the parent's 203 uploads and the child's own 5
  // (none under ThreadSanitizer, where the child does not connect: above).
#if defined(__SANITIZE_THREAD__)
  const uint64_t child_uploads = 0, connections = 1;
#else
  const uint64_t child_uploads = 5, connections = 2;
#endif
  auto st = d.status();
  CHECK(st.get<uint64_t>("totals.uploads") == 203 + child_uploads);
  CHECK(st.get<uint64_t>("totals.connections") == connections);
  ferry_disconnect(c);
  CHECK(d.holds_nothing());
}

TEST_CASE("workers forked from a process without a client each connect their own", "[fork]") {
  Daemon d({"--slot-size", "65536", "--slots", "4"});
  std::vector<pid_t> kids;
  for (int k = 0; k < 4; ++k) {
    kids.push_back(fork_child([&] {
      ferry_client* c = nullptr;
      if (ferry_connect(d.socket.c_str(), &c) != 0) return 90;
      ferry_buffer b{};
      if (ferry_buffer_alloc(c, 100'000, &b) != 0) return 91;
      const int wrong = round_trips(c, b, 100'000, 20, 100 * static_cast<uint64_t>(k));
      ferry_disconnect(c);
      return wrong == 0 ? 0 : 92;
    }));
  }
  for (pid_t p : kids) CHECK(reap(p) == 0);
  CHECK(d.holds_nothing());
}
