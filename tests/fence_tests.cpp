// SPDX-License-Identifier: MIT
// Ordering across processes on the device (fences): a producer's upload into
// a granted buffer publishes a value into the owner's fence, which the
// owner's own queue waits for; the owner's queue releases the buffer, and
// the producer's next upload is held until it has. Gathered uploads too.
#include <ferry/ferry.h>
#include <ferry/level_zero.h>

#include <cerrno>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "daemon_fixture.hpp"
#include "ze_app.hpp"

using namespace ferry::test;

namespace {

std::vector<uint8_t> frame(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  for (uint64_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed * 131 + k * 7 + (k >> 9));
  return v;
}

// The owner: a client whose buffer producers fill, and its own queue on the
// simulated device, which reads the buffer through the buffer's IPC export.
struct Owner {
  Consumer k;
  ferry_client* c = nullptr;
  ferry_buffer buf{};
  ferry_token token{};
  void* mapped = nullptr;
  void* sums = nullptr;
  ze_event_pool_handle_t pool = nullptr;
  ze_event_handle_t done = nullptr;
  ze_event_handle_t gate = nullptr;  // holds the owner's queue until the host signals it
  Owner(const std::string& socket, uint64_t bytes, size_t nsums) {
    REQUIRE(ferry_connect(socket.c_str(), &c) == 0);
    REQUIRE(ferry_buffer_alloc(c, bytes, &buf) == 0);
    REQUIRE(ferry_buffer_grant(c, buf, FERRY_RIGHT_UPLOAD, &token) == 0);
    ferry_ipc_handle h{};
    REQUIRE(ferry_buffer_export(c, buf, &h) == 0);
    ze_ipc_mem_handle_t zh{};
    std::memcpy(zh.data, h.data, sizeof zh.data);
    ZE_OK(zeMemOpenIpcHandle(k.ctx, k.dev, zh, 0, &mapped));
    ::close(h.fd);
    REQUIRE(ferry_ze_import(c, k.drv) == 0);  // the fences live in the segment
    sums = k.device_alloc(8 * nsums);
    ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 2};
    ZE_OK(zeEventPoolCreate(k.ctx, &pd, 1, &k.dev, &pool));
    ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, 0, ZE_EVENT_SCOPE_FLAG_HOST};
    ZE_OK(zeEventCreate(pool, &ed, &done));
    ed.index = 1;
    ZE_OK(zeEventCreate(pool, &ed, &gate));
  }
  ~Owner() {
    zeEventDestroy(gate);
    zeEventDestroy(done);
    zeEventPoolDestroy(pool);
    zeMemFree(k.ctx, sums);
    zeMemCloseIpcHandle(k.ctx, mapped);
    ferry_ze_release(c, k.drv);
    ferry_disconnect(c);
  }
  void barrier() {
    ZE_OK(zeEventHostReset(done));
    ZE_OK(zeCommandListAppendBarrier(k.list, done, 0, nullptr));
  }
  std::vector<uint64_t> read_sums(size_t n) {
    std::vector<uint64_t> out(n);
    ZE_OK(zeEventHostReset(done));
    ZE_OK(zeCommandListAppendMemoryCopy(k.list, out.data(), sums, 8 * n, done, 0, nullptr));
    ZE_OK(zeEventHostSynchronize(done, UINT64_MAX));
    return out;
  }
};

struct Producer {
  ferry_client* c = nullptr;
  ferry_buffer buf{};
  Producer(const std::string& socket, const ferry_token& token) {
    REQUIRE(ferry_connect(socket.c_str(), &c) == 0);
    REQUIRE(ferry_buffer_open(c, &token, &buf, nullptr) == 0);
  }
  ~Producer() { ferry_disconnect(c); }
  int upload(const std::vector<ferry_iovec>& parts, uint64_t release, uint64_t publish, ferry_ticket* t) {
    ferry_upload_opts o{};
    o.size = sizeof o;
    o.after_release = release;
    o.publish = publish;
    return ferry_upload_gather(c, buf, 0, parts.data(), parts.size(), &o, t);
  }
};

}  // namespace

TEST_CASE("a producer's upload publishes into the owner's fence: the owner's queue waits for it, not the host",
          "[fence][simonly]") {
  // A slow link: the 1 MiB copy takes ~5 ms on the daemon's engine.
  Daemon d({"--slot-size", "262144"}, {{"FERRY_SIM_BANDWIDTH_GBPS", "0.2"}, {"FERRY_SIM_LATENCY_US", "0"}});
  const uint64_t n = 1 << 20;
  Owner o(d.socket, n, 1);
  ferry_fence f{};
  REQUIRE(ferry_buffer_fence(o.c, o.buf, &f) == 0);
  CHECK(*f.ready == 0);
  // The owner's checksum is queued before any byte is uploaded.
  REQUIRE(ferry_ze_append_fence_wait(o.c, o.k.drv, o.k.list, o.buf, 1) == 0);
  o.k.append_checksum(o.mapped, n, o.sums, nullptr, nullptr);
  o.barrier();
  CHECK(zeEventQueryStatus(o.done) == ZE_RESULT_NOT_READY);
  // The frame, gathered by a producer (a client of its own, on a thread: a
  // fork here would copy the simulated device's engine threads' locks) from
  // three parts of its memory.
  const auto want = frame(n, 3);
  int produced = -1;
  std::thread p([&] {
    Producer pr(d.socket, o.token);
    std::vector<uint8_t> a(want.begin(), want.begin() + 1000), b(want.begin() + 1000, want.begin() + 300'000),
        c(want.begin() + 300'000, want.end());
    std::vector<ferry_iovec> parts{{a.data(), a.size()}, {nullptr, 0}, {b.data(), b.size()}, {c.data(), c.size()}};
    ferry_ticket t = 0;
    produced = pr.upload(parts, 0, 1, &t);
    if (produced == 0) produced = ferry_wait(pr.c, t, -1);  // the owner never learns the ticket
  });
  const ze_result_t waited = zeEventHostSynchronize(o.done, 30'000'000'000ull);
  p.join();
  REQUIRE(produced == 0);
  ZE_OK(waited);
  CHECK(o.read_sums(1)[0] == ferry_sim_checksum(want.data(), n));
  CHECK(*f.ready == 1);
  CHECK(*f.failed == 0);
  CHECK(ferry_fence_wait(o.c, o.buf, 1, 0) == 0);
  CHECK(ferry_fence_wait(o.c, o.buf, 2, 1'000'000) == -ETIMEDOUT);
}

TEST_CASE("write after read across processes: one buffer reused, every checksum reads its own frame",
          "[fence][simonly]") {
  Daemon d({"--slot-size", "65536"});
  const uint64_t n = 200'000;  // four pieces per frame
  const size_t frames = 60;
  Owner o(d.socket, n, frames);
  Producer pr(d.socket, o.token);
  auto run = [&](bool released, uint64_t base) {
    std::vector<std::vector<uint8_t>> sent;
    // Without the release, the owner's queue is held until every frame is
    // uploaded, so that the overwrite the release prevents surely happens
    // (rather than only when the producer happens to run ahead).
    if (!released) {
      ZE_OK(zeEventHostReset(o.gate));
      ZE_OK(zeCommandListAppendWaitOnEvents(o.k.list, 1, &o.gate));
    }
    for (size_t i = 0; i < frames; ++i) {
      const uint64_t v = base + i + 1;
      // The owner's queue: wait for frame v, a kernel that keeps the old
      // bytes in use, the checksum, then release the buffer.
      REQUIRE(ferry_ze_append_fence_wait(o.c, o.k.drv, o.k.list, o.buf, v) == 0);
      o.k.append_busy(200);
      o.k.append_checksum(o.mapped, n, static_cast<uint64_t*>(o.sums) + i, nullptr, nullptr);
      REQUIRE(ferry_ze_append_fence_release(o.c, o.k.drv, o.k.list, o.buf, v) == 0);
      sent.push_back(frame(n, v));
      std::vector<ferry_iovec> parts{{sent.back().data(), n}};
      // The producer: frame v may overwrite the buffer once frame v - 1 is released.
      REQUIRE(pr.upload(parts, released && i > 0 ? v - 1 : 0, v, nullptr) == 0);
    }
    o.barrier();
    if (!released) {
      REQUIRE(ferry_flush(pr.c, -1) == 0);
      ZE_OK(zeEventHostSignal(o.gate));
    }
    ZE_OK(zeEventHostSynchronize(o.done, 30'000'000'000ull));
    REQUIRE(ferry_flush(pr.c, -1) == 0);
    auto got = o.read_sums(frames);
    size_t wrong = 0;
    for (size_t i = 0; i < frames; ++i) wrong += got[i] != ferry_sim_checksum(sent[i].data(), n);
    return wrong;
  };
  CHECK(run(true, 0) == 0);
  // Without the release the producer overwrites frames the owner still
  // reads: held back, every checksum but the last reads the last frame.
  CHECK(run(false, 1000) == frames - 1);
}

TEST_CASE("a release that never comes stalls only that buffer's producers", "[fence][isolation]") {
  Daemon d;
  ferry_client* owner = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &owner) == 0);
  ferry_buffer x{}, y{};
  REQUIRE(ferry_buffer_alloc(owner, 4096, &x) == 0);
  REQUIRE(ferry_buffer_alloc(owner, 4096, &y) == 0);
  ferry_token tx{}, ty{};
  REQUIRE(ferry_buffer_grant(owner, x, FERRY_RIGHT_UPLOAD | FERRY_RIGHT_DOWNLOAD, &tx) == 0);
  REQUIRE(ferry_buffer_grant(owner, y, FERRY_RIGHT_UPLOAD, &ty) == 0);
  ferry_fence fx{}, fy{};
  REQUIRE(ferry_buffer_fence(owner, x, &fx) == 0);
  REQUIRE(ferry_buffer_fence(owner, y, &fy) == 0);
  CHECK(fx.ready != fy.ready);
  Producer a(d.socket, tx), b(d.socket, ty);
  std::vector<uint8_t> data(4096, 0x5a);
  std::vector<ferry_iovec> parts{{data.data(), data.size()}};
  ferry_ticket ta = 0, tb = 0;
  REQUIRE(a.upload(parts, 5, 6, &ta) == 0);  // held: x is released at 0
  for (int i = 1; i <= 50; ++i) {
    REQUIRE(b.upload(parts, 0, static_cast<uint64_t>(i), &tb) == 0);
    REQUIRE(ferry_wait(b.c, tb, 5'000'000'000) == 0);
  }
  CHECK(ferry_fence_wait(owner, y, 50, 5'000'000'000) == 0);
  // The owner's own uploads, into either buffer, are not held either.
  ferry_ticket to = 0;
  REQUIRE(ferry_upload(owner, x, 0, data.data(), 16, &to) == 0);
  REQUIRE(ferry_wait(owner, to, 5'000'000'000) == 0);
  CHECK(ferry_wait(a.c, ta, 20'000'000) == -ETIMEDOUT);
  CHECK(*fx.ready == 0);
  // The release comes (from the owner's host here): a's copy runs and publishes.
  *fx.released = 4;
  CHECK(ferry_wait(a.c, ta, 20'000'000) == -ETIMEDOUT);  // 4 is not 5
  *fx.released = 5;
  CHECK(ferry_wait(a.c, ta, 5'000'000'000) == 0);
  CHECK(ferry_fence_wait(owner, x, 6, 5'000'000'000) == 0);
  // status counts that one hold, and no upload that was not held; it
  // outlasted the two 20 ms waits above.
  const auto st = d.status();
  CHECK(st.get<uint64_t>("histograms.hold_wait.count") == 1);
  CHECK(st.get<uint64_t>("histograms.hold_wait.sum_ns") >= 40'000'000);
  std::vector<uint8_t> back(4096);
  REQUIRE(ferry_download(a.c, a.buf, 0, back.data(), back.size()) == 0);
  CHECK(back == data);
  SECTION("a hold whose owner leaves ends: the producer's upload fails, nothing is held") {
    REQUIRE(a.upload(parts, 99, 7, &ta) == 0);
    ferry_disconnect(owner);
    CHECK(ferry_wait(a.c, ta, 5'000'000'000) == -ENOENT);
  }
  SECTION("the owner frees the buffer: the fence is another's next, zeroed") {
    REQUIRE(ferry_buffer_free(owner, x) == 0);
    CHECK(ferry_buffer_fence(owner, x, &fx) == -ENOENT);
    ferry_buffer z{};
    REQUIRE(ferry_buffer_alloc(owner, 4096, &z) == 0);
    ferry_fence fz{};
    REQUIRE(ferry_buffer_fence(owner, z, &fz) == 0);
    CHECK(fz.ready == fx.ready);  // the lowest free fence: x's
    CHECK(*fz.ready == 0);
    CHECK(*fz.released == 0);
    ferry_disconnect(owner);
  }
  CHECK(ferry_flush(b.c, 5'000'000'000) == 0);
}

TEST_CASE("a publishing upload that fails still writes the fence, after marking it failed", "[fence][faults][simonly]") {
  // The simulated device fails the daemon's first copy.
  Daemon d({}, {{"FERRY_SIM_FAIL_COPY", "1"}});
  ferry_client* owner = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &owner) == 0);
  ferry_buffer x{};
  REQUIRE(ferry_buffer_alloc(owner, 4096, &x) == 0);
  ferry_token tx{};
  REQUIRE(ferry_buffer_grant(owner, x, FERRY_RIGHT_UPLOAD, &tx) == 0);
  Producer a(d.socket, tx);
  std::vector<uint8_t> data(4096, 1);
  std::vector<ferry_iovec> parts{{data.data(), data.size()}};
  ferry_ticket t = 0;
  REQUIRE(a.upload(parts, 0, 3, &t) == 0);
  CHECK(ferry_wait(a.c, t, 5'000'000'000) == -EIO);
  CHECK(ferry_fence_wait(owner, x, 3, 5'000'000'000) == -EIO);
  ferry_fence f{};
  REQUIRE(ferry_buffer_fence(owner, x, &f) == 0);
  CHECK(*f.ready == 3);
  CHECK(*f.failed == 3);
  // The next one succeeds (the fault was once): a later value, no failure for it.
  REQUIRE(a.upload(parts, 0, 4, &t) == 0);
  CHECK(ferry_wait(a.c, t, 5'000'000'000) == 0);
  CHECK(ferry_fence_wait(owner, x, 4, 5'000'000'000) == 0);
  ferry_disconnect(owner);
}

TEST_CASE("fenced uploads: misuse is refused and changes nothing", "[fence][badinput]") {
  Daemon d;
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  ferry_buffer b{};
  REQUIRE(ferry_buffer_alloc(c, 4096, &b) == 0);
  std::vector<uint8_t> data(4096, 7);
  ferry_iovec one{data.data(), 100};
  ferry_upload_opts o{};
  o.size = sizeof o;
  o.publish = 1;
  ferry_ticket t = 0;
  CHECK(ferry_upload_gather(c, b, 0, &one, 0, &o, &t) == -EINVAL);     // no ranges
  ferry_iovec null_range{nullptr, 5};
  CHECK(ferry_upload_gather(c, b, 0, &null_range, 1, &o, &t) == -EFAULT);
  ferry_iovec too_much[2] = {{data.data(), 4096}, {data.data(), 1}};
  CHECK(ferry_upload_gather(c, b, 0, too_much, 2, &o, &t) == -ERANGE);  // past the buffer's end
  ferry_upload_opts small = o;
  small.size = 8;
  CHECK(ferry_upload_gather(c, b, 0, &one, 1, &small, &t) == -EINVAL);
  ferry_upload_opts flagged = o;
  flagged.flags = 1;
  CHECK(ferry_upload_gather(c, b, 0, &one, 1, &flagged, &t) == -EINVAL);
  CHECK(ferry_fence_wait(c, b, 0, 0) == -EINVAL);
  CHECK(ferry_buffer_fence(c, ferry_buffer{b.id + 100}, nullptr) == -EFAULT);
  ferry_fence f{};
  CHECK(ferry_buffer_fence(c, ferry_buffer{b.id + 100}, &f) == -ENOENT);
  // Nothing of that reached the daemon: the timeline is where it was.
  CHECK(ferry_flush(c, 0) == 0);
  // A gather with no options is an ordinary upload of the parts, back to back.
  ferry_iovec parts[3] = {{data.data(), 10}, {data.data() + 10, 0}, {data.data() + 10, 90}};
  REQUIRE(ferry_upload_gather(c, b, 1000, parts, 3, nullptr, &t) == 0);
  REQUIRE(ferry_wait(c, t, -1) == 0);
  std::vector<uint8_t> back(100);
  REQUIRE(ferry_download(c, b, 1000, back.data(), 100) == 0);
  CHECK(std::equal(back.begin(), back.end(), data.begin()));
  ferry_disconnect(c);
  CHECK(d.holds_nothing());
}

TEST_CASE("a producer that exits right after its upload returns still publishes it, held or not",
          "[fence][faults]") {
  // A slow link: the copy outlasts the producer.
  Daemon d({"--slot-size", "262144"}, {{"FERRY_SIM_BANDWIDTH_GBPS", "0.2"}, {"FERRY_SIM_LATENCY_US", "0"}});
  ferry_client* owner = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &owner) == 0);
  const uint64_t n = 1 << 20;
  ferry_buffer x{};
  REQUIRE(ferry_buffer_alloc(owner, n, &x) == 0);
  ferry_token tx{};
  REQUIRE(ferry_buffer_grant(owner, x, FERRY_RIGHT_UPLOAD, &tx) == 0);
  const auto want = frame(n, 9);
  auto upload_and_exit = [&](uint64_t release, uint64_t publish, uint64_t after, uint64_t seed) {
    return fork_child([&] {
      ferry_client* c = nullptr;
      ferry_buffer b{};
      if (ferry_connect(d.socket.c_str(), &c) != 0 || ferry_buffer_open(c, &tx, &b, nullptr) != 0) return 90;
      const auto data = frame(n, seed);
      ferry_iovec one{data.data(), n};
      ferry_upload_opts o{};
      o.size = sizeof o;
      o.after_release = release;
      o.publish = publish;
      o.after = after;
      return ferry_upload_gather(c, b, 0, &one, 1, &o, nullptr) == 0 ? 0 : 91;  // exits at once
    });
  };
  std::vector<uint8_t> back(n);
  REQUIRE(reap(upload_and_exit(0, 1, 0, 9)) == 0);
  CHECK(ferry_fence_wait(owner, x, 1, 10'000'000'000) == 0);
  REQUIRE(ferry_download(owner, x, 0, back.data(), n) == 0);
  CHECK(back == want);
  // Held (x is released at 1, not 7) when its producer leaves: it still goes
  // once the owner releases 7, as a copy in flight still finishes.
  ferry_fence f{};
  REQUIRE(ferry_buffer_fence(owner, x, &f) == 0);
  *f.released = 1;
  REQUIRE(reap(upload_and_exit(7, 2, 0, 10)) == 0);
  CHECK(ferry_fence_wait(owner, x, 2, 20'000'000) == -ETIMEDOUT);
  *f.released = 7;
  CHECK(ferry_fence_wait(owner, x, 2, 10'000'000'000) == 0);
  REQUIRE(ferry_download(owner, x, 0, back.data(), n) == 0);
  CHECK(back == frame(n, 10));
  // Held for its own application's value, which nobody raises once it left:
  // dropped, and the owner's queue is not left waiting (the fence fails).
  REQUIRE(reap(upload_and_exit(0, 3, 5, 11)) == 0);
  CHECK(ferry_fence_wait(owner, x, 3, 10'000'000'000) == -EIO);
  REQUIRE(ferry_download(owner, x, 0, back.data(), n) == 0);
  CHECK(back == frame(n, 10));  // nothing of it was written
  ferry_disconnect(owner);
  CHECK(d.holds_nothing());
}

TEST_CASE("a buffer opened through a grant has no fence of the opener's: -ENOENT, as documented", "[fence][badinput]") {
  Daemon d;
  ferry_client* owner = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &owner) == 0);
  ferry_buffer x{};
  REQUIRE(ferry_buffer_alloc(owner, 4096, &x) == 0);
  ferry_token tx{};
  REQUIRE(ferry_buffer_grant(owner, x, FERRY_RIGHT_UPLOAD, &tx) == 0);
  Producer p(d.socket, tx);
  ferry_fence f{};
  CHECK(ferry_buffer_fence(p.c, p.buf, &f) == -ENOENT);
  CHECK(std::string(ferry_last_error()).find("opened through a grant") != std::string::npos);
  CHECK(ferry_buffer_fence(p.c, p.buf, nullptr) == -EFAULT);
  CHECK(ferry_buffer_fence(owner, x, &f) == 0);
  ferry_disconnect(owner);
}
