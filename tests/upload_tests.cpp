// SPDX-License-Identifier: MIT
// The upload path end to end: a real ferryd on the simulated device, real
// client processes through libferry, and raw-protocol peers where a test must
// misbehave.
#include <ferry/ferry.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>

#include "daemon_fixture.hpp"
#include "ferry/sim.h"

using namespace ferry::test;
namespace proto = ferry::proto;

namespace {

struct Conn {
  ferry_client* c = nullptr;
  explicit Conn(const std::string& socket) { REQUIRE(ferry_connect(socket.c_str(), &c) == 0); }
  ~Conn() { ferry_disconnect(c); }
  ferry_buffer alloc(uint64_t n) {
    ferry_buffer b{};
    REQUIRE(ferry_buffer_alloc(c, n, &b) == 0);
    return b;
  }
  std::vector<uint8_t> download(ferry_buffer b, uint64_t off, uint64_t n) {
    std::vector<uint8_t> v(n);
    REQUIRE(ferry_download(c, b, off, v.data(), n) == 0);
    return v;
  }
};

std::vector<uint8_t> pattern(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < n; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<uint64_t>(8, n - i));
  }
  return v;
}

}  // namespace

TEST_CASE("uploads from 1 byte to 64 MiB at odd offsets arrive intact", "[upload]") {
  Daemon d({"--slot-size", "262144", "--slots", "8"});
  Conn k(d.socket);
  const uint64_t cap = (64ull << 20) + 4096;
  ferry_buffer b = k.alloc(cap);
  const uint64_t sizes[] = {1, 7, 4095, 4097, 262143, 262144, 262145, 3 * 262144 + 5, 5'000'001, 64ull << 20};
  const uint64_t offsets[] = {0, 3, 1001, 4093};
  uint64_t seed = 1;
  for (uint64_t n : sizes) {
    for (uint64_t off : offsets) {
      if (off + n > cap) continue;
      auto src = pattern(n, ++seed);
      ferry_ticket t = 0;
      REQUIRE(ferry_upload(k.c, b, off, src.data(), n, &t) == 0);
      REQUIRE(ferry_wait(k.c, t, -1) == 0);
      INFO("size " << n << " offset " << off);
      CHECK(k.download(b, off, n) == src);
      if (n >= (1u << 20)) break;  // the large ones once
    }
  }
  CHECK(ferry_buffer_free(k.c, b) == 0);
}

TEST_CASE("uploads written in place (reserve, commit) and ordinary ones share the staging bytes", "[upload][reserve]") {
  // 256 KiB of staging, 16 tickets in flight: 60 transfers of mixed sizes go round it several times.
  Daemon d({"--slot-size", "65536", "--slots", "4"});
  Conn k(d.socket);
  const uint64_t region = 65536;
  ferry_buffer b = k.alloc(60 * region);
  std::vector<std::vector<uint8_t>> want;
  const uint64_t sizes[] = {1, 1000, 4097, 65536, 30000, 64, 65535};
  for (uint64_t i = 0; i < 60; ++i) {
    const uint64_t n = sizes[i % 7];
    want.push_back(pattern(n, 1000 + i));
    if (i % 3 == 0) {
      REQUIRE(ferry_upload(k.c, b, i * region, want.back().data(), n, nullptr) == 0);
    } else {
      ferry_reservation r{};
      REQUIRE(ferry_upload_reserve(k.c, n, &r) == 0);
      REQUIRE(r.data != nullptr);
      CHECK(r.bytes == n);
      std::memcpy(r.data, want.back().data(), n);
      ferry_ticket t = 0;
      const ferry_reservation copy = r;
      REQUIRE(ferry_upload_commit(k.c, &r, b, i * region, &t) == 0);
      CHECK(t != 0);
      CHECK(ferry_upload_commit(k.c, &r, b, i * region, &t) == -EINVAL);  // used up
      // A copy made before the commit cannot send the ticket again (it would
      // rewrite the ring entry of a later ticket).
      ferry_reservation again = copy;
      CHECK(ferry_upload_commit(k.c, &again, b, i * region, &t) == -EINVAL);
      again = copy;
      CHECK(ferry_upload_cancel(k.c, &again) == -EINVAL);
    }
    if (i % 10 == 9) CHECK(k.download(b, (i - 4) * region, want[i - 4].size()) == want[i - 4]);  // a download between
  }
  REQUIRE(ferry_flush(k.c, -1) == 0);
  for (uint64_t i = 0; i < 60; ++i) {
    INFO("transfer " << i);
    CHECK(k.download(b, i * region, want[i].size()) == want[i]);
  }
  ferry_reservation r{};
  CHECK(ferry_upload_reserve(k.c, 0, &r) == -EINVAL);
  CHECK_THAT(ferry_last_error(), Catch::Contains("ferry_upload_reserve: 0 bytes"));
  CHECK(ferry_upload_reserve(k.c, 65537, &r) == -EMSGSIZE);  // more than a slot
  CHECK_THAT(ferry_last_error(), Catch::Contains("65537 bytes is more than a staging slot holds (65536)"));
  CHECK(ferry_upload_reserve(k.c, 16, nullptr) == -EFAULT);
  CHECK(ferry_upload_reserve(nullptr, 16, &r) == -EBADF);
  CHECK_THAT(ferry_last_error(), Catch::Contains("the client is NULL"));
  {
    // Another client's reservation is refused, and stays usable by its own.
    Conn other(d.socket);
    ferry_buffer ob = other.alloc(64);
    REQUIRE(ferry_upload_reserve(k.c, 16, &r) == 0);
    ferry_ticket ot = 0;
    CHECK(ferry_upload_commit(other.c, &r, ob, 0, &ot) == -EINVAL);
    CHECK_THAT(ferry_last_error(), Catch::Contains("not this client's"));
    CHECK(ferry_upload_cancel(other.c, &r) == -EINVAL);
    CHECK(ferry_upload_cancel(k.c, &r) == 0);
    CHECK(ferry_flush(k.c, -1) == 0);
  }
  // A reservation committed to a buffer that is not the client's fails there
  // and in its ticket, and the client goes on.
  REQUIRE(ferry_upload_reserve(k.c, 16, &r) == 0);
  ferry_ticket bad = 0;
  CHECK(ferry_upload_commit(k.c, &r, ferry_buffer{999}, 0, &bad) == -ENOENT);
  CHECK(ferry_wait(k.c, bad, -1) == -ENOENT);
  REQUIRE(ferry_upload_reserve(k.c, 16, &r) == 0);
  CHECK(ferry_upload_commit(k.c, &r, b, 60 * region - 16, &bad) == 0);
  CHECK(ferry_upload_commit(k.c, nullptr, b, 0, &bad) == -EFAULT);
  CHECK(ferry_wait(k.c, bad, -1) == 0);
  // Given up: nothing written, no error anywhere, and the client goes on.
  const auto before = k.download(b, 0, 64);
  const uint64_t failed = d.status().get<uint64_t>("totals.failed");
  REQUIRE(ferry_upload_reserve(k.c, 64, &r) == 0);
  std::memset(r.data, 0x5A, 64);
  CHECK(ferry_upload_cancel(k.c, &r) == 0);
  CHECK(ferry_upload_cancel(k.c, &r) == -EINVAL);
  CHECK_THAT(ferry_last_error(), Catch::Contains("used already"));
  CHECK(ferry_upload_commit(k.c, &r, b, 0, &bad) == -EINVAL);
  auto after = pattern(64, 7);
  REQUIRE(ferry_upload(k.c, b, 64, after.data(), 64, &bad) == 0);
  CHECK(ferry_flush(k.c, -1) == 0);
  CHECK(k.download(b, 0, 64) == before);
  CHECK(k.download(b, 64, 64) == after);
  CHECK(d.status().get<uint64_t>("totals.failed") == failed);
}

TEST_CASE("the source may be overwritten and freed as soon as ferry_upload returns", "[upload][safety]") {
  // An earlier upload keeps the device queue busy: on the simulated device a
  // slow link (40 MB/s) under 4 MiB; on a real GPU, the last 8 MiB of 256 MiB.
  const bool sim = std::getenv("FERRY_TEST_BACKEND") == nullptr;
  const size_t blocker_bytes = sim ? (4u << 20) : (256u << 20);
  Daemon d({"--slot-size", "1048576", "--slots", "8"},
           {{"FERRY_SIM_BANDWIDTH_GBPS", "0.04"}, {"FERRY_SIM_LATENCY_US", "0"}});
  Conn k(d.socket);
  ferry_buffer busy = k.alloc(blocker_bytes);
  ferry_buffer b = k.alloc(65536);
  std::vector<uint8_t> blocker(blocker_bytes, 1);
  ferry_ticket tb = 0;
  REQUIRE(ferry_upload(k.c, busy, 0, blocker.data(), blocker.size(), &tb) == 0);

  auto* src = static_cast<uint8_t*>(std::malloc(65536));
  const auto original = pattern(65536, 99);
  std::memcpy(src, original.data(), original.size());
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(k.c, b, 0, src, 65536, &t) == 0);
  // The call returned while the device has not copied it yet...
  CHECK(ferry_completed(k.c) < t);
  // ...and the caller takes its memory back at once.
  std::memset(src, 0xEE, 65536);
  std::free(src);
  REQUIRE(ferry_wait(k.c, t, -1) == 0);
  CHECK(ferry_wait(k.c, tb, 0) == 0);
  CHECK(k.download(b, 0, 65536) == original);
}

TEST_CASE("8 processes x 2000 uploads, each verified by checksum: nothing lost or mixed", "[upload][multiprocess]") {
  Daemon d({"--slot-size", "65536", "--slots", "16"});
  const int procs = 8, uploads = 2000;
  const uint64_t rec = 512;
  std::vector<pid_t> kids;
  for (int p = 0; p < procs; ++p) {
    kids.push_back(fork_child([&, p] {
      ferry_client* c = nullptr;
      if (ferry_connect(d.socket.c_str(), &c) != 0) return 10;
      ferry_buffer b{};
      if (ferry_buffer_alloc(c, rec * uploads, &b) != 0) return 11;
      std::vector<uint8_t> all = pattern(rec * uploads, 1000 + p);
      std::vector<uint8_t> src(rec);
      for (int i = 0; i < uploads; ++i) {
        std::memcpy(src.data(), all.data() + i * rec, rec);
        if (ferry_upload(c, b, i * rec, src.data(), rec, nullptr) != 0) return 12;
        std::memset(src.data(), 0, rec);  // reuse at once
      }
      if (ferry_flush(c, -1) != 0) return 13;
      std::vector<uint8_t> back(rec * uploads);
      if (ferry_download(c, b, 0, back.data(), back.size()) != 0) return 14;
      if (ferry_sim_checksum(back.data(), back.size()) != ferry_sim_checksum(all.data(), all.size())) return 15;
      ferry_disconnect(c);
      return 0;
    }));
  }
  for (pid_t k : kids) CHECK(reap(k) == 0);
  auto st = d.status();
  CHECK(st.get<uint64_t>("totals.uploads") == uint64_t{procs} * uploads);
  CHECK(st.get<uint64_t>("totals.failed") == 0);
  CHECK(d.holds_nothing());
}

TEST_CASE("status counts upload calls, their pieces apart, and clients, not status requests", "[upload][status]") {
  Daemon d({"--slot-size", "16384", "--slots", "4"});
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  ferry_buffer b{};
  const uint64_t n = 100'000;  // seven pieces of a 16 KiB slot
  REQUIRE(ferry_buffer_alloc(c, n, &b) == 0);
  std::vector<uint8_t> src = pattern(n, 7);
  for (int i = 0; i < 2; ++i) REQUIRE(ferry_upload(c, b, 0, src.data(), n, nullptr) == 0);
  REQUIRE(ferry_flush(c, -1) == 0);
  for (int i = 0; i < 3; ++i) d.status();  // as ferryctl asks
  auto st = d.status();
  CHECK(st.get<uint64_t>("totals.uploads") == 2);
  CHECK(st.get<uint64_t>("totals.upload_pieces") == 2 * ((n + 16383) / 16384));
  CHECK(st.get<uint64_t>("totals.upload_bytes") == 2 * n);
  CHECK(st.get<uint64_t>("totals.connections") == 1);
  CHECK(st.get<uint64_t>("totals.status_requests") >= 3);
  ferry_disconnect(c);
}

TEST_CASE("many threads share one client", "[upload][threads]") {
  Daemon d({"--slot-size", "16384", "--slots", "4"});
  Conn k(d.socket);
  const int threads = 6, per = 300;
  const uint64_t rec = 3000;  // some uploads span two slots
  ferry_buffer b = k.alloc(rec * threads * per);
  std::vector<std::thread> ts;
  std::atomic<int> errors{0};
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < per; ++i) {
        uint64_t off = (uint64_t(t) * per + i) * rec;
        auto src = pattern(rec, off);
        ferry_ticket tk = 0;
        if (ferry_upload(k.c, b, off, src.data(), rec, &tk) != 0) ++errors;
        if (i % 50 == 0 && ferry_wait(k.c, tk, -1) != 0) ++errors;
      }
    });
  }
  for (auto& t : ts) t.join();
  CHECK(errors == 0);
  REQUIRE(ferry_flush(k.c, -1) == 0);
  auto back = k.download(b, 0, rec * threads * per);
  for (uint64_t off = 0; off < back.size(); off += rec) {
    auto want = pattern(rec, off);
    REQUIRE(std::memcmp(back.data() + off, want.data(), rec) == 0);
  }
}

TEST_CASE("completions come in ticket order; a failed ticket is reported with its error", "[upload][order][simonly]") {
  // The 5th copy the simulated device executes fails.
  Daemon d({}, {{"FERRY_SIM_FAIL_COPY", "5"}, {"FERRY_SIM_FAST", "1"}});
  Conn k(d.socket);
  ferry_buffer b = k.alloc(4096);
  std::vector<ferry_ticket> ts;
  uint64_t seen = 0;
  for (int i = 0; i < 10; ++i) {
    uint8_t v = static_cast<uint8_t>(i);
    ferry_ticket t = 0;
    REQUIRE(ferry_upload(k.c, b, i, &v, 1, &t) == 0);
    ts.push_back(t);
    uint64_t now = ferry_completed(k.c);
    CHECK(now >= seen);  // the timeline never goes back
    seen = now;
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    CHECK(ts[i] == i + 1);
    int r = ferry_wait(k.c, ts[i], -1);
    CHECK(r == (i == 4 ? -EIO : 0));
    CHECK(ferry_completed(k.c) >= ts[i]);
  }
  auto back = k.download(b, 0, 10);
  for (int i = 0; i < 10; ++i) CHECK(back[i] == (i == 4 ? 0 : i));  // the failed copy wrote nothing
  CHECK(d.status().get<uint64_t>("totals.failed") == 1);
  // The error was reported once; the ticket is done.
  CHECK(ferry_wait(k.c, ts[4], 0) == 0);
}

TEST_CASE("a failure inside a large upload fails that upload's ticket", "[upload][order][simonly]") {
  Daemon d({"--slot-size", "4096"}, {{"FERRY_SIM_FAIL_COPY", "3"}, {"FERRY_SIM_FAST", "1"}});
  Conn k(d.socket);
  ferry_buffer b = k.alloc(1 << 16);
  std::vector<uint8_t> src(5 * 4096, 7);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(k.c, b, 0, src.data(), src.size(), &t) == 0);  // copies 1..5
  CHECK(ferry_wait(k.c, t, -1) == -EIO);
  ferry_ticket t2 = 0;
  REQUIRE(ferry_upload(k.c, b, 0, src.data(), src.size(), &t2) == 0);
  CHECK(ferry_wait(k.c, t2, -1) == 0);
  CHECK(ferry_flush(k.c, -1) == 0);
}

TEST_CASE("a client that exits without freeing leaves nothing held", "[upload][cleanup]") {
  Daemon d({"--slot-size", "65536"}, {{"FERRY_SIM_BANDWIDTH_GBPS", "0.5"}, {"FERRY_SIM_LATENCY_US", "0"}});
  for (int round = 0; round < 3; ++round) {
    pid_t kid = fork_child([&] {
      ferry_client* c = nullptr;
      if (ferry_connect(d.socket.c_str(), &c) != 0) return 1;
      std::vector<uint8_t> src(1 << 20, 3);
      for (int i = 0; i < 3; ++i) {
        ferry_buffer b{};
        if (ferry_buffer_alloc(c, 1 << 20, &b) != 0) return 2;
        if (ferry_upload(c, b, 0, src.data(), src.size(), nullptr) != 0) return 3;
      }
      // Round 0 exits, round 1 is killed with copies in flight, round 2 exits mid-stream.
      if (round == 1) raise(SIGKILL);
      return 0;  // no disconnect, no free
    });
    const int rc = reap(kid);
    CHECK(rc == (round == 1 ? 128 + SIGKILL : 0));  // each round ended as it was meant to
    CHECK(d.holds_nothing());
  }
}

TEST_CASE("a client cannot name another client's buffer", "[upload][isolation]") {
  Daemon d;
  Conn a(d.socket);
  ferry_buffer mine = a.alloc(4096);
  std::vector<uint8_t> secret = pattern(4096, 5);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(a.c, mine, 0, secret.data(), 4096, &t) == 0);
  REQUIRE(ferry_wait(a.c, t, -1) == 0);

  Conn b(d.socket);
  uint8_t junk[16] = {};
  CHECK(ferry_upload(b.c, mine, 0, junk, sizeof junk, nullptr) == -ENOENT);
  CHECK(ferry_download(b.c, mine, 0, junk, sizeof junk) == -ENOENT);
  CHECK(ferry_buffer_free(b.c, mine) == -ENOENT);

  // The daemon refuses it too, when a client skips libferry's own check.
  RawClient raw(d.socket);
  raw.hello();
  std::memset(raw.slot(0), 0xAA, 16);
  raw.publish(1, proto::Type::upload, 16, mine.id, 0);
  CHECK(raw.outcome(1) == -ENOENT);
  raw.publish(2, proto::Type::download, 16, mine.id, 0);
  CHECK(raw.outcome(2) == -ENOENT);
  auto fr = proto::make<proto::Free>(proto::Type::free);
  fr.request = 5;
  fr.buffer = mine.id;
  raw.send(fr);
  proto::Reply r{};
  REQUIRE(raw.expect(proto::Type::reply, &r));
  CHECK(r.status == -ENOENT);
  CHECK(a.download(mine, 0, 4096) == secret);
}

TEST_CASE("uploads past a buffer's end are refused and change nothing", "[upload][bounds]") {
  Daemon d;
  Conn k(d.socket);
  ferry_buffer b = k.alloc(1000);
  auto orig = pattern(1000, 8);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(k.c, b, 0, orig.data(), 1000, &t) == 0);
  REQUIRE(ferry_wait(k.c, t, -1) == 0);
  std::vector<uint8_t> junk(64, 0xFF);
  // Each misuse its own errno, and ferry_last_error says what was wrong.
  CHECK(ferry_upload(k.c, b, 990, junk.data(), 11, nullptr) == -ERANGE);
  CHECK_THAT(ferry_last_error(), Catch::Contains("offset 990 + 11 bytes is past the end of buffer"));
  CHECK_THAT(ferry_last_error(), Catch::Contains("(1000 bytes)"));
  CHECK(ferry_upload(k.c, b, 1000, junk.data(), 1, nullptr) == -ERANGE);
  CHECK(ferry_upload(k.c, b, UINT64_MAX - 3, junk.data(), 8, nullptr) == -ERANGE);
  CHECK(ferry_upload(k.c, b, 0, junk.data(), 0, nullptr) == -EINVAL);
  CHECK_THAT(ferry_last_error(), Catch::Contains("ferry_upload: 0 bytes"));
  CHECK(ferry_upload(k.c, b, 0, nullptr, 8, nullptr) == -EFAULT);
  CHECK_THAT(ferry_last_error(), Catch::Contains("ferry_upload: the source is NULL"));
  CHECK(ferry_upload(nullptr, b, 0, junk.data(), 8, nullptr) == -EBADF);
  CHECK(ferry_upload(k.c, ferry_buffer{b.id + 1000}, 0, junk.data(), 8, nullptr) == -ENOENT);
  CHECK_THAT(ferry_last_error(), Catch::Contains("is not one of this client's"));
  CHECK(ferry_download(k.c, b, 999, junk.data(), 2) == -ERANGE);
  CHECK(ferry_download(k.c, b, 0, nullptr, 2) == -EFAULT);
  CHECK(ferry_wait(k.c, 0, -1) == -EINVAL);
  CHECK(ferry_wait(k.c, t + 1000, -1) == -ESRCH);
  CHECK_THAT(ferry_last_error(), Catch::Contains("was never issued by this client"));
  // Five misuses, five errnos, none of them a generic EINVAL.
  CHECK(std::string(ferry_strerror(-ERANGE)).find("past the end") != std::string::npos);

  RawClient raw(d.socket);
  raw.hello();
  uint64_t rb = raw.alloc(1000);
  raw.publish(1, proto::Type::upload, 11, rb, 990);
  CHECK(raw.outcome(1) == -EINVAL);
  raw.publish(2, proto::Type::upload, 8, rb, UINT64_MAX - 3);  // offset + length wraps
  CHECK(raw.outcome(2) == -EINVAL);
  CHECK(k.download(b, 0, 1000) == orig);
}

TEST_CASE("a malformed message closes only its own session", "[upload][badinput]") {
  Daemon d;
  Conn good(d.socket);
  ferry_buffer b = good.alloc(4096);

  RawClient bad(d.socket);
  bad.hello();
  const char garbage[] = "GET / HTTP/1.1\r\n\r\n";
  bad.send_bytes(garbage, sizeof garbage);
  proto::Error e{};
  REQUIRE(bad.expect(proto::Type::error, &e));
  CHECK((e.h.flags & proto::kErrorFatal) != 0);
  CHECK(bad.closed_by_peer());

  RawClient wrong_slot(d.socket);
  wrong_slot.hello();
  // Its last 16 bytes would pass the staging area's end.
  const uint64_t end = wrong_slot.welcome.slot_count * wrong_slot.welcome.slot_bytes / proto::kStagingAlign;
  wrong_slot.publish_word(1, static_cast<uint64_t>(proto::Type::upload) | end << 32, 16, 1, 0);
  REQUIRE(wrong_slot.expect(proto::Type::error, &e));
  CHECK(wrong_slot.closed_by_peer());

  RawClient too_long(d.socket);
  too_long.hello();
  too_long.publish(1, proto::Type::upload, too_long.welcome.slot_bytes + 1, 1, 0);
  REQUIRE(too_long.expect(proto::Type::error, &e));
  CHECK(too_long.closed_by_peer());

  auto src = pattern(4096, 3);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(good.c, b, 0, src.data(), 4096, &t) == 0);
  REQUIRE(ferry_wait(good.c, t, -1) == 0);
  CHECK(good.download(b, 0, 4096) == src);
}

TEST_CASE("SIGTERM: the daemon drains, tells waiting clients, exits 0", "[upload][shutdown]") {
  Daemon d({"--slot-size", "65536"}, {{"FERRY_SIM_BANDWIDTH_GBPS", "0.1"}, {"FERRY_SIM_LATENCY_US", "0"}});
  Conn k(d.socket);
  ferry_buffer b = k.alloc(1 << 20);
  std::vector<uint8_t> src(1 << 20, 9);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(k.c, b, 0, src.data(), src.size(), &t) == 0);
  std::atomic<int> waited{1};
  std::atomic<bool> waiting{false};
  std::thread waiter([&] {
    // A second upload, then a wait for it, under way while the daemon stops.
    ferry_ticket t2 = 0;
    ferry_upload(k.c, b, 0, src.data(), src.size(), &t2);
    waiting = true;
    waited = ferry_wait(k.c, t2, -1);
  });
  REQUIRE(eventually([&] { return waiting.load(); }));
  CHECK(d.stop(SIGTERM) == 0);  // it exits (a daemon that hung here would time the test out)
  waiter.join();
  // Copies in flight at SIGTERM finished before the daemon said goodbye.
  CHECK(ferry_completed(k.c) >= t);
  CHECK((waited == 0 || waited == -ESHUTDOWN || waited == -ECONNRESET));
  // Later calls fail clearly instead of hanging.
  CHECK(ferry_wait(k.c, t + 100, -1) == -ESRCH);
  int r = ferry_upload(k.c, b, 0, src.data(), 16, nullptr);
  CHECK((r == -ESHUTDOWN || r == -ECONNRESET));
}

TEST_CASE("a killed daemon: blocked calls return the connection's end, not a timeout", "[upload][shutdown][simonly]") {
  Daemon d({"--slot-size", "65536", "--slots", "2"},
           {{"FERRY_SIM_BANDWIDTH_GBPS", "0.001"}, {"FERRY_SIM_LATENCY_US", "0"}});
  Conn k(d.socket);
  ferry_buffer b = k.alloc(1 << 20);
  std::vector<uint8_t> src(1 << 20, 9);
  std::atomic<int> result{1};
  std::atomic<bool> returned{false};
  std::thread uploader([&] {
    // 16 slots' worth through 2 slots on a 1 MB/s link (1 s): blocks on slots.
    result = ferry_upload(k.c, b, 0, src.data(), src.size(), nullptr);
    returned = true;
  });
  // Both slots' copies are on the device: the upload has pieces left and waits.
  REQUIRE(eventually([&] { return d.status().get<uint64_t>("held.copies_in_flight") >= 2; }));
  CHECK_FALSE(returned.load());
  d.stop(SIGKILL);
  uploader.join();
  // The connection's end, seen at once: a client that missed it would have
  // waited out FERRY_TIMEOUT_MS (30 s) and returned -ETIMEDOUT instead.
  CHECK(result == -ECONNRESET);
  // A restarted daemon serves new connections.
  Daemon again;
  Conn k2(again.socket);
  CHECK(k2.alloc(16).id != 0);
}

TEST_CASE("an outside C program using only ferry.h and -lferry does every operation", "[upload][example]") {
  Daemon d;
  std::string cmd = std::string(MULTI_UPLOAD_PATH) + " -s " + d.socket + " -p 3 -n 50 -b 70000 > /dev/null";
  CHECK(std::system(cmd.c_str()) == 0);
  CHECK(d.holds_nothing());
}

namespace {
// Runs a command and returns its standard output.
std::string run(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  if (status != nullptr) *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return out;
}
boost::property_tree::ptree parse_json(const std::string& s) {
  boost::property_tree::ptree t;
  std::istringstream in(s);
  boost::property_tree::read_json(in, t);
  return t;
}
}  // namespace

TEST_CASE("ferryctl status, --json and metrics show a client holding k slots as k, and 0 after it exits",
          "[ferryctl][simonly]") {
  // Each command takes 8 s on the simulated engine: three uploads stay in
  // flight while the figures are read (a second was too short under TSan on
  // the loaded 2-core machine: the first copy retired before the metrics).
  Daemon d({"--slot-size", "65536", "--slots", "4"}, {{"FERRY_SIM_LATENCY_US", "8000000"}});
  const std::string ctl = std::string(FERRYCTL_PATH) + " --socket " + d.socket;
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  ferry_buffer b1{}, b2{};
  REQUIRE(ferry_buffer_alloc(c, 4096, &b1) == 0);
  REQUIRE(ferry_buffer_alloc(c, 8192, &b2) == 0);
  uint8_t byte = 1;
  for (int i = 0; i < 3; ++i) REQUIRE(ferry_upload(c, b1, i, &byte, 1, nullptr) == 0);

  // The daemon takes the entries from the ring when it next polls: ask until
  // it has (state, not time), then check every figure of that one reply.
  int rc = -1;
  boost::property_tree::ptree doc;
  for (int tries = 0; tries < 500; ++tries) {
    doc = parse_json(run(ctl + " status --json", &rc));
    if (doc.get<uint64_t>("ring.transfers_in_flight", 0) == 3) break;
  }
  CHECK(rc == 0);
  bool found = false;
  for (const auto& [key, row] : doc.get_child("clients")) {
    (void)key;
    if (row.get<pid_t>("pid") != getpid()) continue;
    found = true;
    CHECK(row.get<uint64_t>("slots") == 4);
    CHECK(row.get<uint64_t>("entries") == 16);
    CHECK(row.get<uint64_t>("transfers_in_flight") == 3);
    CHECK(row.get<uint64_t>("buffers") == 2);
    CHECK(row.get<uint64_t>("device_bytes") == 4096 + 8192);
  }
  CHECK(found);
  CHECK(doc.get<uint64_t>("ring.transfers_in_flight") == 3);
  CHECK(doc.get<uint64_t>("held.buffers") == 2);

  const std::string table = run(ctl + " status", &rc);
  CHECK(rc == 0);
  CHECK(table.find(" 3/16 ") != std::string::npos);

  // Every series carries its device; per-client series only when asked for.
  CHECK(run(ctl + " metrics", &rc).find("ferry_client_") == std::string::npos);
  const std::string metrics = run(ctl + " metrics --per-client", &rc);
  CHECK(rc == 0);
  CHECK(metrics.find("# TYPE ferry_uploads_total counter") != std::string::npos);
  CHECK(metrics.find("ferry_transfers_in_flight{device=\"0\"} 3\n") != std::string::npos);
  CHECK(metrics.find("ferry_buffers{device=\"0\"} 2\n") != std::string::npos);
  const std::string row = "pid=\"" + std::to_string(getpid()) + "\"";
  bool client_line = false;
  std::istringstream lines(metrics);
  for (std::string l; std::getline(lines, l);)
    if (l.rfind("ferry_client_transfers_in_flight{", 0) == 0 && l.find(row) != std::string::npos)
      client_line = l.size() >= 2 && l.substr(l.size() - 2) == " 3";
  CHECK(client_line);
  CHECK(metrics.find("ferry_upload_latency_seconds_bucket{device=\"0\",le=\"+Inf\"}") != std::string::npos);
  CHECK(metrics.find("# TYPE ferry_slot_wait_seconds histogram") != std::string::npos);
  CHECK(metrics.find("ferry_hold_wait_seconds_count{device=\"0\"} 0\n") != std::string::npos);  // nothing held

  ferry_disconnect(c);  // exits holding 3 slots and 2 buffers
  // Its copies retire one by one (8 s each): asked until they have.
  CHECK(eventually(
      [&] {
        auto after = parse_json(run(ctl + " status --json"));
        return after.get<uint64_t>("held.clients") == 0 && after.get<uint64_t>("held.buffers") == 0 &&
               after.get<uint64_t>("ring.transfers_in_flight") == 0 && after.get_child("clients").empty();
      },
      std::chrono::seconds(120)));
  const std::string m2 = run(ctl + " metrics");
  CHECK(m2.find("ferry_clients{device=\"0\"} 0\n") != std::string::npos);
  CHECK(m2.find("ferry_device_memory_bytes{device=\"0\"} 0\n") != std::string::npos);
  CHECK(m2.find("ferry_uploads_total{device=\"0\"} 3\n") != std::string::npos);
}

TEST_CASE("ferryctl exit codes: 3 when it cannot connect, 2 on a usage error", "[ferryctl]") {
  int rc = -1;
  run(std::string(FERRYCTL_PATH) + " --socket /nonexistent/ferry.sock status 2>/dev/null", &rc);
  CHECK(rc == 3);
  run(std::string(FERRYCTL_PATH) + " --bogus 2>/dev/null", &rc);
  CHECK(rc == 2);
  run(std::string(FERRYCTL_PATH) + " frobnicate 2>/dev/null", &rc);
  CHECK(rc == 2);
  std::string help = run(std::string(FERRYCTL_PATH) + " --help", &rc);
  CHECK(rc == 0);
  CHECK(help.find("metrics") != std::string::npos);
}

TEST_CASE("a failed connect says which socket and what to do", "[connect]") {
  const std::string missing = "/tmp/ferry-no-daemon-here.sock";
  ::unlink(missing.c_str());
  ferry_client* c = nullptr;
  CHECK(ferry_connect(missing.c_str(), &c) == -ENXIO);  // apart from -ENOENT, "no such buffer"
  CHECK(c == nullptr);
  CHECK(std::string(ferry_strerror(-ENXIO)) != ferry_strerror(-ENOENT));
  const std::string why = ferry_last_error();
  CHECK(why.find(missing) != std::string::npos);
  CHECK(why.find("is ferryd running") != std::string::npos);
  // A socket file nobody accepts on (a daemon that died and left it).
  const std::string stale = "/tmp/ferry-stale-test.sock";
  ::unlink(stale.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, stale.c_str(), sizeof a.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  ::close(fd);  // bound, never listening
  CHECK(ferry_connect(stale.c_str(), &c) == -ECONNREFUSED);
  CHECK(std::string(ferry_last_error()).find("stopped ferryd") != std::string::npos);
  ::unlink(stale.c_str());
  // A success clears it.
  Daemon d;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  CHECK(std::string(ferry_last_error()).empty());
  CHECK(std::string(ferry_socket_path(c)) == d.socket);  // as resolved
  ::setenv("FERRY_SOCKET", "/tmp/elsewhere.sock", 1);
  CHECK(std::string(ferry_socket_path(nullptr)) == "/tmp/elsewhere.sock");
  ::unsetenv("FERRY_SOCKET");
  ferry_disconnect(c);
}

TEST_CASE("each segment says how many threads its client may stage with (ferryd shares the cores)", "[upload][share]") {
  // Slots of 8 MiB: the 1 MiB uploads below come in pieces under a quarter
  // slot, as a staging thread's 256 KiB pieces do in 4 MiB slots; they count
  // all the same (counting only quarter slots left every producer its whole
  // pool: 4 of them on 16 cores moved 12-21 GB/s instead of 36).
  Daemon d({"--slot-size", "8388608", "--slots", "4"});
  ferry_client *a = nullptr, *b = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &a) == 0);
  REQUIRE(ferry_connect(d.socket.c_str(), &b) == 0);
  ferry_timeline tl{};
  REQUIRE(ferry_get_timeline(a, &tl) == 0);
  const auto* seg = static_cast<const ferry::proto::Segment*>(tl.segment);
  auto becomes = [&](uint32_t n, const std::function<void()>& meanwhile = {}) {
    for (int i = 0; i < 400 && seg->staging_threads.load() != n; ++i) {
      if (meanwhile) meanwhile();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return seg->staging_threads.load() == n;
  };
  // Two clients of one user transferring share a quarter of the cores.
  const uint32_t two = std::max(1u, std::thread::hardware_concurrency() / 8);
  // A client counts once an upload of proto::kThreadedUpload or more is
  // copied; smaller ones do not make it count (they stage with no threads),
  // even in pieces of 256 KiB.
  const uint64_t piece = proto::kThreadedUpload;
  ferry_buffer ba{}, bb{};
  REQUIRE(ferry_buffer_alloc(a, piece, &ba) == 0);
  REQUIRE(ferry_buffer_alloc(b, piece, &bb) == 0);
  const std::vector<uint8_t> bytes(piece, 1);
  auto upload = [&](ferry_client* c, ferry_buffer buf, uint64_t n) {
    ferry_ticket t = 0;
    REQUIRE(ferry_upload(c, buf, 0, bytes.data(), n, &t) == 0);
    REQUIRE(ferry_wait(c, t, -1) == 0);
  };
  auto touch = [&](ferry_client* c, ferry_buffer buf) { upload(c, buf, piece); };
  // Connected but idle clients do not count: alone, a client has its whole pool (0).
  CHECK(becomes(0));
  touch(a, ba);
  CHECK(becomes(0));
  for (int i = 0; i < 20; ++i) upload(b, bb, 1);
  for (int i = 0; i < 20; ++i) upload(b, bb, 768 << 10);  // pieces of 64 + 256 + 256 + 192 KiB
  CHECK(seg->staging_threads.load() == 0);  // stored before those copies were issued, had b counted
  touch(b, bb);
  CHECK(becomes(two));
  // b falls idle (within a second) while a goes on: a has its pool again.
  CHECK(becomes(0, [&] { touch(a, ba); }));
  touch(b, bb);
  CHECK(becomes(two));
  ferry_disconnect(b);
  CHECK(becomes(0));
  // A large upload still stages and lands whole with the pool shared out.
  ferry_buffer buf{};
  const uint64_t n = 8u << 20;
  REQUIRE(ferry_buffer_alloc(a, n, &buf) == 0);
  std::vector<uint8_t> src = pattern(n, 3), back(n);
  REQUIRE(ferry_upload(a, buf, 0, src.data(), n, nullptr) == 0);
  REQUIRE(ferry_download(a, buf, 0, back.data(), n) == 0);
  CHECK(back == src);
  ferry_disconnect(a);
}
