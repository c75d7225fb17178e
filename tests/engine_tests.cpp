// SPDX-License-Identifier: MIT
// The slot lifecycle and the transfer engine: on a device the test drives
// (FakeDevice: nothing completes until the test says so), and on the real
// Level Zero backend over the simulated device.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "device/backend.hpp"
#include "engine/engine.hpp"
#include "engine/idle.hpp"
#include "device/mps.hpp"
#include "engine/segment_pool.hpp"

using namespace ferry::ferryd;
namespace proto = ferry::proto;

namespace {
// A device whose copies run only when the test says (run()): then it copies,
// writes the words each submission asked for, and, if the engine lent it a
// wait (arm), writes the engine's eventfd, as the backends' waiter does.
class FakeDevice final : public Backend {
 public:
  FakeDevice() {
    info_.backend = "fake";
    info_.name = "a device the test drives";
    info_.memory_bytes = 1 << 30;
    info_.host_import = true;
    info_.device_writes = true;
  }
  const DeviceInfo& info() const override { return info_; }
  int alloc(uint64_t bytes, void** out) override { return (*out = std::calloc(1, bytes)) != nullptr ? 0 : -ENOMEM; }
  void free(void* p) override { std::free(p); }
  int register_host(void*, uint64_t, uint64_t* device) override {
    *device = 0;
    return 0;
  }
  void unregister_host(void*) override {}
  int submit(void* dst, const void* src, uint64_t bytes, uint64_t cookie, const Signal*,
             const DeviceWrites* w) override {
    queued.push_back({cookie, dst, src, bytes, w != nullptr ? *w : DeviceWrites{}});
    return 0;
  }
  int export_buffer(void*, IpcHandle*) override { return -ENOTSUP; }
  int import_buffer(const IpcHandle&, uint64_t, void**, uint64_t*) override { return -ENOTSUP; }
  void release_import(void*) override {}
  int open_event_pool(const IpcHandle&, uint32_t, uint64_t*) override { return -ENOTSUP; }
  void close_event_pool(uint64_t) override {}
  bool lost() override { return false; }
  size_t reap(std::vector<Done>& out) override {
    out.insert(out.end(), finished.begin(), finished.end());
    const size_t n = finished.size();
    finished.clear();
    return n;
  }
  bool arm(int efd) override {
    if (queued.empty()) return false;
    ++arms;
    lent = efd;
    return true;
  }
  // Runs the n oldest queued submissions with `status` as their outcome.
  void run(size_t n, int status = 0) {
    for (; n != 0 && !queued.empty(); --n) {
      Op op = queued.front();
      queued.pop_front();
      if (status == 0) {
        if (op.bytes != 0) std::memcpy(op.dst, op.src, op.bytes);
        for (size_t i = 0; i < op.writes.n; ++i) *op.writes.w[i].word = op.writes.w[i].value;
      }
      finished.push_back({op.cookie, status});
    }
    if (lent >= 0) {
      const uint64_t one = 1;
      REQUIRE(::write(lent, &one, sizeof one) == static_cast<ssize_t>(sizeof one));
      lent = -1;
    }
  }
  struct Op {
    uint64_t cookie;
    void* dst;
    const void* src;
    uint64_t bytes;
    DeviceWrites writes;
  };
  std::deque<Op> queued;
  std::vector<Done> finished;
  int lent = -1;  // the eventfd of the wait lent, until run() writes it
  size_t arms = 0;

 private:
  DeviceInfo info_;
};

std::unique_ptr<Backend> backend() {
  std::string why;
  auto b = make_level_zero_backend(0, why);
  INFO(why);
  REQUIRE(b);
  return b;
}
}  // namespace

TEST_CASE("the backend reports the simulated device with a copy engine and host import", "[engine]") {
  auto b = backend();
  CHECK(b->info().backend == "level-zero");
  CHECK(b->info().copy_engine);
  CHECK(b->info().host_import);
  CHECK(b->info().name.find("simulated") != std::string::npos);
}

TEST_CASE("tickets: the window, the staging range and no double use", "[engine][slots]") {
  ClientState c(1);
  REQUIRE(c.create_segment(4, 4096) == 0);  // 16 KiB of staging, 16 tickets in flight
  const uint32_t n = proto::ring_entries(4);
  REQUIRE(c.ring_entries() == n);
  const uint64_t last = 4 * 4096 - 64;  // the staging area's last 64 bytes
  CHECK(c.check_transfer(0, 0, 64) != nullptr);      // tickets start at 1
  CHECK(c.check_transfer(1, 0, 64) == nullptr);
  CHECK(c.check_transfer(1, last, 64) == nullptr);   // anywhere in the area
  CHECK(c.check_transfer(1, last, 65) != nullptr);   // past its end
  CHECK(c.check_transfer(1, last + proto::kStagingAlign, 1) != nullptr);
  CHECK(c.check_transfer(1, uint64_t{UINT32_MAX} * proto::kStagingAlign, 64) != nullptr);  // the farthest an entry says
  CHECK(c.check_transfer(1, 0, 0) != nullptr);       // empty
  CHECK(c.check_transfer(1, 0, 4097) != nullptr);    // more than one slot
  CHECK(c.check_transfer(n, 0, 64) == nullptr);
  CHECK(c.check_transfer(n + 1, 0, 64) != nullptr);  // beyond the window: ticket 1 not yet done
  c.window().start(1, 10);
  CHECK(c.check_transfer(1, 0, 64) != nullptr);      // already in flight
  CHECK(c.in_flight() == 1);
  CHECK(c.in_flight_bytes() == 10);
  Failed f;
  CHECK(c.window().finish(1, 10, 0, f).moved);
  CHECK(c.completed() == 1);
  CHECK(c.check_transfer(1, 0, 64) != nullptr);      // done: behind the window now
  CHECK(c.check_transfer(n + 1, 0, 64) == nullptr);  // its entry is free again
}

TEST_CASE("completion moves only over a contiguous run; failures come in ticket order", "[engine][slots]") {
  ClientState c(1);
  REQUIRE(c.create_segment(8, 4096) == 0);
  for (uint64_t t = 1; t <= 4; ++t) c.window().start(t, 1);
  Failed f;
  CHECK_FALSE(c.window().finish(3, 1, -EIO, f).moved);
  CHECK_FALSE(c.window().finish(2, 1, 0, f).moved);
  CHECK(c.completed() == 0);
  CHECK(f.empty());
  CHECK(c.window().finish(1, 1, 0, f).moved);
  CHECK(c.completed() == 3);
  REQUIRE(f.size() == 1);
  CHECK(f[0] == std::make_pair(uint64_t{3}, -EIO));
  // The engine records each in the segment, where the client reads it.
  c.record_failure(f[0].first, f[0].second);
  CHECK(c.stats().errors == 1);
  const proto::Result& r = c.segment().results()[(3 - 1) % c.ring_entries()];
  CHECK(r.ticket.load() == 3);
  CHECK(r.error.load() == -EIO);
  CHECK(c.segment().header()->failures.load() == 1);
  f.clear();
  CHECK(c.window().finish(4, 1, 0, f).moved);
  CHECK(c.completed() == 4);
  CHECK(f.empty());
  CHECK(c.in_flight() == 0);
}

TEST_CASE("the idle policy: the poller's ladder, the holds' timer, a doorbell rung in vain", "[engine][idle]") {
  using P = IdlePolicy;
  using std::chrono::microseconds, std::chrono::milliseconds;
  int asked = 0;
  auto near = [&] { return ++asked, true; };
  auto far = [] { return false; };
  CHECK(P::rest(microseconds(1), 0, near, 4) == P::Rest::relax);
  CHECK(asked == 0);  // not asked before it decides
  CHECK(P::rest(microseconds(6), 0, far, 4) == P::Rest::yield);
  CHECK(P::rest(microseconds(6), 0, near, 4) == P::Rest::hold_nap);
  CHECK(P::rest(microseconds(1), 4, far, 4) == P::Rest::nap);  // copies queued: nap at once
  CHECK(P::rest(microseconds(6), 4, far, 0) == P::Rest::yield);  // --poll-nap-us 0: never
  CHECK(P::nap(4, 4) == microseconds(16));
  CHECK(P::nap(1000, 4) == P::kMaxNap);
  CHECK(P::hold_poll(microseconds(0)) == P::kHoldPollMin);
  CHECK(P::hold_poll(milliseconds(160)) == milliseconds(10));
  CHECK(P::hold_poll(std::chrono::seconds(10)) == P::kHoldPollMax);
  std::vector<int64_t> pauses;
  for (uint32_t rings = 0; rings <= 12; ++rings) pauses.push_back(P::doorbell_pause(rings).count());
  CHECK(pauses == std::vector<int64_t>{0, 0, 0, 0, 0, 1, 2, 4, 8, 16, 32, 64, 64});
}

TEST_CASE("a segment keeps where the device sees it when it moves (pool -> client)", "[engine]") {
  StagingSegment a;
  REQUIRE(a.create(2, 4096) == 0);
  a.set_device_base(0x7000000);
  const auto* word = &a.header()->device_completed;
  const uint64_t at = reinterpret_cast<uintptr_t>(word) - reinterpret_cast<uintptr_t>(a.header());
  CHECK(a.device_address(word) == 0x7000000 + at);
  StagingSegment b(std::move(a));
  CHECK(b.device_address(word) == 0x7000000 + at);
  StagingSegment c;
  c = std::move(b);
  CHECK(c.device_address(word) == 0x7000000 + at);
  CHECK(c.device_address(reinterpret_cast<const char*>(c.header()) + c.bytes()) == 0);  // outside
  c.set_device_base(0);
  CHECK(c.device_address(word) == 0);  // the device has no address of its own for it
}

TEST_CASE("large transfers: at most slot_count in flight, small ones not counted", "[engine][slots]") {
  ClientState c(1);
  REQUIRE(c.create_segment(2, 4096) == 0);
  CHECK_FALSE(proto::is_large(1023, 4096));
  CHECK(proto::is_large(1024, 4096));  // a quarter slot
  c.window().start(1, 4096);
  c.window().start(2, 64);
  CHECK(c.window().room_for(1024));
  c.window().start(3, 1024);
  CHECK_FALSE(c.window().room_for(1024));  // two large in flight with two slots
  c.window().unstart(3, 1024);  // the device refused it after all
  CHECK(c.window().room_for(1024));
  c.window().start(3, 2048);
  Failed f;
  c.window().set_waiting(true);  // the ring's next entry waits for room
  CHECK(c.window().finish(1, 4096, 0, f).room);  // a large one left: the ring is drained again
  CHECK(c.window().room_for(1024));
  CHECK(c.window().room_for(64));  // small ones never wait
  CHECK_FALSE(c.window().finish(2, 64, 0, f).room);  // a small one frees no room
}

TEST_CASE("an export charges once, and an export whose handle could not be sent charges nothing", "[engine][quota]") {
  boost::asio::io_context io;
  TransferEngine eng(io, backend());
  Limits limits;
  limits.user_memory = 1 << 20;
  eng.resources().set_limits(limits);
  ClientRef c;
  REQUIRE(eng.clients().add_client(4, 4096, &c) == 0);
  c->uid = 4242;
  uint64_t id = 0;
  REQUIRE(eng.resources().alloc(*c, 65536, &id) == 0);
  IpcHandle h;
  uint64_t bytes = 0;
  bool first = false;
  Resources::ExportCharge charge;
  REQUIRE(eng.resources().export_buffer(*c, id, &h, &bytes, &first, &charge) == 0);
  CHECK(first);
  CHECK(bytes == 65536);
  CHECK(eng.resources().usage(4242).exported_bytes == 65536);
  // ferryd had no descriptor left for the reply: the handle never left, nor does the charge stay.
  eng.resources().export_unsent(charge);
  CHECK(eng.resources().usage(4242).exported_bytes == 0);
  CHECK(eng.resources().exporters().empty());  // nor the user's row
  REQUIRE(eng.resources().export_buffer(*c, id, &h, &bytes, &first) == 0);
  CHECK(first);  // sent this time: charged
  REQUIRE(eng.resources().export_buffer(*c, id, &h, &bytes, &first) == 0);
  CHECK_FALSE(first);  // again: charged once
  CHECK(eng.resources().usage(4242).exported_bytes == 65536);
  REQUIRE(eng.resources().free(*c, id) == 0);
  CHECK(eng.resources().usage(4242).exported_bytes == 65536);  // kept until ferryd restarts
  CHECK(eng.resources().usage(4242).exports_kept_bytes == 65536);
  // A reply dropped after its buffer was freed (kept by then): no charge stays either.
  REQUIRE(eng.resources().alloc(*c, 4096, &id) == 0);
  REQUIRE(eng.resources().export_buffer(*c, id, &h, &bytes, &first, &charge) == 0);
  REQUIRE(eng.resources().free(*c, id) == 0);
  CHECK(eng.resources().usage(4242).exports_kept_bytes == 65536 + 4096);
  eng.resources().export_unsent(charge);
  CHECK(eng.resources().usage(4242).exported_bytes == 65536);
  CHECK(eng.resources().usage(4242).exports_kept_bytes == 65536);
}

TEST_CASE("the engine copies a slot to a buffer and back, and frees memory with the last reference", "[engine]") {
  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);  // run_one() waits for the device's eventfd
  {
    TransferEngine eng(io, backend());
    Limits limits;
    limits.user_memory = 8192;
    eng.resources().set_limits(limits);
    const uint64_t buffers_before = eng.resources().holdings().buffers;
    ClientRef c;
    REQUIRE(eng.clients().add_client(4, 4096, &c) == 0);
    c->uid = 4242;
    uint64_t id = 0;
    REQUIRE(eng.resources().alloc(*c, 4096, &id) == 0);
    CHECK(eng.resources().holdings().buffers == buffers_before + 1);
    CHECK(eng.resources().alloc(*c, 1 << 20, &id) == -EDQUOT);  // over its user's bound
    CHECK(eng.resources().take_refusal().find("uid 4242 holds 4096 B of device memory") != std::string::npos);
    CHECK(eng.resources().take_refusal().empty());  // read once
    {
      // The bound is the user's: another client of uid 4242 shares it, one of another uid does not.
      ClientRef same, other;
      REQUIRE(eng.clients().add_client(4, 4096, &same) == 0);
      REQUIRE(eng.clients().add_client(4, 4096, &other) == 0);
      same->uid = 4242;
      other->uid = 4343;
      uint64_t x = 0;
      CHECK(eng.resources().alloc(*same, 8192, &x) == -EDQUOT);
      CHECK(eng.resources().alloc(*other, 8192, &x) == 0);
      CHECK(eng.resources().usage(4242).device_bytes == 4096);
      CHECK(eng.resources().usage(4343).device_bytes == 8192);
      CHECK(eng.resources().usage(4242).clients == 2);
    }
    auto buf = c->owned(1);
    REQUIRE(buf);
    std::memset(c->segment().slot(0), 0x42, 4096);
    REQUIRE(eng.submit(c, 1, false, buf->ptr, c->segment().slot(0), 4096, buf) == 0);
    while (c->completed() < 1) io.run_one();
    REQUIRE(eng.submit(c, 2, true, c->segment().slot(1), buf->ptr, 4096, buf) == 0);
    // Freed by the client while a copy holds it: the memory stays until the copy ends.
    CHECK(eng.resources().free(*c, 1) == 0);
    CHECK(eng.resources().free(*c, 1) == -ENOENT);
    buf.reset();
    while (c->completed() < 2) io.run_one();
    CHECK(static_cast<unsigned char>(c->segment().slot(1)[4095]) == 0x42);
    // The outcome is in the segment, where the client reads it.
    CHECK(c->segment().header()->completed.load() == 2);
    CHECK(c->segment().header()->failures.load() == 0);
    CHECK(eng.stats().uploads == 1);
    CHECK(eng.stats().downloads == 1);
    CHECK(eng.stats().in_flight == 0);
    CHECK(eng.resources().holdings().buffers == buffers_before);
  }
}

TEST_CASE("engine: a copy retires only once the device ran it; asleep, the device's eventfd wakes the data thread",
          "[engine][fake]") {
  boost::asio::io_context io;
  auto* dev = new FakeDevice;
  TransferEngine eng(io, std::unique_ptr<Backend>(dev));
  ClientRef c;
  REQUIRE(eng.clients().add_client(4, 4096, &c) == 0);
  REQUIRE(c->registered());
  uint64_t id = 0;
  REQUIRE(eng.resources().alloc(*c, 4096, &id) == 0);
  auto buf = c->owned(1);
  REQUIRE(buf);
  const auto* device_word = &c->segment().header()->device_completed;

  // Awake: the engine asks the device at every poll, and lends it no wait.
  eng.sleep_end();
  std::memset(c->segment().slot(0), 0x42, 4096);
  REQUIRE(eng.submit(c, 1, false, buf->ptr, c->segment().slot(0), 4096, buf) == 0);
  CHECK(dev->arms == 0);
  CHECK(eng.poll() == 0);
  CHECK(c->completed() == 0);
  CHECK(eng.stats().in_flight == 1);
  dev->run(1);
  CHECK(eng.poll() == 1);
  CHECK(c->completed() == 1);
  CHECK(device_word->load() == 1);  // written by the device, after the copy
  CHECK(static_cast<const unsigned char*>(buf->ptr)[4095] == 0x42);
  CHECK(eng.stats().uploads == 1);

  // Asleep: a copy queued now is lent to the waiter; nothing is retired
  // until the device runs it, and then its eventfd wakes the data thread.
  REQUIRE(eng.sleep_begin());
  REQUIRE(eng.submit(c, 2, false, buf->ptr, c->segment().slot(1), 4096, buf) == 0);
  REQUIRE(eng.submit(c, 3, false, buf->ptr, c->segment().slot(2), 4096, buf) == 0);
  CHECK(dev->arms >= 1);
  CHECK(io.poll() == 0);  // nothing to wake it
  CHECK(c->completed() == 1);
  dev->run(2);
  CHECK(io.run_one_for(std::chrono::seconds(10)) == 1);  // not a wait on time: the eventfd is written already
  CHECK(c->completed() == 3);  // both, in one wake-up
  CHECK(eng.stats().device_wakes == 1);
  CHECK(eng.stats().in_flight == 0);

  // A copy the device failed: its ticket's Result says why, the timeline
  // still passes it, and the device writes no more words.
  REQUIRE(eng.submit(c, 4, false, buf->ptr, c->segment().slot(3), 4096, buf) == 0);
  dev->run(1, -EIO);
  CHECK(io.run_one_for(std::chrono::seconds(10)) == 1);
  CHECK(c->completed() == 4);
  CHECK(c->segment().header()->failures.load() == 1);
  CHECK(c->segment().results()[(4 - 1) % c->ring_entries()].error.load() == -EIO);
  CHECK_FALSE(eng.device_timeline());
  CHECK(device_word->load() == 4);  // the host wrote it
  eng.stop();
}

TEST_CASE("staging threads: a quarter of the cores by user, then among the user's clients", "[engine][share]") {
  // cores, clients transferring, users among them, the client's user's; threads.
  struct Case {
    uint64_t cores;
    uint32_t active, users, of_user, want;
  };
  for (const Case& k : {Case{16, 0, 0, 1, 0}, Case{16, 1, 1, 1, 0},   // alone: its whole pool
                        Case{16, 2, 1, 2, 2}, Case{16, 8, 1, 8, 1},   // one user's clients share its quarter
                        Case{64, 4, 1, 4, 4}, Case{2, 2, 2, 1, 1},    // never none
                        // Two users: one with 8 connections transferring, one with 1. The
                        // second keeps half the quarter, as with two clients in all.
                        Case{64, 9, 2, 1, 8}, Case{64, 9, 2, 8, 1}, Case{64, 2, 2, 1, 8}}) {
    INFO(k.cores << " cores, " << k.active << " active, " << k.users << " users, " << k.of_user << " of its user's");
    CHECK(Clients::staging_share(k.cores, k.active, k.users, k.of_user) == k.want);
  }
}

TEST_CASE("MPS is reported only while a control daemon answers in its pipe directory", "[engine][mps]") {
  char dir[] = "/tmp/ferry-mps-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  ::setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
  CHECK_FALSE(ferry::ferryd::mps_control_present());  // no control file
  const std::string path = std::string(dir) + "/control";
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);  // as NVIDIA's control daemon (CUDA 13)
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  CHECK(ferry::ferryd::mps_control_present());
  // A listener whose backlog is full: no answer within a second, never a wait.
  {
    const int busy = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    ::unlink(path.c_str());
    ::close(fd);
    sockaddr_un b{};
    b.sun_family = AF_UNIX;
    std::strncpy(b.sun_path, path.c_str(), sizeof b.sun_path - 1);
    REQUIRE(::bind(busy, reinterpret_cast<sockaddr*>(&b), sizeof b) == 0);
    REQUIRE(::listen(busy, 0) == 0);
    std::vector<int> queued;
    for (int i = 0; i < 64; ++i) {
      const int q = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);
      if (::connect(q, reinterpret_cast<sockaddr*>(&b), sizeof b) != 0) {
        ::close(q);
        break;
      }
      queued.push_back(q);
    }
    CHECK_FALSE(ferry::ferryd::mps_control_present());  // returns: it used to block here for good
    for (int q : queued) ::close(q);
    // The listener takes what waited: room again, and it answers.
    ::fcntl(busy, F_SETFL, O_NONBLOCK);
    auto take_all = [&] {  // each answered check leaves one more connection waiting
      for (int q; (q = ::accept(busy, nullptr, nullptr)) >= 0;) ::close(q);
    };
    take_all();
    CHECK(ferry::ferryd::mps_control_present());
    // Any user may make the directory or the file: only root's or our own count.
    if (::geteuid() == 0) {
      const uid_t other = 54321;
      REQUIRE(::chown(path.c_str(), other, other) == 0);
      CHECK_FALSE(ferry::ferryd::mps_control_present());
      REQUIRE(::chown(path.c_str(), 0, 0) == 0);
      REQUIRE(::chown(dir, other, other) == 0);
      CHECK_FALSE(ferry::ferryd::mps_control_present());
      REQUIRE(::chown(dir, 0, 0) == 0);
      take_all();
      CHECK(ferry::ferryd::mps_control_present());
      // Nor through a link to a directory of ours.
      const std::string link = std::string(dir) + "-link";
      REQUIRE(::symlink(dir, link.c_str()) == 0);
      ::setenv("CUDA_MPS_PIPE_DIRECTORY", link.c_str(), 1);
      CHECK_FALSE(ferry::ferryd::mps_control_present());
      ::setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
      ::unlink(link.c_str());
    }
    ::close(busy);
  }
  CHECK_FALSE(ferry::ferryd::mps_control_present());  // the daemon quit; its socket file stays
  ::unlink(path.c_str());
  ::rmdir(dir);
  ::unsetenv("CUDA_MPS_PIPE_DIRECTORY");
}

// What an order's callback holds (on ferryd, the session that asked) may be
// its last reference, and ending it may call back into the pool: the pool
// lets it go outside its own lock. (It once went inside, and the daemon
// deadlocked the first time a session ended that way.)
TEST_CASE("the segment pool releases what an order's callback holds outside its lock", "[engine][pool]") {
  SegmentPool pool(2, 4096, 0, nullptr);  // keeps none ready: every Hello orders
  std::promise<bool> reentered;
  auto result = reentered.get_future();
  struct CallsBack {
    SegmentPool* pool = nullptr;
    std::promise<bool>* out = nullptr;
    ~CallsBack() {
      if (pool == nullptr) return;
      // Done on another thread with a deadline, so a pool that still holds its
      // lock here fails the test rather than hanging it.
      auto done = std::make_shared<std::promise<void>>();
      auto f = done->get_future();
      std::thread([p = pool, done] {
        p->discard(StagingSegment{}, false);
        done->set_value();
      }).detach();
      out->set_value(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    }
  };
  auto holder = std::make_shared<CallsBack>();
  holder->pool = &pool;
  holder->out = &reentered;
  std::promise<int> made;
  auto made_f = made.get_future();
  // The order's callback holds the only reference.
  REQUIRE(pool.order(2, 4096, std::make_shared<std::atomic<bool>>(false),
                     [h = std::move(holder), &made](int r, StagingSegment, bool) { made.set_value(r); }) == 0);
  CHECK(made_f.get() == 0);
  CHECK(result.get());
}
