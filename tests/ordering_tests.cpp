// SPDX-License-Identifier: MIT
// Uploads in the application's own queue order, on the simulated device:
// the device-written timeline, a queue that waits on a ticket (read after
// upload), ferry_upload_after (write after read), and the isolation of holds.
#include <ferry/ferry.h>
#include <ferry/level_zero.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "daemon_fixture.hpp"
#include "ze_app.hpp"

using namespace ferry::test;

namespace {

std::vector<uint8_t> bytes_for(uint64_t i, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(i * 31 + k * 7 + 1);
  return v;
}

// An application on the simulated device whose buffer ferry uploads into.
struct App {
  Consumer k;
  ferry_client* c = nullptr;
  void* region = nullptr;
  uint64_t bytes;
  ferry_buffer buf{};
  ze_event_pool_handle_t pool = nullptr;
  ze_event_handle_t done = nullptr;
  App(const std::string& socket, uint64_t n) : bytes(n) {
    REQUIRE(ferry_connect(socket.c_str(), &c) == 0);
    region = k.device_alloc(bytes);
    ferry_ipc_handle h = k.ipc_handle(region, bytes);
    REQUIRE(ferry_buffer_import(c, &h, &buf) == 0);
    REQUIRE(ferry_ze_import(c, k.drv) == 0);
    ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1};
    ZE_OK(zeEventPoolCreate(k.ctx, &pd, 1, &k.dev, &pool));
    ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, 0, ZE_EVENT_SCOPE_FLAG_HOST};
    ZE_OK(zeEventCreate(pool, &ed, &done));
  }
  ~App() {
    zeEventDestroy(done);
    zeEventPoolDestroy(pool);
    ferry_ze_release(c, k.drv);
    ferry_disconnect(c);
    zeMemFree(k.ctx, region);
  }
  // Until everything appended to the application's queue so far has run.
  void finish_queue() {
    ZE_OK(zeEventHostReset(done));
    ZE_OK(zeCommandListAppendBarrier(k.list, done, 0, nullptr));
    ZE_OK(zeEventHostSynchronize(done, UINT64_MAX));
  }
  std::vector<uint64_t> read_sums(void* sums, size_t n) {
    std::vector<uint64_t> out(n);
    ZE_OK(zeEventHostReset(done));
    ZE_OK(zeCommandListAppendMemoryCopy(k.list, out.data(), sums, n * sizeof(uint64_t), done, 0, nullptr));
    ZE_OK(zeEventHostSynchronize(done, UINT64_MAX));
    return out;
  }
};

}  // namespace

TEST_CASE("the device writes each client's timeline after its copies", "[order][timeline]") {
  Daemon d;
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  ferry_timeline tl{};
  REQUIRE(ferry_get_timeline(c, &tl) == 0);
  CHECK(tl.device_written == 1);
  CHECK(tl.segment != nullptr);
  CHECK(d.status().get<std::string>("device.timeline") == "device");
  ferry_buffer b{};
  REQUIRE(ferry_buffer_alloc(c, 1 << 20, &b) == 0);
  std::vector<uint8_t> src(300000, 7);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(c, b, 0, src.data(), src.size(), &t) == 0);
  REQUIRE(ferry_wait(c, t, -1) == 0);
  CHECK(eventually([&] { return *tl.device_completed >= t; }));
  // A refused ticket passes the device's word too, and still fails its wait.
  REQUIRE(ferry_buffer_free(c, b) == 0);
  ferry_buffer b2{};
  REQUIRE(ferry_buffer_alloc(c, 4096, &b2) == 0);
  ferry_token tok{};
  REQUIRE(ferry_buffer_grant(c, b2, FERRY_RIGHT_UPLOAD, &tok) == 0);
  ferry_client* other = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &other) == 0);
  ferry_buffer ob{};
  REQUIRE(ferry_buffer_open(other, &tok, &ob, nullptr) == 0);
  REQUIRE(ferry_buffer_revoke(c, b2, &tok) == 0);
  ferry_ticket ot = 0;
  REQUIRE(ferry_upload(other, ob, 0, src.data(), 64, &ot) == 0);
  ferry_timeline otl{};
  REQUIRE(ferry_get_timeline(other, &otl) == 0);
  CHECK(eventually([&] { return *otl.device_completed >= ot; }));
  CHECK(ferry_wait(other, ot, -1) == -EACCES);
  ferry_disconnect(other);
  ferry_disconnect(c);
}

TEST_CASE("read after upload: a queue that waits on the ticket reads the new bytes", "[order][simonly]") {
  // A slow link: without the wait, the kernel would run long before the copy.
  Daemon d({}, {{"FERRY_SIM_LATENCY_US", "3000"}, {"FERRY_SIM_BANDWIDTH_GBPS", "0"}});
  const size_t n = 1024, iters = 8;
  App a(d.socket, n * (iters + 1));
  void* sums = a.k.device_alloc(sizeof(uint64_t) * (iters + 1));
  std::vector<std::vector<uint8_t>> sent;
  for (size_t i = 0; i < iters; ++i) {
    sent.push_back(bytes_for(i, n));
    ferry_ticket t = 0;
    REQUIRE(ferry_upload(a.c, a.buf, i * n, sent.back().data(), n, &t) == 0);
    REQUIRE(ferry_ze_append_wait(a.c, a.k.drv, a.k.list, t) == 0);
    a.k.append_checksum(static_cast<char*>(a.region) + i * n, n, static_cast<uint64_t*>(sums) + i, nullptr, nullptr);
  }
  // The control: without the wait, the kernel reads what is there when it
  // runs. (This copy is held until after it, so the outcome does not depend
  // on timing: the kernel must read the old bytes.)
  auto last = bytes_for(99, n);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload_after(a.c, a.buf, iters * n, last.data(), n, 1, &t) == 0);
  a.k.append_checksum(static_cast<char*>(a.region) + iters * n, n, static_cast<uint64_t*>(sums) + iters, nullptr,
                      nullptr);
  REQUIRE(ferry_ze_append_signal(a.c, a.k.drv, a.k.list, 1) == 0);
  a.finish_queue();
  REQUIRE(ferry_flush(a.c, -1) == 0);
  auto got = a.read_sums(sums, iters + 1);
  for (size_t i = 0; i < iters; ++i) CHECK(got[i] == ferry_sim_checksum(sent[i].data(), n));
  CHECK(got[iters] != ferry_sim_checksum(last.data(), n));
  zeMemFree(a.k.ctx, sums);
}

TEST_CASE("write after read: one reused region, every kernel reads its own upload", "[order][simonly]") {
  Daemon d;
  const size_t n = 1024, iters = 200;
  App a(d.socket, n);
  void* sums = a.k.device_alloc(sizeof(uint64_t) * iters);
  auto run = [&](bool ordered) {
    std::vector<std::vector<uint8_t>> sent;
    for (size_t i = 0; i < iters; ++i) {
      a.k.append_busy(30);  // a kernel before: the old bytes are still in use
      sent.push_back(bytes_for(i + (ordered ? 0 : 1000), n));
      ferry_ticket t = 0;
      if (ordered && i > 0) {
        // After the checksum of iteration i - 1, which signalled i.
        REQUIRE(ferry_upload_after(a.c, a.buf, 0, sent.back().data(), n, i, &t) == 0);
      } else {
        REQUIRE(ferry_upload(a.c, a.buf, 0, sent.back().data(), n, &t) == 0);
      }
      if (ordered) REQUIRE(ferry_ze_append_wait(a.c, a.k.drv, a.k.list, t) == 0);
      a.k.append_checksum(a.region, n, static_cast<uint64_t*>(sums) + i, nullptr, nullptr);
      if (ordered) REQUIRE(ferry_ze_append_signal(a.c, a.k.drv, a.k.list, i + 1) == 0);
      a.k.append_busy(30);  // a kernel after
    }
    a.finish_queue();
    REQUIRE(ferry_flush(a.c, -1) == 0);
    auto got = a.read_sums(sums, iters);
    size_t wrong = 0;
    for (size_t i = 0; i < iters; ++i) wrong += got[i] != ferry_sim_checksum(sent[i].data(), n);
    return wrong;
  };
  CHECK(run(true) == 0);
  // Without the ordering the same program reads other iterations' bytes.
  CHECK(run(false) > 0);
  zeMemFree(a.k.ctx, sums);
}

TEST_CASE("a held upload waits for its value and stalls only its own client", "[order][isolation]") {
  Daemon d;
  ferry_client* held = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &held) == 0);
  ferry_buffer hb{};
  REQUIRE(ferry_buffer_alloc(held, 4096, &hb) == 0);
  std::vector<uint8_t> old(4096, 0x11), neu(4096, 0x22), back(4096);
  ferry_ticket t0 = 0, t1 = 0, t2 = 0;
  REQUIRE(ferry_upload(held, hb, 0, old.data(), old.size(), &t0) == 0);
  REQUIRE(ferry_wait(held, t0, -1) == 0);
  REQUIRE(ferry_upload_after(held, hb, 0, neu.data(), neu.size(), 5, &t1) == 0);
  // Later work of the same client waits behind the hold...
  REQUIRE(ferry_upload(held, hb, 0, neu.data(), 16, &t2) == 0);
  CHECK(ferry_wait(held, t1, 50'000'000) == -ETIMEDOUT);
  CHECK(ferry_wait(held, t2, 1'000'000) == -ETIMEDOUT);
  // ...but nobody else's: another client streams and verifies meanwhile.
  ferry_client* other = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &other) == 0);
  ferry_buffer ob{};
  REQUIRE(ferry_buffer_alloc(other, 1 << 16, &ob) == 0);
  for (int i = 0; i < 200; ++i) {
    auto v = bytes_for(static_cast<uint64_t>(i), 1 << 16);
    ferry_ticket t = 0;
    REQUIRE(ferry_upload(other, ob, 0, v.data(), v.size(), &t) == 0);
    REQUIRE(ferry_wait(other, t, 5'000'000'000) == 0);
  }
  std::vector<uint8_t> ov(1 << 16);
  REQUIRE(ferry_download(other, ob, 0, ov.data(), ov.size()) == 0);
  CHECK(ov == bytes_for(199, 1 << 16));
  SECTION("the value comes: the held copy runs, then the rest, in order") {
    REQUIRE(ferry_signal(held, 4) == 0);
    CHECK(ferry_wait(held, t1, 20'000'000) == -ETIMEDOUT);  // 4 is not 5
    REQUIRE(ferry_signal(held, 5) == 0);
    CHECK(ferry_wait(held, t2, 5'000'000'000) == 0);
    REQUIRE(ferry_download(held, hb, 0, back.data(), back.size()) == 0);
    std::vector<uint8_t> want = neu;
    CHECK(back == want);
    ferry_disconnect(held);
  }
  SECTION("it never comes: disconnecting frees everything the hold kept") {
    ferry_disconnect(held);
  }
  ferry_disconnect(other);
  CHECK(d.holds_nothing());
}
