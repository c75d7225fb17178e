// SPDX-License-Identifier: MIT
// The submission ring: every transfer published in the segment, every
// outcome read there (Result records), the Doorbell only while the poller
// sleeps, and a ring a client fills with nonsense ending only its own session.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <random>
#include <thread>

#include "daemon_fixture.hpp"

using namespace ferry::test;
namespace proto = ferry::proto;

namespace {

// A raw client that asked for the ring, with one 64 KiB buffer.
struct RingClient : RawClient {
  explicit RingClient(const std::string& socket) : RawClient(socket) {
    hello("ring");
    REQUIRE(welcome.ring_offset >= sizeof(proto::Segment));
    REQUIRE(welcome.ring_entries == proto::ring_entries(welcome.slot_count));
    REQUIRE(welcome.results_offset >= welcome.ring_offset + welcome.ring_entries * sizeof(proto::SubmitEntry));
    REQUIRE(welcome.results_offset + welcome.ring_entries * sizeof(proto::Result) <= welcome.slots_offset);
    buffer = alloc(64 * 1024);
  }
  uint64_t completed() { return header()->completed.load(std::memory_order_acquire); }
  // No message of any kind waiting on the socket now.
  bool quiet() {
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  uint64_t buffer = 0;
};

// The session ended with a fatal error whose text names `what`.
void closed_for(RawClient& r, const std::string& what) {
  proto::Error e{};
  REQUIRE(r.expect(proto::Type::error, &e));
  CHECK((e.h.flags & proto::kErrorFatal) != 0);
  CHECK(e.code == -EPROTO);
  INFO(e.text);
  CHECK(std::string(e.text).find(what) != std::string::npos);
  CHECK(r.closed_by_peer());
}

}  // namespace

TEST_CASE("ring: uploads and downloads go through the segment, completions are read there, not sent", "[ring]") {
  Daemon d;
  RingClient r(d.socket);
  const uint32_t n = r.welcome.slot_count * 3;  // three times round the ring
  for (uint64_t t = 1; t <= n; t += 2) {
    // Upload 4 KiB of a pattern of t, then download it into the next slot.
    REQUIRE(eventually([&] { return r.completed() + r.welcome.slot_count >= t + 1; }));
    std::memset(r.slot(static_cast<uint32_t>((t - 1) % r.welcome.slot_count)), static_cast<int>(t), 4096);
    r.publish(t, proto::Type::upload, 4096, r.buffer, t * 64);
    r.publish(t + 1, proto::Type::download, 4096, r.buffer, t * 64);
    REQUIRE(eventually([&] { return r.completed() >= t + 1; }));
    const char* back = r.slot(static_cast<uint32_t>(t % r.welcome.slot_count));
    CHECK(std::count(back, back + 4096, static_cast<char>(t)) == 4096);
  }
  CHECK(r.header()->failures.load() == 0);
  // Every copy succeeded: nothing was said on the socket.
  CHECK(r.quiet());
}

TEST_CASE("ring: a failed ticket's outcome is its Result record, not a message; the session goes on", "[ring]") {
  Daemon d;
  RingClient r(d.socket);
  r.publish(1, proto::Type::upload, 4096, 999, 0);  // no such buffer
  CHECK(r.outcome(1) == -ENOENT);
  CHECK(r.header()->failures.load() == 1);
  r.publish(2, proto::Type::upload, 4096, r.buffer, 0);
  CHECK(r.outcome(2) == 0);
  CHECK(r.header()->failures.load() == 1);
  // Round the ring: ticket 1's record is overwritten only by a failure of
  // ticket 1 + ring_entries, and tells its ticket.
  const uint64_t n = r.welcome.ring_entries;
  for (uint64_t t = 3; t <= n; ++t) r.publish(t, proto::Type::upload, 4096, r.buffer, 0);
  REQUIRE(r.outcome(n) == 0);
  r.publish(n + 1, proto::Type::upload, 4096, r.buffer, 1 << 20);  // past the buffer's end
  CHECK(r.outcome(n + 1) == -EINVAL);
  CHECK(r.header()->failures.load() == 2);
  CHECK(r.quiet());  // nothing was said on the socket
}

TEST_CASE("ring: an upload to buffer 0 (a cancelled reservation) completes with nothing copied", "[ring]") {
  Daemon d;
  RingClient r(d.socket);
  r.publish(1, proto::Type::upload, 4096, proto::kNoBuffer, 0);
  CHECK(r.outcome(1) == 0);
  CHECK(r.header()->failures.load() == 0);
  r.publish(2, proto::Type::download, 4096, proto::kNoBuffer, 0);  // a download from it is still an error
  CHECK(r.outcome(2) == -ENOENT);
  CHECK(d.status().get<uint64_t>("totals.failed") == 1);
}

TEST_CASE("ring: the doorbell is asked for only while the poller sleeps", "[ring]") {
  SECTION("a poller that never polls wants the doorbell for every entry") {
    Daemon d({"--poll-idle-us", "0"});
    RingClient r(d.socket);
    CHECK(r.header()->doorbell.load() == 1);
    r.publish(1, proto::Type::upload, 4096, r.buffer, 0, 0, false);
    // Published without ringing: nobody looks (another connection's request,
    // handled after this one's publish, does not either).
    CHECK(d.status().get<uint64_t>("poller.ring_entries") == 0);
    CHECK(r.completed() == 0);
    REQUIRE(r.ring());
    REQUIRE(eventually([&] { return r.completed() >= 1; }));
    // A Doorbell message (protocol 5's) is no message now: it ends the session.
    struct {
      proto::Header h;
      uint64_t reserved;
    } old{{static_cast<uint16_t>(proto::Type::doorbell), 0, 16}, 0};
    r.send(old);
    closed_for(r, "not a message type");
  }
  SECTION("an awake poller takes entries without any message, and sleeps again when idle") {
    Daemon d({"--poll-idle-us", "300000"});
    RingClient r(d.socket);
    // The Alloc woke it (its reply may come just before the poller clears
    // the flag). An entry published while the flag is clear needs no
    // message however long the poller then takes to look: it looks at
    // every ring once more after it sets the flag, before it sleeps.
    REQUIRE(eventually([&] { return r.header()->doorbell.load() == 0; }));
    r.publish(1, proto::Type::upload, 4096, r.buffer, 0, 0, false);
    REQUIRE(eventually([&] { return r.completed() >= 1; }));
    // Idle: it sleeps, and says so to the rings.
    REQUIRE(eventually([&] { return r.header()->doorbell.load() == 1; }));
    r.publish(2, proto::Type::upload, 4096, r.buffer, 0);  // rings the bell
    REQUIRE(eventually([&] { return r.completed() >= 2; }));
  }
}

TEST_CASE("ring: a bad entry closes only its own session", "[ring][badinput]") {
  Daemon d({"--max-clients", "8"});
  Witness w(d.socket);  // a well-behaved client, uploading and checking all along
  RingClient r(d.socket);
  SECTION("a type that is no transfer") {
    r.publish(1, proto::Type::alloc, 4096, r.buffer, 0);
    closed_for(r, "no transfer");
  }
  SECTION("a length past the slot") {
    r.publish(1, proto::Type::upload, r.welcome.slot_bytes + 1, r.buffer, 0);
    closed_for(r, "length");
  }
  SECTION("bytes past the staging area's end") {
    const uint64_t area = uint64_t{r.welcome.slot_count} * r.welcome.slot_bytes;
    // One slot's worth, but only 64 bytes are left.
    r.publish_word(1, static_cast<uint64_t>(proto::Type::upload) | (area - 64) / proto::kStagingAlign << 32, 4096,
                   r.buffer, 0);
    closed_for(r, "staging area");
  }
  SECTION("a staging offset far past the segment") {
    r.publish_word(1, static_cast<uint64_t>(proto::Type::download) | uint64_t{UINT32_MAX} << 32, 64, r.buffer, 0);
    closed_for(r, "staging area");
  }
  SECTION("flags that do not exist") {
    r.publish_word(1, static_cast<uint64_t>(proto::Type::upload) | uint64_t{0x8000} << 16, 64, r.buffer, 0);
    closed_for(r, "flags");
  }
  SECTION("a zero length") {
    r.publish(1, proto::Type::upload, 0, r.buffer, 0);
    closed_for(r, "length");
  }
  SECTION("upload_after with no value") {
    r.publish(1, proto::Type::upload_after, 4096, r.buffer, 0, 0);
    closed_for(r, "no value");
  }
  SECTION("an event index past 32 bits") {
    r.publish_word(1, static_cast<uint64_t>(proto::Type::upload_signal), 4096, r.buffer, 0, 0, 1, uint64_t{1} << 40);
    closed_for(r, "32 bits");
  }
  SECTION("a ticket past the window (the first one held, the ring published all round)") {
    const uint32_t n = r.welcome.ring_entries;
    r.publish(1, proto::Type::upload_after, 4096, r.buffer, 0, ~uint64_t{0});  // held: app_value never gets there
    for (uint64_t t = 2; t <= n; ++t) r.publish(t, proto::Type::upload, 4096, r.buffer, 0);
    // Any request makes the daemon take the ring first: after this reply
    // entry 1 is taken and may be rewritten (as ticket n + 1).
    r.alloc(4096);
    r.publish(n + 1, proto::Type::upload, 4096, r.buffer, 0);
    closed_for(r, "window");
  }
  SECTION("a transfer as a message (protocol 2's Upload)") {
    struct {
      proto::Header h;
      uint64_t words[5];
    } old{{static_cast<uint16_t>(proto::Type::upload), 0, 48}, {1, 0, 4096, r.buffer, 0}};
    r.send(old);
    closed_for(r, "submission ring");
  }
  SECTION("entries that skip a ticket are not taken, and the next message does not take them either") {
    r.publish(2, proto::Type::upload, 4096, r.buffer, 0);
    REQUIRE(r.ring());
    CHECK(r.alloc(4096) != 0);  // the session is fine: ticket 1 has not come yet
    CHECK(r.completed() == 0);
    r.publish(1, proto::Type::upload, 4096, r.buffer, 0);
    REQUIRE(eventually([&] { return r.completed() >= 2; }));
  }
  CHECK(w.finish() >= 3);
  // The daemon took no harm: a new client with a ring works.
  RingClient again(d.socket);
  again.publish(1, proto::Type::upload, 4096, again.buffer, 0);
  REQUIRE(eventually([&] { return again.completed() >= 1; }));
}

TEST_CASE("ring: fenced entries wait for the fence, publish into it, and fail only their own ticket", "[ring][fence]") {
  Daemon d;
  RawClient r(d.socket);
  r.hello("ring");
  CHECK(r.welcome.flags == proto::kDeviceTimeline);  // the simulated device writes timelines, and nothing else is a flag
  REQUIRE(r.welcome.fences_offset >= r.welcome.results_offset + r.welcome.ring_entries * sizeof(proto::Result));
  REQUIRE(r.welcome.fences_offset + proto::kFencesBytes <= r.welcome.slots_offset);
  const uint64_t buf = r.alloc(8192);
  REQUIRE(r.last_fence != 0);
  proto::Fence* f = r.fence(r.last_fence);
  auto completed = [&] { return r.header()->completed.load(std::memory_order_acquire); };
  const uint64_t fenced = static_cast<uint64_t>(proto::Type::upload_fenced);
  // Held until the fence is released at 3; then the device publishes 9.
  r.publish_word(1, fenced | uint64_t{r.staging_of(1)} << 32, 4096, buf, 0, 0, 3, 9);
  f->released.store(2);
  r.alloc(64);  // the daemon took the entry before it answered
  CHECK(completed() == 0);
  CHECK(f->ready.load() == 0);
  f->released.store(3);
  REQUIRE(eventually([&] { return completed() >= 1; }));
  CHECK(f->ready.load() == 9);
  CHECK(f->failed.load() == 0);
  // No such buffer: the ticket fails, no fence to publish into.
  r.publish_word(2, fenced | uint64_t{r.staging_of(2)} << 32, 4096, 999, 0, 0, 0, 10);
  CHECK(r.outcome(2) == -ENOENT);
  // Past the buffer's end: the ticket fails and the fence still moves, marked failed.
  r.publish_word(3, fenced | uint64_t{r.staging_of(3)} << 32, 4096, buf, 8000, 0, 0, 11);
  CHECK(r.outcome(3) == -EINVAL);
  REQUIRE(eventually([&] { return f->ready.load() == 11; }));
  CHECK(f->failed.load() == 11);
  // The session goes on.
  r.publish(4, proto::Type::upload, 4096, buf, 0);
  REQUIRE(eventually([&] { return completed() >= 4; }));
}

TEST_CASE("ring: a client rewriting its whole ring at random ends only its own session", "[ring][badinput]") {
  Daemon d({"--max-clients", "8"});
  Witness w(d.socket);
  for (int round = 0; round < 5; ++round) {
    RingClient r(d.socket);
    std::mt19937_64 rng(static_cast<uint64_t>(round) * 7919 + 1);
    auto* words = reinterpret_cast<std::atomic<uint64_t>*>(&r.entry(1));
    const size_t count = r.welcome.ring_entries * sizeof(proto::SubmitEntry) / 8;
    // Random words, with tickets that are sometimes the expected ones.
    for (int i = 0; i < 20000; ++i) {
      const size_t k = rng() % count;
      uint64_t v = rng();
      if (k % 8 == 0 && (v & 1)) v = 1 + (v >> 1) % 4;
      if (k % 8 == 1 && (v & 1)) v = static_cast<uint64_t>(proto::Type::upload) + (v >> 1) % 2;
      words[k].store(v, std::memory_order_release);
      // The session may be gone, and its doorbell with it (EPIPE, no signal).
      if (i % 1000 == 0) [[maybe_unused]] auto n = ::send(r.bell, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
  }
  CHECK(w.finish() >= 3);
  int st = 0;
  CHECK(waitpid(d.pid, &st, WNOHANG) == 0);  // still running
}

TEST_CASE("a flood of doorbells: the ring is served meanwhile, and requests are answered", "[ring][flood]") {
  // A client that rings without pause (another thread), its end made
  // blocking, costs ferryd a wake-up per read of the doorbell at most, and
  // nothing else: its uploads and its requests go through meanwhile, and
  // another client's too. Closing its end ends its doorbell, not ferryd's loop.
  Daemon d({"--poll-idle-us", "0"});
  RingClient r(d.socket);
  RingClient other(d.socket);
  std::atomic<bool> stop{false};
  REQUIRE(::fcntl(r.bell, F_SETFL, 0) == 0);  // blocking: ferryd's end is another open file
  std::thread ringer([&] {
    const char one = 1;
    while (!stop.load()) [[maybe_unused]] auto n = ::send(r.bell, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  });
  for (uint64_t t = 1; t <= 8; ++t) {
    r.publish(t, proto::Type::upload, 4096, r.buffer, 0, 0, false);
    other.publish(t, proto::Type::upload, 4096, other.buffer, 0);
  }
  REQUIRE(eventually([&] { return r.completed() >= 8 && other.completed() >= 8; }));
  CHECK(r.alloc(4096) != 0);
  CHECK(other.alloc(4096) != 0);
  stop = true;
  ringer.join();
  CHECK(d.status().get<uint64_t>("poller.doorbells") >= 1);
  // Its end closed: ferryd stops listening (it does not wake for the end of
  // file again and again), and both sessions still work.
  ::close(r.bell);
  r.bell = -1;
  CHECK(r.alloc(4096) != 0);
  const uint64_t rung = d.status().get<uint64_t>("poller.doorbells");
  CHECK(other.alloc(4096) != 0);
  // What it sent before closing may still be read once, after a pause its
  // rings in vain earned; the end of file wakes ferryd no more (a loop on it
  // would count thousands).
  CHECK(d.status().get<uint64_t>("poller.doorbells") <= rung + 1);
}

TEST_CASE("a doorbell fed megabytes: ferryd drains it per wake-up and pauses for a client that rings in vain",
          "[ring][flood]") {
  // A client may raise its end's send buffer and send 64 KiB at a time,
  // blocking: ferryd read 256 bytes per wake-up (a core of ferryd for a
  // tenth of the client's). Now a wake-up takes everything queued, and rings
  // that bring no entry make the listening pause: the wake-ups per byte are
  // bounded, and another client is served all along.
  Daemon d({"--poll-idle-us", "0"});
  RingClient r(d.socket);
  RingClient other(d.socket);
  REQUIRE(::fcntl(r.bell, F_SETFL, 0) == 0);
  const int big = 8 << 20;
  ::setsockopt(r.bell, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);  // as far as net.core.wmem_max allows
  const uint64_t total = 32ull << 20;
  std::thread ringer([&] {
    std::vector<char> chunk(64 * 1024, 1);
    for (uint64_t sent = 0; sent < total;) {
      const ssize_t n = ::send(r.bell, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<uint64_t>(n);
    }
  });
  for (uint64_t t = 1; t <= 8; ++t) other.publish(t, proto::Type::upload, 4096, other.buffer, 0);
  REQUIRE(eventually([&] { return other.completed() >= 8; }, std::chrono::seconds(30)));
  ringer.join();
  // 256 bytes a wake-up would be 131072 wake-ups for these 32 MiB.
  const uint64_t wakes = d.status().get<uint64_t>("poller.doorbells");
  CHECK(wakes <= total / 4096);
  // The ringer's own entries are still heard (after a pause at most).
  r.publish(1, proto::Type::upload, 4096, r.buffer, 0);
  CHECK(eventually([&] { return r.completed() >= 1; }));
}

// The row of client `r` in ferryd's status.
boost::property_tree::ptree row_of(Daemon& d, RingClient& r) {
  const auto st = d.status();
  for (const auto& [k, c] : st.get_child("clients"))
    if (c.get<uint64_t>("id") == r.welcome.client_id) return c;
  FAIL("no status row for the client");
  return {};
}

TEST_CASE("a client whose entries the poller took first is not paused for its rings", "[ring][flood]") {
  // An honest client rings after it published, when ferryd's poller said it
  // sleeps; another client's socket traffic may wake the poller first, and
  // it takes the entry: the ring then finds nothing new. That is progress
  // of the ring all the same, and must never pause the client's doorbell
  // (it did: 49 ms a ring once paused). A ring with nothing published since
  // the last one still counts as in vain.
  Daemon d;
  RingClient r(d.socket);
  RingClient other(d.socket);
  for (uint64_t t = 1; t <= 12; ++t) {
    r.publish(t, proto::Type::upload, 4096, r.buffer, 0, 0, false);  // published, not rung yet
    // Another client's request wakes the poller, which takes the entry.
    REQUIRE(eventually([&] {
      other.alloc(4096);
      return r.completed() >= t;
    }));
    const uint64_t rung = d.status().get<uint64_t>("poller.doorbells");
    REQUIRE(r.ring());
    REQUIRE(eventually([&] { return d.status().get<uint64_t>("poller.doorbells") > rung; }));
    CHECK(row_of(d, r).get<uint32_t>("doorbell_idle_rings") == 0);
  }
  // Rings with nothing published since: in vain, counted (then paused).
  for (int i = 1; i <= 3; ++i) {
    const uint64_t rung = d.status().get<uint64_t>("poller.doorbells");
    REQUIRE(r.ring());
    REQUIRE(eventually([&] { return d.status().get<uint64_t>("poller.doorbells") > rung; }));
    CHECK(row_of(d, r).get<uint32_t>("doorbell_idle_rings") == uint32_t(i));
  }
}

TEST_CASE("wake_at: ferryd wakes a sleeping client only once completed reaches what it waits for", "[ring][wake]") {
  Daemon d;
  RingClient r(d.socket);
  proto::Segment* h = r.header();
  CHECK(h->wake_at.load() == UINT64_MAX);  // nobody waits yet
  // A sleeper that waits for ticket 5 (as libferry's would, before its futex wait).
  h->sleepers.store(1);
  h->wake_at.store(5);
  const uint32_t before = h->wake.load();
  for (uint64_t t = 1; t <= 3; ++t) r.publish(t, proto::Type::upload, 4096, r.buffer, 0);
  REQUIRE(eventually([&] { return r.completed() >= 3; }));
  r.alloc(4096);  // a round trip: anything ferryd would publish for ticket 3 is out
  CHECK(h->wake.load() == before);  // 3 < 5: not woken
  CHECK(h->wake_at.load() == 5);
  for (uint64_t t = 4; t <= 5; ++t) r.publish(t, proto::Type::upload, 4096, r.buffer, 0);
  REQUIRE(eventually([&] { return h->wake.load() != before; }));
  CHECK(r.completed() >= 5);
  CHECK(h->wake_at.load() == UINT64_MAX);  // taken: the next sleeper sets its own
  h->sleepers.store(0);
}

TEST_CASE("ring: a held entry that fails while the ring waits for room, then the waiting entry rewritten into a hold",
          "[ring][badinput]") {
  // Copies take 0.3 s: two large uploads fill both slots' worth of large
  // transfers. A poller that never polls reads the ring only when rung, or
  // when a settled ticket lets a waiting entry go: the rewrite below is seen
  // exactly there, inside the release of the hold.
  Daemon d({"--slots", "2", "--slot-size", "65536", "--poll-idle-us", "0"}, {{"FERRY_SIM_LATENCY_US", "300000"}});
  RingClient r(d.socket);
  const uint64_t large = r.welcome.slot_bytes;
  r.publish(1, proto::Type::upload, large, r.buffer, 0);
  r.publish(2, proto::Type::upload, large, r.buffer, 0);
  r.publish(3, proto::Type::upload_after, 64, 999, 0, 1);  // held (app_value 0), then fails: no such buffer
  r.publish(4, proto::Type::upload, large, r.buffer, 0);   // waits in the ring: no room for a third large one
  r.alloc(64);  // the ring was read before the reply
  // Rewritten, still ticket 4: now a small hold on a value that comes late.
  r.publish(4, proto::Type::upload_after, 64, r.buffer, 0, 1000, false);
  r.header()->app_value.store(1);  // releases ticket 3, whose failure lets the ring go on
  CHECK(r.outcome(3) == -ENOENT);
  r.header()->app_value.store(1000);
  CHECK(r.outcome(4) == 0);
  int st = 0;
  CHECK(waitpid(d.pid, &st, WNOHANG) == 0);  // still running
  RingClient again(d.socket);
  again.publish(1, proto::Type::upload, 4096, again.buffer, 0);
  CHECK(again.outcome(1) == 0);
}

TEST_CASE("ring: an entry waiting for room when its client leaves is still sent; what it publishes later is not",
          "[ring][disconnect]") {
  // Copies take 0.3 s: two large uploads fill both slots' worth of large
  // transfers, and the third waits in the ring when the session closes. It
  // goes once one of them retires (a producer's last upload, which a
  // consumer may wait for); an entry published after the close never does.
  Daemon d({"--slots", "2", "--slot-size", "65536", "--poll-idle-us", "0"}, {{"FERRY_SIM_LATENCY_US", "300000"}});
  RingClient r(d.socket);
  const uint64_t large = r.welcome.slot_bytes;
  for (uint64_t t = 1; t <= 3; ++t) r.publish(t, proto::Type::upload, large, r.buffer, 0);
  r.alloc(64);  // the ring was read before the reply: ticket 3 waits for room
  REQUIRE(r.completed() < 3);
  ::shutdown(r.fd, SHUT_RDWR);
  REQUIRE(eventually([&] {
    const auto s = status(d.socket);
    return s.get_child("clients").empty();  // the session is gone; its state lives on
  }));
  r.publish(4, proto::Type::upload, 64, r.buffer, 0, 0, false);  // no doorbell: nobody listens
  REQUIRE(eventually([&] { return status(d.socket).get<uint64_t>("held.clients") == 0; }, std::chrono::seconds(10)));
  CHECK(r.completed() == 3);
  CHECK(r.outcome(3) == 0);
}
