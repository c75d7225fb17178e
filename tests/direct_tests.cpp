// SPDX-License-Identifier: MIT
// Direct uploads on the simulated device: ferry stages, the application's own
// command list copies (ferry_ze_upload). The list is held back by a wait on a
// word the test writes, so what must not happen before the copy ran can be
// looked at while the copy cannot have run.
#include <ferry/ferry.h>
#include <ferry/level_zero.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "daemon_fixture.hpp"
#include "ze_app.hpp"

using namespace ferry::test;
namespace proto = ferry::proto;

namespace {

std::vector<uint8_t> bytes_for(uint64_t i, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(i * 37 + k * 11 + 3);
  return v;
}

// An application with a GPU context of its own (the simulated device's),
// connected to ferryd, its segment imported into that context.
struct App {
  Consumer k;
  ferry_client* c = nullptr;
  ferry_timeline tl{};
  ze_event_pool_handle_t pool = nullptr;
  ze_event_handle_t done = nullptr;
  uint64_t gate = 0;  // the last value the list was told to wait for (hold)
  explicit App(const std::string& socket) {
    REQUIRE(ferry_connect(socket.c_str(), &c) == 0);
    REQUIRE(ferry_ze_import(c, k.drv) == 0);
    REQUIRE(ferry_get_timeline(c, &tl) == 0);
    ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1};
    ZE_OK(zeEventPoolCreate(k.ctx, &pd, 1, &k.dev, &pool));
    ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, 0, ZE_EVENT_SCOPE_FLAG_HOST};
    ZE_OK(zeEventCreate(pool, &ed, &done));
  }
  ~App() {
    zeEventDestroy(done);
    zeEventPoolDestroy(pool);
    if (c != nullptr) {
      ferry_ze_release(c, k.drv);
      ferry_disconnect(c);
    }
  }
  // The list stops here until release(): a wait on the segment's app_value,
  // which only the test raises (ferry_signal).
  void hold() { REQUIRE(ferry_ze_wait_word_(k.drv, k.list, tl.app_value, ++gate) == 0); }
  void release() { REQUIRE(ferry_signal(c, gate) == 0); }
  void finish_queue() {
    ZE_OK(zeEventHostReset(done));
    ZE_OK(zeCommandListAppendBarrier(k.list, done, 0, nullptr));
    ZE_OK(zeEventHostSynchronize(done, UINT64_MAX));
  }
  std::vector<uint8_t> read(void* dev_ptr, size_t n) {
    std::vector<uint8_t> out(n);
    ZE_OK(zeEventHostReset(done));
    ZE_OK(zeCommandListAppendMemoryCopy(k.list, out.data(), dev_ptr, n, done, 0, nullptr));
    ZE_OK(zeEventHostSynchronize(done, UINT64_MAX));
    return out;
  }
  int upload(void* dst, const std::vector<uint8_t>& src, ferry_ticket* t) {
    return ferry_ze_upload(c, k.drv, k.list, dst, src.data(), src.size(), t);
  }
};

// The client's row in ferryd's status.
boost::property_tree::ptree row(const Daemon& d, ferry_client* c) {
  ferry_info info{};
  REQUIRE(ferry_get_info(c, &info) == 0);
  const auto st = d.status();
  for (const auto& [k, v] : st.get_child("clients"))
    if (v.get<uint64_t>("id") == info.client_id) return v;
  FAIL("client " << info.client_id << " not in status");
  return {};
}

}  // namespace

TEST_CASE("direct uploads: the application's list copies from ferry's staging, in its own order",
          "[direct][simonly]") {
  Daemon d;
  App a(d.socket);
  const size_t n = 1024, iters = 300;
  void* region = a.k.device_alloc(n);
  void* sums = a.k.device_alloc(sizeof(uint64_t) * iters);
  std::vector<std::vector<uint8_t>> sent;
  ferry_ticket last = 0;
  for (size_t i = 0; i < iters; ++i) {
    a.k.append_busy(20);  // a kernel that still reads the old bytes
    sent.push_back(bytes_for(i, n));
    ferry_ticket t = 0;
    REQUIRE(a.upload(region, sent.back(), &t) == 0);
    CHECK((t & FERRY_DIRECT_TICKET) != 0);
    CHECK(t > last);  // numbered in order
    last = t;
    // Reads the new bytes: the list's own order, no wait appended.
    a.k.append_checksum(region, n, static_cast<uint64_t*>(sums) + i, nullptr, nullptr);
  }
  REQUIRE(ferry_wait(a.c, last, 5'000'000'000) == 0);
  a.finish_queue();
  REQUIRE(ferry_flush(a.c, -1) == 0);
  std::vector<uint64_t> got(iters);
  auto raw = a.read(sums, sizeof(uint64_t) * iters);
  std::memcpy(got.data(), raw.data(), raw.size());
  size_t wrong = 0;
  for (size_t i = 0; i < iters; ++i) wrong += got[i] != ferry_sim_checksum(sent[i].data(), n);
  CHECK(wrong == 0);
  // ferryd copied nothing, but shows what the client did, in its row only.
  auto r = row(d, a.c);
  CHECK(r.get<uint64_t>("direct_uploads") == iters);
  CHECK(r.get<uint64_t>("direct_bytes") == iters * n);
  CHECK(r.get<uint64_t>("direct_in_flight") == 0);
  CHECK(r.get<uint64_t>("uploads") == 0);
  CHECK(d.status().get<uint64_t>("totals.uploads") == 0);
  CHECK(ferry_completed(a.c) == 0);  // the ring's tickets only
  zeMemFree(a.k.ctx, sums);
  zeMemFree(a.k.ctx, region);
}

TEST_CASE("a direct upload larger than the staging area goes through in pieces, staged by threads",
          "[direct][simonly]") {
  Daemon d({"--slots", "4", "--slot-size", "65536"});
  App a(d.socket);
  const size_t n = (4 * 65536) * 5 + 4093;  // five staging areas and an odd tail
  void* dst = a.k.device_alloc(n);
  auto src = bytes_for(7, n);
  ferry_ticket t = 0;
  REQUIRE(a.upload(dst, src, &t) == 0);
  std::fill(src.begin(), src.end(), 0);  // the source may be reused once the call returned
  REQUIRE(ferry_wait(a.c, t, 5'000'000'000) == 0);
  a.finish_queue();
  CHECK(a.read(dst, n) == bytes_for(7, n));
  // A ring upload after it shares the staging area and lands too.
  ferry_buffer b{};
  REQUIRE(ferry_buffer_alloc(a.c, 1 << 20, &b) == 0);
  auto v = bytes_for(9, 1 << 20);
  ferry_ticket rt = 0;
  REQUIRE(ferry_upload(a.c, b, 0, v.data(), v.size(), &rt) == 0);
  REQUIRE(ferry_wait(a.c, rt, 5'000'000'000) == 0);
  std::vector<uint8_t> back(v.size());
  REQUIRE(ferry_download(a.c, b, 0, back.data(), back.size()) == 0);
  CHECK(back == v);
  zeMemFree(a.k.ctx, dst);
}

TEST_CASE("staging is reused only after the held list copied it; others go on meanwhile",
          "[direct][simonly][isolation]") {
  Daemon d({"--slots", "4", "--slot-size", "16384"});
  App a(d.socket);
  const size_t n = 4096, count = 64;  // 256 KiB: four times the staging area
  void* dst = a.k.device_alloc(n * count);
  a.hold();
  std::atomic<int> result{1};
  std::atomic<size_t> returned{0};
  std::thread uploader([&] {
    int r = 0;
    for (size_t i = 0; i < count && r == 0; ++i) {
      auto v = bytes_for(i, n);
      r = a.upload(static_cast<char*>(dst) + i * n, v, nullptr);
      std::fill(v.begin(), v.end(), 0xee);  // reused at once
      if (r == 0) returned = i + 1;
    }
    result = r;
  });
  auto& words = *reinterpret_cast<ferry::proto::DirectWords*>(static_cast<char*>(a.tl.segment) +
                                                               ferry::proto::kDirectOffset);
  // What fits is appended at once; then the uploader waits for room, which
  // only the list's copies can free.
  REQUIRE(eventually([&] { return returned.load() >= 16; }));
  CHECK(returned.load() < count);
  CHECK(*a.tl.direct_completed == 0);
  CHECK(words.issued.load() >= 16);
  // Another client is not held by this one's list.
  Witness w(d.socket);
  CHECK(w.finish() >= 3);
  a.release();
  uploader.join();
  REQUIRE(result == 0);
  REQUIRE(ferry_flush(a.c, 5'000'000'000) == 0);
  a.finish_queue();
  auto got = a.read(dst, n * count);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i)
    wrong += !std::equal(got.begin() + static_cast<long>(i * n), got.begin() + static_cast<long>((i + 1) * n),
                         bytes_for(i, n).begin());
  CHECK(wrong == 0);
  zeMemFree(a.k.ctx, dst);
}

TEST_CASE("a list that never runs: the uploader times out, as a slot wait does", "[direct][simonly]") {
  Daemon d({"--slots", "2", "--slot-size", "16384"});
  ::setenv("FERRY_TIMEOUT_MS", "300", 1);
  App a(d.socket);
  ::unsetenv("FERRY_TIMEOUT_MS");
  void* dst = a.k.device_alloc(1 << 20);
  a.hold();
  auto v = bytes_for(1, 4096);
  int r = 0;
  size_t i = 0;
  for (; i < 64 && r == 0; ++i) r = a.upload(static_cast<char*>(dst) + i * 4096, v, nullptr);
  CHECK(r == -ETIMEDOUT);
  CHECK(i > 8);  // 32 KiB of staging took eight before it
  // The client is done for; the daemon, which copied nothing, is not.
  CHECK(a.upload(dst, v, nullptr) == -ETIMEDOUT);
  a.release();
  a.finish_queue();
  zeMemFree(a.k.ctx, dst);
  ferry_ze_release(a.c, a.k.drv);
  ferry_disconnect(a.c);
  a.c = nullptr;
  CHECK(d.holds_nothing());
}

TEST_CASE("direct uploads on a second list wait until the first list's are done", "[direct][simonly]") {
  Daemon d;
  ::setenv("FERRY_TIMEOUT_MS", "300", 1);
  App a(d.socket);
  ::unsetenv("FERRY_TIMEOUT_MS");
  ze_command_list_handle_t second{};
  ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, 0, 0, 0,
                             ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ZE_OK(zeCommandListCreateImmediate(a.k.ctx, a.k.dev, &qd, &second));
  void* dst = a.k.device_alloc(8192);
  a.hold();
  auto v1 = bytes_for(1, 4096), v2 = bytes_for(2, 4096);
  ferry_ticket t1 = 0, t2 = 0;
  REQUIRE(a.upload(dst, v1, &t1) == 0);
  // The first list has not run: its number could be passed by the second's.
  CHECK(ferry_ze_upload(a.c, a.k.drv, second, static_cast<char*>(dst) + 4096, v2.data(), v2.size(), &t2) ==
        -ETIMEDOUT);
  CHECK(ferry_wait(a.c, t1, 0) == -ETIMEDOUT);
  a.release();
  REQUIRE(ferry_ze_upload(a.c, a.k.drv, second, static_cast<char*>(dst) + 4096, v2.data(), v2.size(), &t2) == 0);
  CHECK(t2 > t1);
  REQUIRE(ferry_flush(a.c, 5'000'000'000) == 0);
  a.finish_queue();
  auto got = a.read(dst, 8192);
  CHECK(std::equal(v1.begin(), v1.end(), got.begin()));
  CHECK(std::equal(v2.begin(), v2.end(), got.begin() + 4096));
  zeCommandListDestroy(second);
  zeMemFree(a.k.ctx, dst);
}

namespace {
// ferry_direct_ops whose copy or write the "queue" refuses, and that record
// what they were asked.
struct Refusing {
  int copy_result = 0, write_result = 0;
  std::vector<uint64_t> written;
  static int copy(void* p, uint64_t, const void*, uint64_t) { return static_cast<Refusing*>(p)->copy_result; }
  static int write(void* p, volatile uint64_t* word, uint64_t value) {
    auto* r = static_cast<Refusing*>(p);
    if (r->write_result != 0) return r->write_result;
    r->written.push_back(value);
    *word = value;  // as the device would, right away
    return 0;
  }
  ferry_direct_ops ops() {
    ferry_direct_ops o{};
    o.size = sizeof o;
    o.ctx = this;
    o.queue = 1;
    o.copy = copy;
    o.write = write;
    return o;
  }
};
}  // namespace

TEST_CASE("direct uploads: misuse, a refused copy and a refused write", "[direct]") {
  Daemon d;
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  Refusing q;
  ferry_direct_ops ops = q.ops();
  std::vector<uint8_t> v(1000, 1);
  ferry_ticket t = 0;
  CHECK(ferry_upload_direct(c, v.data(), v.size(), nullptr, &t) == -EFAULT);
  CHECK(ferry_upload_direct(c, nullptr, v.size(), &ops, &t) == -EFAULT);
  CHECK(ferry_upload_direct(c, v.data(), 0, &ops, &t) == -EINVAL);
  ferry_direct_ops small = ops;
  small.size = 8;
  CHECK(ferry_upload_direct(c, v.data(), v.size(), &small, &t) == -EINVAL);
  ferry_direct_ops flagged = ops;
  flagged.flags = 1u << 4;  // no such flag
  CHECK(ferry_upload_direct(c, v.data(), v.size(), &flagged, &t) == -EINVAL);
  CHECK(std::string(ferry_last_error()).find("ferry_upload_direct") != std::string::npos);
  CHECK(ferry_wait(c, FERRY_DIRECT_TICKET | 1, 0) == -ESRCH);
  REQUIRE(ferry_upload_direct(c, v.data(), v.size(), &ops, &t) == 0);
  CHECK(t == (FERRY_DIRECT_TICKET | 1));
  CHECK(ferry_wait(c, t, 1'000'000'000) == 0);
  SECTION("a refused copy fails its ticket, and the next one goes on") {
    q.copy_result = -EIO;
    CHECK(ferry_upload_direct(c, v.data(), v.size(), &ops, &t) == -EIO);
    CHECK(t == (FERRY_DIRECT_TICKET | 2));
    CHECK(q.written.back() == 2);  // its number is written all the same
    CHECK(ferry_wait(c, t, 1'000'000'000) == -EIO);
    q.copy_result = 0;
    REQUIRE(ferry_upload_direct(c, v.data(), v.size(), &ops, &t) == 0);
    CHECK(ferry_flush(c, 1'000'000'000) == 0);
  }
  SECTION("a refused write: the client is done for, and says why") {
    q.write_result = -EIO;
    CHECK(ferry_upload_direct(c, v.data(), v.size(), &ops, &t) == -EIO);
    CHECK(std::string(ferry_last_error()).find("timeline word") != std::string::npos);
    q.write_result = 0;
    CHECK(ferry_upload_direct(c, v.data(), v.size(), &ops, &t) == -EIO);
  }
  ferry_disconnect(c);
  CHECK(d.holds_nothing());
}

TEST_CASE("direct uploads: a forked child gets ECHILD; a process that dies with copies queued harms no one",
          "[direct][simonly][fork]") {
  Daemon d;
  {
    ferry_client* c = nullptr;
    REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
    Refusing q;
    ferry_direct_ops ops = q.ops();
    std::vector<uint8_t> v(64, 1);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ferry_ticket t = 0;
      const int r = ferry_upload_direct(c, v.data(), v.size(), &ops, &t);
      _exit(r == -ECHILD && q.written.empty() ? 0 : 1);
    }
    int st = 0;
    REQUIRE(waitpid(child, &st, 0) == child);
    CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
    ferry_ticket t = 0;
    REQUIRE(ferry_upload_direct(c, v.data(), v.size(), &ops, &t) == 0);  // the parent goes on
    CHECK(t == (FERRY_DIRECT_TICKET | 1));
    REQUIRE(ferry_wait(c, t, 5'000'000'000) == 0);
    ferry_disconnect(c);
  }
  // A process whose own list holds direct copies from its staging (a wait
  // that never ends comes first in that list) is killed.
  const std::string exe = ferry::test::build_path("tests/direct_client");
  const std::string cmd = "exec " + exe + " " + d.socket + " 8 65536";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char line[64] = {};
  REQUIRE(std::fgets(line, sizeof line, p) != nullptr);
  long pid = 0;
  REQUIRE(std::sscanf(line, "ready %ld", &pid) == 1);
  auto r = d.status();
  uint64_t direct_in_flight = 0;
  for (const auto& [k, v] : r.get_child("clients")) direct_in_flight += v.get<uint64_t>("direct_in_flight");
  CHECK(direct_in_flight == 8);
  REQUIRE(::kill(static_cast<pid_t>(pid), SIGKILL) == 0);
  ::pclose(p);
  CHECK(d.holds_nothing());
  Witness w(d.socket);
  CHECK(w.finish() >= 3);
}

// ---------------------------------------------------------------- staging that grows
namespace {

// Hooks that import an area with the app's driver, as ferry_ze_import does
// the segment, and count what they were asked.
struct ZeHooks {
  ze_driver_handle_t drv = nullptr;
  std::atomic<int> attached{0}, detached{0};
  std::atomic<int> attached_elsewhere{0};  // attached on a thread other than the one that made these hooks
  std::thread::id owner = std::this_thread::get_id();
  static int attach(void* p, void* area, uint64_t bytes) {
    auto* h = static_cast<ZeHooks*>(p);
    auto f = (ferry_zex_import_fn)ferry_ze_ext_(h->drv, "zexDriverImportExternalPointer");
    if (f == nullptr || f(h->drv, area, bytes) != ZE_RESULT_SUCCESS) return -EIO;
    if (std::this_thread::get_id() != h->owner) ++h->attached_elsewhere;
    ++h->attached;
    return 0;
  }
  static void detach(void* p, void* area, uint64_t) {
    auto* h = static_cast<ZeHooks*>(p);
    if (auto f = (ferry_zex_release_fn)ferry_ze_ext_(h->drv, "zexDriverReleaseImportedPointer")) f(h->drv, area);
    ++h->detached;
  }
  ferry_staging_hooks hooks() {
    ferry_staging_hooks s{};
    s.size = sizeof s;
    s.ctx = this;
    s.attach = attach;
    s.detach = detach;
    return s;
  }
};

// ferry_ze_upload's ops with FERRY_DIRECT_NO_WAIT (and `more` flags).
int upload_no_wait(App& a, void* dst, const std::vector<uint8_t>& src, ferry_ticket* t, uint32_t more = 0) {
  ferry_ze_direct_ d{a.k.list, (ze_command_list_handle_t)ferry_ze_native_(ZEL_HANDLE_COMMAND_LIST, a.k.list),
                     static_cast<char*>(dst), (ferry_zex_write_fn)ferry_ze_ext_(a.k.drv, "zexCommandListAppendWriteToMemory")};
  ferry_direct_ops ops{};
  ops.size = sizeof ops;
  ops.flags = FERRY_DIRECT_NO_WAIT | more;
  ops.ctx = &d;
  ops.queue = reinterpret_cast<uint64_t>(a.k.list);
  ops.copy = ferry_ze_direct_copy_;
  ops.write = ferry_ze_direct_write_;
  return ferry_upload_direct(a.c, src.data(), src.size(), &ops, t);
}

uint64_t user_staging(const Daemon& d) {
  const auto st = d.status();
  for (const auto& [k, u] : st.get_child("users")) return u.get<uint64_t>("staging_bytes");
  return 0;
}

}  // namespace

TEST_CASE("staging that grows: uploads past a held list's staging take areas and return at once", "[direct][simonly]") {
  Daemon d({"--slots", "4", "--slot-size", "65536"});  // 256 KiB of staging
  App a(d.socket);
  ZeHooks h;
  h.drv = a.k.drv;
  const ferry_staging_hooks hooks = h.hooks();
  REQUIRE(ferry_set_staging_hooks(a.c, &hooks) == 0);
  const size_t n = 1 << 20;
  std::vector<void*> dst;
  std::vector<std::vector<uint8_t>> sent;
  a.hold();  // nothing the list is given runs yet: without areas, the second upload would wait
  for (int i = 0; i < 3; ++i) {
    dst.push_back(a.k.device_alloc(n));
    sent.push_back(bytes_for(100 + i, n));
    std::vector<uint8_t> src = sent.back();
    ferry_ticket t = 0;
    REQUIRE(upload_no_wait(a, dst.back(), src, &t) == 0);
    std::fill(src.begin(), src.end(), 0xEE);  // reused at once
  }
  CHECK(h.attached == 3);
  CHECK(row(d, a.c).get<uint64_t>("staging_area_bytes") >= 3 * n);
  CHECK(user_staging(d) >= 3 * n);
  a.release();
  a.finish_queue();
  for (int i = 0; i < 3; ++i) CHECK(a.read(dst[static_cast<size_t>(i)], n) == sent[static_cast<size_t>(i)]);
  // The queue copied from them: the next upload reuses an area, asks for none.
  const uint64_t before = user_staging(d);
  ferry_ticket t = 0;
  REQUIRE(upload_no_wait(a, dst[0], sent[1], &t) == 0);
  REQUIRE(ferry_wait(a.c, t, 5'000'000'000) == 0);
  CHECK(h.attached == 3);
  CHECK(user_staging(d) == before);
  CHECK(a.read(dst[0], n) == sent[1]);
  // Disconnected: detached, and no longer counted against the user.
  ferry_ze_release(a.c, a.k.drv);
  ferry_disconnect(a.c);
  a.c = nullptr;
  CHECK(h.detached == 3);
  CHECK(eventually([&] { return user_staging(d) == 0; }));
  for (void* p : dst) zeMemFree(a.k.ctx, p);
}

TEST_CASE("areas made ahead: ferry_staging_grow and FERRY_DIRECT_GROW_LATER make them on libferry's thread",
          "[direct][simonly]") {
  Daemon d({"--slots", "4", "--slot-size", "65536"});  // 256 KiB of staging
  App a(d.socket);
  ZeHooks h;
  h.drv = a.k.drv;
  const size_t n = 1 << 20;
  CHECK(ferry_staging_grow(a.c, n) == -ENOTSUP);  // no hooks: nothing to attach an area with
  const ferry_staging_hooks hooks = h.hooks();
  REQUIRE(ferry_set_staging_hooks(a.c, &hooks) == 0);
  CHECK(ferry_staging_grow(a.c, 0) == -EINVAL);
  CHECK(ferry_staging_grow(a.c, UINT64_MAX) == -EINVAL);  // would wrap in rounding up
  void* dst = a.k.device_alloc(n);
  a.hold();  // the list runs nothing yet: an upload of 1 MiB finds no room but in an area

  SECTION("ferry_staging_grow: the area is ready before the upload that needs it") {
    REQUIRE(ferry_staging_grow(a.c, n) == 0);
    REQUIRE(eventually([&] { return h.attached == 1; }));
    CHECK(h.attached_elsewhere == 1);
    CHECK(ferry_staging_grow(a.c, n / 2) == 0);  // a free one holds it: nothing more is made
    const auto sent = bytes_for(7, n);
    std::vector<uint8_t> src = sent;
    ferry_ticket t = 0;
    REQUIRE(upload_no_wait(a, dst, src, &t, FERRY_DIRECT_NO_GROW) == 0);  // NO_GROW: only a made one serves
    std::fill(src.begin(), src.end(), 0xEE);
    CHECK(h.attached == 1);
    a.release();
    a.finish_queue();
    CHECK(a.read(dst, n) == sent);
  }
  SECTION("FERRY_DIRECT_GROW_LATER: the upload goes on without one, the next finds it") {
    const auto sent = bytes_for(8, n);
    ferry_ticket t = 0;
    CHECK(upload_no_wait(a, dst, sent, &t, FERRY_DIRECT_GROW_LATER) == -EAGAIN);  // nothing appended
    REQUIRE(eventually([&] { return h.attached == 1; }));
    CHECK(h.attached_elsewhere == 1);
    REQUIRE(upload_no_wait(a, dst, sent, &t, FERRY_DIRECT_GROW_LATER) == 0);
    CHECK(h.attached == 1);
    // That area is busy until the list runs: a second upload asks for another.
    CHECK(upload_no_wait(a, dst, sent, &t, FERRY_DIRECT_GROW_LATER) == -EAGAIN);
    REQUIRE(eventually([&] { return h.attached == 2; }));
    a.release();
    a.finish_queue();
    CHECK(a.read(dst, n) == sent);
  }
  SECTION("an area made ahead and never used goes back by itself, no upload needed") {
    REQUIRE(ferry_staging_grow(a.c, n) == 0);
    REQUIRE(eventually([&] { return h.attached == 1; }));
    CHECK(eventually([&] { return user_staging(d) >= n; }));
    // The grower gives back areas unused for Areas::kIdle (10 s), looking every as long.
    CHECK(eventually([&] { return h.detached == 1 && user_staging(d) == 0; }, std::chrono::seconds(40)));
    a.release();
  }
  SECTION("a client whose areas are all busy, at its bound, is told -EAGAIN") {
    const auto sent = bytes_for(9, n);
    ferry_ticket t = 0;
    for (int i = 0; i < 8; ++i) {  // Areas::kMaxAreas, each held by an upload the list has not run
      CHECK(upload_no_wait(a, dst, sent, &t, FERRY_DIRECT_GROW_LATER) == -EAGAIN);
      REQUIRE(eventually([&] { return h.attached == i + 1; }));
      REQUIRE(upload_no_wait(a, dst, sent, &t, FERRY_DIRECT_GROW_LATER) == 0);
    }
    CHECK(ferry_staging_grow(a.c, n) == -EAGAIN);
    CHECK(upload_no_wait(a, dst, sent, &t, FERRY_DIRECT_GROW_LATER) == -EAGAIN);
    a.release();
    a.finish_queue();
    CHECK(a.read(dst, n) == sent);
    CHECK(h.attached == 8);
  }
  // Disconnected: the areas made ahead go as the others do.
  const int attached = h.attached;
  ferry_ze_release(a.c, a.k.drv);
  ferry_disconnect(a.c);
  a.c = nullptr;
  CHECK(h.detached == attached);
  CHECK(eventually([&] { return user_staging(d) == 0; }));
  zeMemFree(a.k.ctx, dst);
}

TEST_CASE("an area's copies still queued when ferryd goes read the area's bytes", "[direct][simonly]") {
  // A held list has a copy to run from a staging area when ferryd stops
  // (or an admin disconnects the client): the pages are the client's while
  // it maps them. ferryd punched them out at the session's end before, and
  // the copy delivered zeros.
  Daemon d({"--slots", "4", "--slot-size", "65536"});
  App a(d.socket);
  ZeHooks h;
  h.drv = a.k.drv;
  const ferry_staging_hooks hooks = h.hooks();
  REQUIRE(ferry_set_staging_hooks(a.c, &hooks) == 0);
  const size_t n = 4 << 20;
  void* dst = a.k.device_alloc(n);
  const auto sent = bytes_for(9, n);
  a.hold();
  ferry_ticket t = 0;
  REQUIRE(upload_no_wait(a, dst, sent, &t) == 0);
  REQUIRE(h.attached == 1);
  CHECK(d.stop() == 0);  // SIGTERM: ferryd drains its own copies and goes
  a.release();           // the list runs now
  a.finish_queue();
  CHECK(a.read(dst, n) == sent);
  zeMemFree(a.k.ctx, dst);
}

TEST_CASE("--user-staging bounds a user's areas: past it FERRY_DIRECT_NO_WAIT appends nothing", "[direct][simonly]") {
  Daemon d({"--slots", "4", "--slot-size", "65536", "--user-staging", "2097152"});
  App a(d.socket), b(d.socket);  // two clients of one user share its bound
  ZeHooks ha, hb;
  ha.drv = a.k.drv;
  hb.drv = b.k.drv;
  const ferry_staging_hooks hooks_a = ha.hooks(), hooks_b = hb.hooks();
  REQUIRE(ferry_set_staging_hooks(a.c, &hooks_a) == 0);
  REQUIRE(ferry_set_staging_hooks(b.c, &hooks_b) == 0);
  const size_t n = 1 << 20;
  void* da = a.k.device_alloc(n);
  void* db = b.k.device_alloc(n);
  a.hold();
  b.hold();
  ferry_ticket t = 0;
  REQUIRE(upload_no_wait(a, da, bytes_for(1, n), &t) == 0);  // a 2 MiB area: the whole bound
  const uint64_t issued = row(d, b.c).get<uint64_t>("direct_in_flight");
  CHECK(upload_no_wait(b, db, bytes_for(2, n), &t) == -EAGAIN);
  CHECK(row(d, b.c).get<uint64_t>("direct_in_flight") == issued);  // nothing appended
  CHECK(hb.attached == 0);
  // What b's staging holds is still b's: a small one goes through at once.
  REQUIRE(upload_no_wait(b, db, bytes_for(3, 4096), &t) == 0);
  a.release();
  b.release();
  a.finish_queue();
  b.finish_queue();
  CHECK(a.read(da, n) == bytes_for(1, n));
  // a's client goes: its area with it, and b may have one.
  ferry_ze_release(a.c, a.k.drv);
  ferry_disconnect(a.c);
  a.c = nullptr;
  REQUIRE(eventually([&] { return user_staging(d) == 0; }));
  b.hold();
  REQUIRE(upload_no_wait(b, db, bytes_for(4, n), &t) == 0);
  CHECK(hb.attached == 1);
  b.release();
  b.finish_queue();
  CHECK(b.read(db, n) == bytes_for(4, n));
  zeMemFree(a.k.ctx, da);
  zeMemFree(b.k.ctx, db);
}

TEST_CASE("a staging area ferryd took back reads as zeros, whatever its client kept mapped", "[direct]") {
  Daemon d({"--user-staging", "8388608"});
  RawClient r(d.socket);
  r.hello("areas");
  auto grow = proto::make<proto::StagingGrow>(proto::Type::staging_grow);
  grow.request = 7;
  grow.bytes = 3 << 20;
  r.send(grow);
  std::vector<uint8_t> msg;
  std::vector<int> fds;
  REQUIRE(proto::read_message(r.fd, msg, &fds) == 0);
  proto::StagingReply reply{};
  REQUIRE(proto::as(msg, &reply));
  REQUIRE(reply.status == 0);
  REQUIRE(fds.size() == 1);
  CHECK(reply.bytes == (4u << 20));  // whole steps of 2 MiB
  auto* p = static_cast<uint8_t*>(mmap(nullptr, reply.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0));
  // Sealed: the client cannot resize what ferryd counts.
  CHECK(ftruncate(fds[0], 64 << 20) != 0);
  ::close(fds[0]);
  REQUIRE(p != MAP_FAILED);
  std::memset(p, 0xAB, reply.bytes);
  auto rel = proto::make<proto::StagingRelease>(proto::Type::staging_release);
  rel.request = 8;
  rel.area = reply.area;
  r.send(rel);
  proto::Reply done{};
  REQUIRE(r.expect(proto::Type::reply, &done));
  CHECK(done.status == 0);
  size_t nonzero = 0;
  for (size_t i = 0; i < reply.bytes; i += 4096) nonzero += p[i] != 0;
  CHECK(nonzero == 0);
  munmap(p, reply.bytes);
  // An area it does not hold, 0 bytes, too many: refused, the session goes on.
  r.send(rel);
  REQUIRE(r.expect(proto::Type::reply, &done));
  CHECK(done.status == -ENOENT);
  for (uint64_t bytes : {uint64_t{0}, proto::kMaxStagingArea + 1}) {
    grow.bytes = bytes;
    r.send(grow);
    REQUIRE(proto::read_message(r.fd, msg, &fds) == 0);
    REQUIRE(proto::as(msg, &reply));
    CHECK(reply.status == -EINVAL);
  }
  // Past the user's bound: refused with the bound named (an Error first).
  grow.bytes = 16 << 20;
  r.send(grow);
  proto::Error e{};
  REQUIRE(r.expect(proto::Type::error, &e));
  CHECK(e.code == -EDQUOT);
  CHECK(std::string(e.text).find("--user-staging") != std::string::npos);
}

TEST_CASE("a departed client's staging areas count against its user while its process lives", "[direct]") {
  // The client may keep an area mapped after its session ended (ferryd only
  // closes its own descriptor): ending a session and starting another must
  // not buy more staging than --user-staging. The charge ends with the process.
  Daemon d({"--user-staging", "4194304"});
  int ready[2], go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  const pid_t child = fork_child([&] {
    RawClient r(d.socket);
    r.hello("keeper");
    if (map_area(r.grown_area(4 << 20), 4 << 20) == nullptr) return 2;
    r.end_session();  // the mapping stays
    char c = 1;
    if (::write(ready[1], &c, 1) != 1) return 3;
    return ::read(go[0], &c, 1) >= 0 ? 0 : 4;
  });
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  REQUIRE(eventually([&] { return d.status().get<uint64_t>("held.clients") == 0; }));
  CHECK(user_staging(d) == (4u << 20));  // the session went, the charge stays
  // Another session of the same user gets no more past the bound.
  RawClient again(d.socket);
  again.hello("again");
  CHECK(again.refusal_of_more_staging() == -EDQUOT);
  // The process goes: so does the charge.
  ::kill(child, SIGKILL);
  CHECK(reap(child) == 128 + SIGKILL);
  CHECK(eventually([&] { return user_staging(d) == 0; }));
  for (int f : {ready[0], ready[1], go[0], go[1]}) ::close(f);
}

namespace {
// A client process that grows a 4 MiB area and maps it, then lets `keep`
// hold it (a forked child, or a keeper it sends the descriptor to) while it
// ends its session and exits. Returns the pid that holds the area then.
pid_t area_kept_by_another(const std::string& socket, bool fork_it) {
  int to_keeper[2], ready[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, to_keeper) == 0);
  REQUIRE(::pipe(ready) == 0);
  // The keeper: maps what it is sent (or is the forked child), says ready, waits to be killed.
  const pid_t keeper = fork_it ? -1 : fork_child([&] {
    std::vector<uint8_t> byte;
    std::vector<int> fds;
    uint8_t b = 0;
    if (proto::read_exact(to_keeper[1], &b, 1, &fds) != 0 || fds.size() != 1) return 1;
    void* p = mmap(nullptr, 4 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    ::close(fds[0]);
    if (p == MAP_FAILED) return 2;
    static_cast<char*>(p)[0] = 1;
    if (::write(ready[1], "k", 1) != 1) return 3;
    for (;;) ::pause();
  });
  const pid_t client = fork_child([&] {
    RawClient r(socket);
    r.hello("grower");
    const int area = r.grown_area(4 << 20);
    if (area < 0) return 1;
    if (fork_it) {
      const pid_t child = ::fork();
      if (child == 0) {
        // The child: maps the area, ends the session (its copy of the
        // socket), and stays; its parent has exited by then.
        const bool mapped = map_area(area, 4 << 20) != nullptr;
        r.end_session();
        if (!mapped || ::write(ready[1], "c", 1) != 1) ::_exit(2);
        for (;;) ::pause();
      }
      char pid[16];
      std::snprintf(pid, sizeof pid, "%d", child);
      if (::write(to_keeper[0], pid, sizeof pid) != sizeof pid) return 3;
    } else {
      const uint8_t b = 1;
      if (proto::send_fd(to_keeper[0], &b, 1, area, 0) != 1) return 3;
    }
    return 0;  // exits: its session ends, its own files of the area go
  });
  CHECK(reap(client) == 0);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  pid_t holder = keeper;
  if (fork_it) {
    char pid[16] = {};
    REQUIRE(::read(to_keeper[1], pid, sizeof pid) == sizeof pid);
    holder = static_cast<pid_t>(std::atoi(pid));
  }
  for (int f : {to_keeper[0], to_keeper[1], ready[0], ready[1]}) ::close(f);
  return holder;
}
}  // namespace

TEST_CASE("a staging area stays charged while any process holds it: a forked child, a keeper it was passed to",
          "[direct]") {
  // ferryd watched the pid it saw at connect: a child forked after the
  // grow, or a keeper handed the descriptor, kept the pages alive after that
  // process exited, charged to nobody (6 rounds: 6 x --user-staging alive).
  Daemon d({"--user-staging", "4194304"});
  for (bool fork_it : {true, false}) {
    INFO((fork_it ? "a forked child" : "a keeper"));
    const pid_t holder = area_kept_by_another(d.socket, fork_it);
    REQUIRE(eventually([&] { return d.status().get<uint64_t>("held.clients") == 0; }));
    CHECK(user_staging(d) == (4u << 20));  // its client exited; the holder maps it
    RawClient again(d.socket);
    again.hello("again");
    CHECK(again.refusal_of_more_staging() == -EDQUOT);  // no more than --user-staging alive
    ::kill(holder, SIGKILL);
    if (!fork_it) reap(holder);  // the forked child is its exited parent's: init reaps it
    CHECK(eventually([&] { return user_staging(d) == 0; }));
  }
}

TEST_CASE("a staging area stays charged while its client maps it, with ferryd in a pid namespace of its own",
          "[direct]") {
  // Under the Kubernetes DaemonSet every client's pid reads 0 to ferryd:
  // nothing to watch, so no ended session's areas were charged at all.
  if (::geteuid() != 0 || ::access("/usr/bin/unshare", X_OK) != 0) {
    WARN("skipped: needs root and unshare(1) for a pid namespace");
    return;
  }
  const std::string socket = temp_socket();
  const pid_t ferryd = fork_child([&] {
    ::execl("/usr/bin/unshare", "unshare", "--pid", "--fork", "--kill-child", FERRYD_PATH, "--sim", "--socket", socket.c_str(),
            "--log-level", "warn", "--user-staging", "4194304", static_cast<char*>(nullptr));
    return 127;
  });
  REQUIRE(eventually([&] {
    const int fd = connect_unix(socket);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  }));
  int ready[2], go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  const pid_t client = fork_child([&] {
    RawClient r(socket);
    r.hello("keeper");
    const bool mapped = map_area(r.grown_area(4 << 20), 4 << 20) != nullptr;
    r.end_session();  // the mapping stays
    char c = 1;
    if (!mapped || ::write(ready[1], &c, 1) != 1) return 2;
    return ::read(go[0], &c, 1) >= 0 ? 0 : 3;
  });
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  auto staging = [&] {
    const auto st = status(socket);
    for (const auto& [k, u] : st.get_child("users")) return u.get<uint64_t>("staging_bytes");
    return uint64_t{0};
  };
  REQUIRE(eventually([&] { return status(socket).get<uint64_t>("held.clients") == 0; }));
  CHECK(staging() == (4u << 20));
  ::kill(client, SIGKILL);
  reap(client);
  CHECK(eventually([&] { return staging() == 0; }));
  ::kill(ferryd, SIGKILL);  // unshare; --kill-child: its child, ferryd, goes with it
  reap(ferryd);
  ::unlink(socket.c_str());
  for (int f : {ready[0], ready[1], go[0], go[1]}) ::close(f);
}

TEST_CASE("staging areas: tiny ones cost a whole step, and a user holds kMaxStagingAreas at most", "[direct]") {
  // Each area holds a descriptor of ferryd's: 20,000 areas of a page took
  // its descriptors (every new client refused) before either bound.
  Daemon d({"--user-staging", "1073741824"});
  RawClient r(d.socket);
  r.hello("areas");
  auto grow = proto::make<proto::StagingGrow>(proto::Type::staging_grow);
  grow.bytes = 4096;
  uint32_t granted = 0;
  int refused = 0;
  std::string why;
  for (uint32_t i = 0; i < proto::kMaxStagingAreas + 4; ++i) {
    grow.request = i + 1;
    r.send(grow);
    std::vector<uint8_t> msg;
    std::vector<int> fds;
    REQUIRE(proto::read_message(r.fd, msg, &fds) == 0);
    for (int f : fds) ::close(f);
    if (proto::type_of(msg) == proto::Type::error) {  // the refusal's reason, then its reply
      proto::Error e{};
      REQUIRE(proto::as(msg, &e));
      refused = e.code;
      why = e.text;
      continue;
    }
    proto::StagingReply reply{};
    REQUIRE(proto::as(msg, &reply));
    if (reply.status == 0) {
      ++granted;
      CHECK(reply.bytes == proto::kStagingAreaStep);
    }
  }
  CHECK(granted == proto::kMaxStagingAreas);
  CHECK(refused == -EDQUOT);
  CHECK(why.find("staging areas") != std::string::npos);
  const auto st = d.status();
  for (const auto& [k, u] : st.get_child("users"))
    CHECK(u.get<uint64_t>("staging_bytes") == uint64_t{proto::kMaxStagingAreas} * proto::kStagingAreaStep);
}
