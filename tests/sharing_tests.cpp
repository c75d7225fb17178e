// SPDX-License-Identifier: MIT
// Producers fill device buffers that a consumer computes on: grants, export
// to the consumer's own Level Zero context, import of the consumer's own
// allocations, and device-side ordering through IPC events. The consumer is
// this test process (with its own context on the simulated device, through
// the real loader); producers are separate processes without any context.
#include <ferry/ferry.h>
#include <level_zero/ze_api.h>
#include <fcntl.h>
#include <spawn.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "daemon_fixture.hpp"
#include "ze_app.hpp"
#include "ferry/sim.h"

using namespace ferry::test;
namespace proto = ferry::proto;

namespace {

#define ZE_OK(call) REQUIRE((call) == ZE_RESULT_SUCCESS)

std::vector<uint8_t> frame(uint64_t bytes, unsigned seed) {
  std::vector<uint8_t> v(bytes);
  for (uint64_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
  return v;
}

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += d[p[i] >> 4], s += d[p[i] & 15];
  return s;
}

// Runs producer_client; returns its exit code (0, or the errno it failed with).
int producer(const std::string& socket, const ferry_token& t, uint64_t off, uint64_t bytes, unsigned seed,
             std::vector<std::string> extra = {}, int inherit_fd = -1) {
  const std::string exe = build_path("tests/producer_client");
  std::vector<std::string> args = {exe, socket, hex(t.bytes, sizeof t.bytes), std::to_string(off),
                                   std::to_string(bytes), std::to_string(seed)};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (inherit_fd >= 0) posix_spawn_file_actions_adddup2(&fa, inherit_fd, inherit_fd);  // clears CLOEXEC
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, exe.c_str(), &fa, nullptr, av.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

}  // namespace

TEST_CASE("grant, use, revoke: a producer uploads into the owner's buffer only while granted", "[sharing][grant]") {
  Daemon d;
  ferry_client* owner = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &owner) == 0);
  ferry_buffer b{};
  REQUIRE(ferry_buffer_alloc(owner, 65536, &b) == 0);
  ferry_token tok{};
  REQUIRE(ferry_buffer_grant(owner, b, FERRY_RIGHT_UPLOAD, &tok) == 0);

  // A producer process opens the token and uploads a frame at an offset.
  CHECK(producer(d.socket, tok, 1000, 20000, 7) == 0);
  std::vector<uint8_t> back(20000);
  REQUIRE(ferry_download(owner, b, 1000, back.data(), back.size()) == 0);
  CHECK(back == frame(20000, 7));

  // Within bounds only, and upload only.
  CHECK(producer(d.socket, tok, 60000, 10000, 1) == ERANGE);
  ferry_client* p = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &p) == 0);
  ferry_buffer pb{};
  uint64_t size = 0;
  REQUIRE(ferry_buffer_open(p, &tok, &pb, &size) == 0);
  CHECK(size == 65536);
  uint8_t x[16];
  CHECK(ferry_download(p, pb, 0, x, sizeof x) == -EACCES);
  CHECK(ferry_buffer_grant(p, pb, FERRY_RIGHT_UPLOAD, &tok) == -ENOENT);  // only the owner grants
  CHECK(ferry_buffer_revoke(p, pb, nullptr) == -ENOENT);

  // Revoked: the opened name stops working at once, and the token opens nothing.
  REQUIRE(ferry_buffer_revoke(owner, b, &tok) == 0);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(p, pb, 0, x, sizeof x, &t) == 0);
  CHECK(ferry_wait(p, t, -1) == -EACCES);
  CHECK(producer(d.socket, tok, 0, 100, 3) == EACCES);
  REQUIRE(ferry_download(owner, b, 1000, back.data(), back.size()) == 0);
  CHECK(back == frame(20000, 7));  // nothing after the revocation landed

  // Freeing the buffer ends every grant on it.
  ferry_token t2{};
  REQUIRE(ferry_buffer_grant(owner, b, FERRY_RIGHT_UPLOAD | FERRY_RIGHT_DOWNLOAD, &t2) == 0);
  ferry_buffer pb2{};
  REQUIRE(ferry_buffer_open(p, &t2, &pb2, nullptr) == 0);
  REQUIRE(ferry_download(p, pb2, 1000, x, sizeof x) == 0);  // download granted this time
  REQUIRE(ferry_buffer_free(owner, b) == 0);
  CHECK(ferry_upload(p, pb2, 0, x, sizeof x, &t) == 0);
  // Gone, as the header says: -ENOENT (a revoked grant is -EACCES).
  CHECK(ferry_wait(p, t, -1) == -ENOENT);
  ferry_disconnect(p);
  ferry_disconnect(owner);
  CHECK(d.holds_nothing());
}

TEST_CASE("a forged token opens nothing", "[sharing][grant]") {
  Daemon d;
  ferry_client* owner = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &owner) == 0);
  ferry_buffer b{};
  REQUIRE(ferry_buffer_alloc(owner, 4096, &b) == 0);
  ferry_token tok{};
  REQUIRE(ferry_buffer_grant(owner, b, FERRY_RIGHT_UPLOAD, &tok) == 0);
  ferry_client* p = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &p) == 0);
  ferry_buffer pb{};
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200; ++i) {
    ferry_token f = tok;
    if (i < 100) {
      f.bytes[i % 32] ^= static_cast<uint8_t>(1u << (i % 8));  // one bit off
    } else {
      for (auto& byte : f.bytes) byte = static_cast<uint8_t>(rng());
    }
    CHECK(ferry_buffer_open(p, &f, &pb, nullptr) == -EACCES);
  }
  ferry_token zero{};
  CHECK(ferry_buffer_open(p, &zero, &pb, nullptr) == -EACCES);
  CHECK(ferry_buffer_open(p, &tok, &pb, nullptr) == 0);
  ferry_disconnect(p);
  ferry_disconnect(owner);
}

TEST_CASE("export: the consumer opens a daemon buffer in its own context and checks what producers uploaded",
          "[sharing][export]") {
  Daemon d;
  Consumer k;
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  const uint64_t bytes = 1 << 20;
  ferry_buffer b{};
  REQUIRE(ferry_buffer_alloc(c, bytes, &b) == 0);
  ferry_token tok{};
  REQUIRE(ferry_buffer_grant(c, b, FERRY_RIGHT_UPLOAD, &tok) == 0);
  // Two producers fill the two halves.
  CHECK(producer(d.socket, tok, 0, bytes / 2, 11) == 0);
  CHECK(producer(d.socket, tok, bytes / 2, bytes / 2, 12) == 0);

  ferry_ipc_handle h{};
  REQUIRE(ferry_buffer_export(c, b, &h) == 0);
  CHECK(h.kind == FERRY_IPC_LEVEL_ZERO);
  CHECK(h.bytes == bytes);
  REQUIRE(h.fd >= 0);
  ze_ipc_mem_handle_t zh{};
  std::memcpy(zh.data, h.data, sizeof zh.data);
  void* p = nullptr;
  ZE_OK(zeMemOpenIpcHandle(k.ctx, k.dev, zh, 0, &p));
  close(h.fd);

  ze_device_mem_alloc_desc_t dd{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* sum = nullptr;
  ZE_OK(zeMemAllocDevice(k.ctx, &dd, 8, 8, k.dev, &sum));
  ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 2};
  ze_event_pool_handle_t pool = nullptr;
  ZE_OK(zeEventPoolCreate(k.ctx, &pd, 1, &k.dev, &pool));
  ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, 0, ZE_EVENT_SCOPE_FLAG_HOST};
  ze_event_handle_t done = nullptr, rd = nullptr;
  ZE_OK(zeEventCreate(pool, &ed, &done));
  ed.index = 1;
  ZE_OK(zeEventCreate(pool, &ed, &rd));
  k.append_checksum(p, bytes, sum, nullptr, done);
  ZE_OK(zeEventHostSynchronize(done, UINT64_MAX));
  auto expect = frame(bytes / 2, 11);
  auto second = frame(bytes / 2, 12);
  expect.insert(expect.end(), second.begin(), second.end());
  CHECK(k.read_u64(sum, rd) == ferry_sim_checksum(expect.data(), expect.size()));

  CHECK(ferry_buffer_export(c, ferry_buffer{b.id + 1000}, &h) == -ENOENT);
  ZE_OK(zeMemCloseIpcHandle(k.ctx, p));
  zeEventDestroy(done);
  zeEventDestroy(rd);
  zeEventPoolDestroy(pool);
  zeMemFree(k.ctx, sum);
  ferry_disconnect(c);
}

namespace {
// The consumer's allocation `mine` imported by an owner session and granted
// for uploads to a producer session, which opened it.
struct GrantedImport {
  ferry_client* owner = nullptr;
  ferry_client* producer = nullptr;
  ferry_buffer mine{};    // the owner's handle of the import
  ferry_buffer theirs{};  // the producer's
  GrantedImport(const std::string& socket, Consumer& k, void* memory, uint64_t bytes) {
    ferry_ipc_handle h = k.ipc_handle(memory, bytes);
    REQUIRE(ferry_connect(socket.c_str(), &owner) == 0);
    REQUIRE(ferry_buffer_import(owner, &h, &mine) == 0);
    ferry_token tok{};
    REQUIRE(ferry_buffer_grant(owner, mine, FERRY_RIGHT_UPLOAD, &tok) == 0);
    REQUIRE(ferry_connect(socket.c_str(), &producer) == 0);
    REQUIRE(ferry_buffer_open(producer, &tok, &theirs, nullptr) == 0);
  }
};
}  // namespace

TEST_CASE("import: uploads through ferry land in an allocation of the consumer's own context", "[sharing][import]") {
  Daemon d;
  Consumer k;
  const uint64_t bytes = 300000;
  void* mine = k.device_alloc(bytes);
  GrantedImport gi(d.socket, k, mine, bytes);
  ferry_client* c = gi.owner;
  const ferry_buffer b = gi.mine;
  // It has a fence, and is granted as an allocation is: a producer's upload
  // into it publishes into that fence.
  ferry_fence f{};
  REQUIRE(ferry_buffer_fence(c, b, &f) == 0);
  CHECK(*f.ready == 0);
  {
    ferry_client* p = gi.producer;
    const ferry_buffer pb = gi.theirs;
    auto other = frame(bytes, 9);
    ferry_iovec part{other.data(), bytes};
    ferry_upload_opts o{};
    o.size = sizeof o;
    o.publish = 7;
    ferry_ticket pt = 0;
    REQUIRE(ferry_upload_gather(p, pb, 0, &part, 1, &o, &pt) == 0);
    REQUIRE(ferry_wait(p, pt, -1) == 0);
    CHECK(ferry_fence_wait(c, b, 7, 5'000'000'000) == 0);
    CHECK(*f.ready == 7);
    ferry_disconnect(p);
  }
  auto src = frame(bytes, 5);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(c, b, 0, src.data(), bytes, &t) == 0);
  REQUIRE(ferry_wait(c, t, -1) == 0);
  // Read back through the consumer's own context, not through ferry.
  std::vector<uint8_t> back(bytes);
  ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1};
  ze_event_pool_handle_t pool = nullptr;
  ZE_OK(zeEventPoolCreate(k.ctx, &pd, 1, &k.dev, &pool));
  ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, 0, ZE_EVENT_SCOPE_FLAG_HOST};
  ze_event_handle_t e = nullptr;
  ZE_OK(zeEventCreate(pool, &ed, &e));
  ZE_OK(zeCommandListAppendMemoryCopy(k.list, back.data(), mine, bytes, e, 0, nullptr));
  ZE_OK(zeEventHostSynchronize(e, UINT64_MAX));
  CHECK(back == src);
  // A claim larger than the allocation is refused.
  ferry_ipc_handle h = k.ipc_handle(mine, bytes);
  h.bytes = bytes * 2;
  ferry_buffer big{};
  CHECK(ferry_buffer_import(c, &h, &big) == -EINVAL);
  CHECK(ferry_upload(c, b, bytes - 10, src.data(), 11, &t) == -ERANGE);
  REQUIRE(ferry_buffer_free(c, b) == 0);
  ferry_disconnect(c);
  zeEventDestroy(e);
  zeEventPoolDestroy(pool);
  ZE_OK(zeMemFree(k.ctx, mine));
}

TEST_CASE("the free of an import returns once ferryd no longer maps it: its copy in flight ended first",
          "[sharing][import]") {
  // A slow link: one slot's copy takes ~260 ms on the daemon's engine.
  Daemon d({"--slot-size", "262144"}, {{"FERRY_SIM_BANDWIDTH_GBPS", "0.001"}, {"FERRY_SIM_LATENCY_US", "0"}});
  Consumer k;
  const uint64_t bytes = 262144;
  void* mine = k.device_alloc(bytes);
  GrantedImport gi(d.socket, k, mine, bytes);
  ferry_client *c = gi.owner, *p = gi.producer;
  const ferry_buffer b = gi.mine, pb = gi.theirs;
  auto src = frame(bytes, 3);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(p, pb, 0, src.data(), bytes, &t) == 0);
  // The producer's copy is on the device (ferryd's status says so) ...
  REQUIRE(eventually([&] { return status(d.socket).get<uint64_t>("held.copies_in_flight") >= 1; }));
  // ... so the owner's free is answered only once it ended: the import was
  // mapped until then, and the owner may free its memory now.
  REQUIRE(ferry_buffer_free(c, b) == 0);
  CHECK(ferry_wait(p, t, 0) == 0);
  CHECK(status(d.socket).get<uint64_t>("held.buffers") == 0);
  // The session goes on as before.
  ferry_buffer again{};
  CHECK(ferry_buffer_alloc(c, 4096, &again) == 0);
  ZE_OK(zeMemFree(k.ctx, mine));
  ferry_disconnect(p);
  ferry_disconnect(c);
}

// Every count of status's "kept" and of the user's row (docs/DESIGN.md,
// "What ferryd keeps") back at its idle value after rounds in which every
// kind of client came and went: owners of allocations and imports, granted,
// producers through the grants (one killed mid-stream, one whose fenced
// upload is held for a release its owner never gives), an IPC event pool, a
// hold on a value that never comes, a staging area of a process that exits,
// a session closed for bad input. Exports are the one thing charged for
// ferryd's life: one row for the user, the bytes it exported.
TEST_CASE("what ferryd keeps returns to idle after every kind of client came and went", "[sharing][lifetime]") {
  Daemon d({"--slots", "4", "--slot-size", "65536"});
  Consumer k;
  const auto idle = status(d.socket);
  const uid_t me = getuid();
  const uint64_t bytes = 65536;
  for (int round = 1; round <= 3; ++round) {
    ferry_client* owner = nullptr;
    REQUIRE(ferry_connect(d.socket.c_str(), &owner) == 0);
    // An allocation, exported (charged for good), and an import, both granted.
    ferry_buffer alloc{}, imported{};
    REQUIRE(ferry_buffer_alloc(owner, bytes, &alloc) == 0);
    ferry_ipc_handle eh{};
    REQUIRE(ferry_buffer_export(owner, alloc, &eh) == 0);
    ::close(eh.fd);
    void* mine = k.device_alloc(bytes);
    ferry_ipc_handle ih = k.ipc_handle(mine, bytes);
    REQUIRE(ferry_buffer_import(owner, &ih, &imported) == 0);
    ferry_token ta{}, ti{};
    REQUIRE(ferry_buffer_grant(owner, alloc, FERRY_RIGHT_UPLOAD, &ta) == 0);
    REQUIRE(ferry_buffer_grant(owner, imported, FERRY_RIGHT_UPLOAD, &ti) == 0);
    // Producers: one uploads and goes, one is killed mid-stream.
    CHECK(producer(d.socket, ti, 0, 4096, round) == 0);
    const std::string exe = build_path("tests/producer_client");
    const std::string hx = hex(ta.bytes, 32);
    const char* argv[] = {exe.c_str(), d.socket.c_str(), hx.c_str(), "0", "60000", "1000000", nullptr};
    pid_t killed = -1;
    REQUIRE(posix_spawn(&killed, exe.c_str(), nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
    (void)d.client_of(killed, [](const auto& row) { return row.template get<uint64_t>("uploads") > 0; });
    ::kill(killed, SIGKILL);
    ::waitpid(killed, nullptr, 0);
    // A producer whose fenced upload waits for a release the owner never gives, and goes.
    {
      ferry_client* p = nullptr;
      REQUIRE(ferry_connect(d.socket.c_str(), &p) == 0);
      ferry_buffer pb{};
      REQUIRE(ferry_buffer_open(p, &ti, &pb, nullptr) == 0);
      std::vector<uint8_t> src(4096, 7);
      ferry_iovec part{src.data(), src.size()};
      ferry_upload_opts o{};
      o.size = sizeof o;
      o.after_release = 1000;
      o.publish = 1001;
      ferry_ticket t = 0;
      REQUIRE(ferry_upload_gather(p, pb, 0, &part, 1, &o, &t) == 0);
      REQUIRE(eventually([&] { return status(d.socket).get<uint64_t>("kept.held_transfers") >= 1; }));
      ferry_disconnect(p);  // its hold stays: the owner may still release
    }
    // An IPC event pool, and a hold on the owner's own value that never comes.
    ze_event_pool_handle_t pool = nullptr;
    const ferry_ipc_handle peh = k.ipc_event_pool(2, &pool);
    uint64_t pool_id = 0;
    REQUIRE(ferry_event_pool_register(owner, &peh, 2, &pool_id) == 0);
    std::vector<uint8_t> src(4096, 1);
    ferry_ticket held = 0;
    REQUIRE(ferry_upload_after(owner, alloc, 0, src.data(), src.size(), 1u << 30, &held) == 0);
    // A staging area of a process that connects, grows it, and exits.
    const pid_t grower = fork_child([&] {
      RawClient r(d.socket);
      r.hello("grower");
      return r.grown_area(1 << 20) >= 0 ? 0 : 3;  // held until it exits
    });
    CHECK(reap(grower) == 0);
    // A session closed for bad input.
    {
      RawClient bad(d.socket);
      const uint8_t junk[16] = {0xff, 0xff, 0xff, 0xff};
      bad.send_bytes(junk, sizeof junk);
      CHECK(bad.closed_by_peer());
    }
    // The owner goes: the producer's hold goes with the fence it waited on,
    // its grants and buffers go, the import is unmapped.
    ferry_disconnect(owner);
    ZE_OK(zeEventPoolDestroy(pool));
    // Everything back to idle (the departed hold and the exited process's
    // area charge go as their causes do: asked until they have).
    const auto kept_idle = idle.get_child("kept");
    auto back = [&](const boost::property_tree::ptree& st, std::string* why) {
      for (const auto& [key, v] : st.get_child("kept")) {
        uint64_t want = kept_idle.get<uint64_t>(key);
        if (key == "export_rows") want = 1;  // exports: charged for ferryd's life, one row for the user
        if (v.get_value<uint64_t>() != want) {
          *why = "kept." + key + " " + v.data() + " (idle " + std::to_string(want) + ")";
          return false;
        }
      }
      for (const auto& [k2, u] : st.get_child("users")) {
        if (u.get<uid_t>("uid") != me) continue;
        for (const char* key : {"clients", "buffers", "device_bytes", "grants", "opens", "imports", "event_pools",
                                "staging_bytes", "exports_kept_bytes"}) {
          const uint64_t want = std::string(key) == "exports_kept_bytes" ? round * bytes : 0;
          if (u.get<uint64_t>(key) != want) {
            *why = std::string("users.") + key + " " + u.get<std::string>(key);
            return false;
          }
        }
        if (u.get<uint64_t>("exported_bytes") != round * bytes) return *why = "users.exported_bytes", false;
      }
      return st.get<uint64_t>("held.clients") == 0 && st.get<uint64_t>("held.buffers") == 0;
    };
    std::string why;
    const bool idle_again = eventually([&] { return back(status(d.socket), &why); }, std::chrono::seconds(30));
    INFO("round " << round << ": " << why);
    CHECK(idle_again);
    ZE_OK(zeMemFree(k.ctx, mine));
  }
}

TEST_CASE("device-side ordering: the consumer's kernel waits for the upload's event, never sees a partial frame",
          "[sharing][events]") {
  // A slow link (0.2 GB/s): a 4 MiB frame takes ~20 ms on the daemon's engine.
  Daemon d({"--slot-size", "262144"}, {{"FERRY_SIM_BANDWIDTH_GBPS", "0.2"}, {"FERRY_SIM_LATENCY_US", "0"}});
  Consumer k;
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  const uint64_t bytes = 4 << 20;
  const int frames = 3;
  ferry_buffer b{};
  REQUIRE(ferry_buffer_alloc(c, bytes * frames, &b) == 0);
  ferry_token tok{};
  REQUIRE(ferry_buffer_grant(c, b, FERRY_RIGHT_UPLOAD, &tok) == 0);
  ferry_ipc_handle h{};
  REQUIRE(ferry_buffer_export(c, b, &h) == 0);
  ze_ipc_mem_handle_t zh{};
  std::memcpy(zh.data, h.data, sizeof zh.data);
  void* ring = nullptr;
  ZE_OK(zeMemOpenIpcHandle(k.ctx, k.dev, zh, 0, &ring));
  close(h.fd);

  // The consumer's IPC event pool: events 0..2 "frame k uploaded", 3..5 "checksum k done".
  ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr,
                          ZE_EVENT_POOL_FLAG_HOST_VISIBLE | ZE_EVENT_POOL_FLAG_IPC, 8};
  ze_event_pool_handle_t pool = nullptr;
  ZE_OK(zeEventPoolCreate(k.ctx, &pd, 1, &k.dev, &pool));
  std::vector<ze_event_handle_t> ev(8);
  for (uint32_t i = 0; i < 8; ++i) {
    ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, i, 0, ZE_EVENT_SCOPE_FLAG_HOST};
    ZE_OK(zeEventCreate(pool, &ed, &ev[i]));
  }
  ze_ipc_event_pool_handle_t ph{};
  ZE_OK(zeEventPoolGetIpcHandle(pool, &ph));
  int pool_fd = -1;
  std::memcpy(&pool_fd, ph.data, sizeof pool_fd);

  ze_device_mem_alloc_desc_t dd{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* sums = nullptr;
  ZE_OK(zeMemAllocDevice(k.ctx, &dd, 8 * frames, 8, k.dev, &sums));
  // Queue every checksum first, each behind its frame's event: the host does
  // not wait for any upload.
  for (int f = 0; f < frames; ++f)
    k.append_checksum(static_cast<char*>(ring) + f * bytes, bytes, static_cast<char*>(sums) + 8 * f, ev[f],
                      ev[3 + f]);
  for (int f = 0; f < frames; ++f) CHECK(zeEventQueryStatus(ev[3 + f]) == ZE_RESULT_NOT_READY);

  // Producers upload the frames, each signalling its event after the last byte.
  for (int f = 0; f < frames; ++f) {
    CHECK(producer(d.socket, tok, f * bytes, bytes, 40 + f,
                   {std::to_string(pool_fd), hex(reinterpret_cast<uint8_t*>(ph.data), 64), std::to_string(f)},
                   pool_fd) == 0);
  }
  for (int f = 0; f < frames; ++f) {
    ZE_OK(zeEventHostSynchronize(ev[3 + f], 10'000'000'000ull));
    auto want = frame(bytes, 40 + f);
    CHECK(k.read_u64(static_cast<char*>(sums) + 8 * f, ev[6]) == ferry_sim_checksum(want.data(), want.size()));
  }
  ferry_disconnect(c);
  ZE_OK(zeMemCloseIpcHandle(k.ctx, ring));
  for (auto* e : ev) zeEventDestroy(e);
  zeEventPoolDestroy(pool);
  zeMemFree(k.ctx, sums);
  CHECK(d.holds_nothing());
}

TEST_CASE("a producer or the consumer killed at random leaves nothing held", "[sharing][faults]") {
  Daemon d({"--slot-size", "65536"});
  for (int round = 0; round < 20; ++round) {
    ferry_client* owner = nullptr;
    REQUIRE(ferry_connect(d.socket.c_str(), &owner) == 0);
    ferry_buffer b{};
    REQUIRE(ferry_buffer_alloc(owner, 1 << 20, &b) == 0);
    ferry_token tok{};
    REQUIRE(ferry_buffer_grant(owner, b, FERRY_RIGHT_UPLOAD, &tok) == 0);
    // A producer streams into the granted buffer and is killed mid-stream.
    const std::string exe = build_path("tests/producer_client");
    pid_t pid = -1;
    std::string hx = hex(tok.bytes, 32);
    const char* argv[] = {exe.c_str(), d.socket.c_str(), hx.c_str(), "0", "1000000", "1", nullptr};
    REQUIRE(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
    // Killed at a state it reached, by turns: as it starts, once connected,
    // once its upload is in flight or done (unless it finished first).
    if (round % 3 == 1) (void)d.client_of(pid, [](const auto&) { return true; });
    if (round % 3 == 2) (void)d.client_of(pid, [](const auto& row) {
      return row.template get<uint64_t>("transfers_in_flight") + row.template get<uint64_t>("uploads") > 0;
    });
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    if (round % 2 == 0) {
      ferry_disconnect(owner);  // the consumer goes too: its grants end, its buffer is freed
    } else {
      // The owner stays; another producer still uploads through its grant.
      CHECK(producer(d.socket, tok, 0, 4096, 2) == 0);
      ferry_disconnect(owner);
    }
    CHECK(d.holds_nothing());
  }
}

TEST_CASE("the producer/consumer example checks every frame on the device", "[sharing][example]") {
  Daemon d({"--slot-size", "262144"});
  const std::string cmd = build_path("examples/producer_consumer") + " -s " + d.socket + " -p 3 -n 15 -b 700000";
  CHECK(std::system(cmd.c_str()) == 0);
  CHECK(d.holds_nothing());
}

TEST_CASE("the consumer killed while producers upload through its grants: nothing held, producers told",
          "[sharing][faults]") {
  Daemon d({"--slot-size", "65536"});
  const std::string owner_exe = build_path("tests/stream_client");
  const std::string producer_exe = build_path("tests/producer_client");
  for (int round = 0; round < 10; ++round) {
    // The owner: a separate process that allocates, grants, and streams into its own buffer.
    int out[2];
    REQUIRE(pipe2(out, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    const char* oargv[] = {owner_exe.c_str(), d.socket.c_str(), "grant", nullptr};
    pid_t owner = -1;
    REQUIRE(posix_spawn(&owner, owner_exe.c_str(), &fa, nullptr, const_cast<char**>(oargv), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    char msg[65] = {};
    size_t got = 0;
    while (got < sizeof msg) {
      ssize_t k = read(out[0], msg + got, sizeof msg - got);
      if (k <= 0) break;
      got += static_cast<size_t>(k);
    }
    REQUIRE(got == sizeof msg);
    close(out[0]);
    REQUIRE(msg[0] == 'r');
    const std::string token(msg + 1, 64);
    // Producers upload through the grant while the owner is killed.
    std::vector<pid_t> producers;
    for (int p = 0; p < 2; ++p) {
      const char* pargv[] = {producer_exe.c_str(), d.socket.c_str(), token.c_str(), "0", "1000000", "3", nullptr};
      pid_t pid = -1;
      REQUIRE(posix_spawn(&pid, producer_exe.c_str(), nullptr, nullptr, const_cast<char**>(pargv), environ) == 0);
      producers.push_back(pid);
    }
    // The owner is killed at a state the producers reached, by turns: as
    // they start, once one is connected, once one has its upload in flight
    // or done (unless it finished first).
    if (round % 3 == 1) (void)d.client_of(producers[0], [](const auto&) { return true; });
    if (round % 3 == 2) (void)d.client_of(producers[0], [](const auto& row) {
      return row.template get<uint64_t>("transfers_in_flight") + row.template get<uint64_t>("uploads") > 0;
    });
    kill(owner, SIGKILL);
    waitpid(owner, nullptr, 0);
    for (pid_t p : producers) {
      int st = 0;
      waitpid(p, &st, 0);
      // Finished before the owner died (0), or was told its grant is gone.
      const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      CHECK((rc == 0 || rc == EACCES || rc == ENOENT));
    }
    CHECK(d.holds_nothing());
  }
}

namespace {
// A simulated-device IPC handle (its layout: the fd first, then a magic) for
// memory the test made itself, the way a hostile client would.
constexpr uint32_t kSimIpcMagic = 0x46535043;
ferry_ipc_handle forged_handle(int fd, uint64_t bytes, uint32_t third) {
  ferry_ipc_handle h{};
  h.kind = FERRY_IPC_LEVEL_ZERO;
  h.bytes = bytes;
  h.fd = fd;
  struct {
    int32_t fd;
    uint32_t magic;
    uint32_t a;
    uint32_t b;
  } raw{fd, kSimIpcMagic, third, 0};
  std::memcpy(h.data, &raw, sizeof raw);
  return h;
}

// The daemon still serves: a new client uploads and reads its bytes back.
void still_serves(const std::string& socket) {
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(socket.c_str(), &c) == 0);
  ferry_buffer b{};
  REQUIRE(ferry_buffer_alloc(c, 4096, &b) == 0);
  std::vector<uint8_t> src(4096, 0x3d), back(4096);
  ferry_ticket t = 0;
  REQUIRE(ferry_upload(c, b, 0, src.data(), src.size(), &t) == 0);
  REQUIRE(ferry_wait(c, t, -1) == 0);
  REQUIRE(ferry_download(c, b, 0, back.data(), back.size()) == 0);
  CHECK(back == src);
  ferry_disconnect(c);
}
}  // namespace

TEST_CASE("memory a client can shrink is never mapped by the daemon (no SIGBUS)", "[sharing][faults][simonly]") {
  Daemon d;
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  SECTION("an exported buffer cannot be shrunk under the daemon") {
    ferry_buffer b{};
    REQUIRE(ferry_buffer_alloc(c, 1 << 16, &b) == 0);
    ferry_ipc_handle h{};
    REQUIRE(ferry_buffer_export(c, b, &h) == 0);
    CHECK(::ftruncate(h.fd, 0) == -1);
    CHECK(errno == EPERM);
    ::close(h.fd);
    std::vector<uint8_t> src(1 << 16, 9);
    ferry_ticket t = 0;
    REQUIRE(ferry_upload(c, b, 0, src.data(), src.size(), &t) == 0);
    CHECK(ferry_wait(c, t, -1) == 0);
  }
  SECTION("a handle whose fd is closed is refused in the client, and the connection lives") {
    int fd = ::memfd_create("closed", MFD_CLOEXEC);
    ferry_ipc_handle h = forged_handle(fd, 4096, 4096);
    ::close(fd);
    ferry_buffer b{};
    CHECK(ferry_buffer_import(c, &h, &b) == -EBADF);
    CHECK_THAT(ferry_last_error(), Catch::Contains("is not open"));
    uint64_t pool = 0;
    CHECK(ferry_event_pool_register(c, &h, 1, &pool) == -EBADF);
    ferry_buffer ok{};
    CHECK(ferry_buffer_alloc(c, 4096, &ok) == 0);  // still connected
  }
  SECTION("an import of memory the client could shrink is refused") {
    int fd = ::memfd_create("hostile", MFD_CLOEXEC);  // no seals
    REQUIRE(::ftruncate(fd, 1 << 20) == 0);
    ferry_ipc_handle h = forged_handle(fd, 1 << 20, 1 << 20);
    ferry_buffer b{};
    CHECK(ferry_buffer_import(c, &h, &b) == -EINVAL);
    ::ftruncate(fd, 0);  // had it been mapped, the next upload would fault the daemon
    ::close(fd);
  }
  SECTION("an event pool whose handle claims more events than its memory holds is refused") {
    int fd = ::memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);  // sealed, and empty
    ferry_ipc_handle h = forged_handle(fd, 0, 65536);
    uint64_t pool = 0;
    CHECK(ferry_event_pool_register(c, &h, 65536, &pool) == -EINVAL);
    ::close(fd);
  }
  SECTION("an event pool the client could shrink after registering is refused") {
    int fd = ::memfd_create("hostile", MFD_CLOEXEC);
    REQUIRE(::ftruncate(fd, 4096) == 0);
    ferry_ipc_handle h = forged_handle(fd, 0, 1);
    uint64_t pool = 0;
    CHECK(ferry_event_pool_register(c, &h, 1, &pool) == -EINVAL);
    ::ftruncate(fd, 0);
    ::close(fd);
  }
  ferry_disconnect(c);
  still_serves(d.socket);
}

namespace {
// A sealed memfd of `size` bytes, as a simulated allocation's IPC handle naming `claimed` of them.
ferry_ipc_handle sealed_handle(int* fd, uint64_t size, uint64_t claimed) {
  *fd = ::memfd_create("import", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(*fd >= 0);
  REQUIRE(::ftruncate(*fd, static_cast<off_t>(size)) == 0);
  REQUIRE(::fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  return forged_handle(*fd, claimed, static_cast<uint32_t>(claimed));
}
}  // namespace

TEST_CASE("an import counts its whole mapping against its user's memory; none larger than the device",
          "[sharing][limits][simonly]") {
  // Before: imports counted nothing, so one user mapped 128 TiB of memfds
  // into ferryd (everyone's allocations then failed), or 7 GB of uploads
  // into one, past --user-memory.
  Daemon d({"--user-memory", "1048576"});
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  int fd = -1;
  ferry_buffer b{};
  ferry_ipc_handle huge = sealed_handle(&fd, uint64_t{1} << 44, 4096);
  CHECK(ferry_buffer_import(c, &huge, &b) == -EINVAL);  // no device allocation is 16 TiB
  ::close(fd);
  ferry_ipc_handle big = sealed_handle(&fd, 2 << 20, 4096);
  CHECK(ferry_buffer_import(c, &big, &b) == -EDQUOT);  // it names 4 KiB of a 2 MiB mapping
  CHECK_THAT(ferry_last_error(), Catch::Contains("2097152 B more would pass --user-memory 1048576"));
  ::close(fd);
  ferry_buffer small{};
  ferry_ipc_handle half = sealed_handle(&fd, 512 * 1024, 4096);
  REQUIRE(ferry_buffer_import(c, &half, &small) == 0);
  ::close(fd);
  CHECK(ferry_buffer_alloc(c, 600 * 1024, &b) == -EDQUOT);  // the import's 512 KiB count
  REQUIRE(ferry_buffer_free(c, small) == 0);
  CHECK(ferry_buffer_alloc(c, 600 * 1024, &b) == 0);  // given back with it
  ferry_disconnect(c);
  CHECK(d.holds_nothing());
}

TEST_CASE("grants and opened buffers are bounded per user", "[sharing][limits][grant]") {
  Daemon d({"--max-grants", "3", "--max-opens", "2"});
  ferry_client *owner = nullptr, *user = nullptr, *other = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &owner) == 0);
  REQUIRE(ferry_connect(d.socket.c_str(), &user) == 0);
  REQUIRE(ferry_connect(d.socket.c_str(), &other) == 0);
  ferry_buffer b{}, ob{};
  REQUIRE(ferry_buffer_alloc(owner, 4096, &b) == 0);
  REQUIRE(ferry_buffer_alloc(other, 4096, &ob) == 0);
  ferry_token t[4]{};
  for (int i = 0; i < 3; ++i) REQUIRE(ferry_buffer_grant(owner, b, FERRY_RIGHT_UPLOAD, &t[i]) == 0);
  CHECK(ferry_buffer_grant(owner, b, FERRY_RIGHT_UPLOAD, &t[3]) == -EDQUOT);
  ferry_token mine{};
  // The bound is the user's: another connection of it gets no more (another
  // user's bound is its own: isolation_tests).
  CHECK(ferry_buffer_grant(other, ob, FERRY_RIGHT_UPLOAD, &mine) == -EDQUOT);
  CHECK(std::string(ferry_last_error()).find("3 grants, the most one user may (--max-grants 3)") != std::string::npos);
  REQUIRE(ferry_buffer_revoke(owner, b, &t[2]) == 0);  // a revoke gives the place back
  CHECK(ferry_buffer_grant(other, ob, FERRY_RIGHT_UPLOAD, &mine) == 0);
  REQUIRE(ferry_buffer_revoke(other, ob, &mine) == 0);
  CHECK(ferry_buffer_grant(owner, b, FERRY_RIGHT_UPLOAD, &t[2]) == 0);
  ferry_buffer o[3]{};
  REQUIRE(ferry_buffer_open(user, &t[0], &o[0], nullptr) == 0);
  REQUIRE(ferry_buffer_open(user, &t[1], &o[1], nullptr) == 0);
  CHECK(ferry_buffer_open(user, &t[2], &o[2], nullptr) == -EDQUOT);
  REQUIRE(ferry_buffer_free(user, o[0]) == 0);  // closing an opened buffer gives its place back
  CHECK(ferry_buffer_open(user, &t[2], &o[2], nullptr) == 0);
  ferry_disconnect(user);
  ferry_disconnect(other);
  ferry_disconnect(owner);
  CHECK(d.holds_nothing());
}

TEST_CASE("imports and event pools are bounded per user", "[sharing][limits][simonly]") {
  Daemon d({"--max-imports", "1", "--max-event-pools", "1"});
  Consumer k;
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  void* m1 = k.device_alloc(4096);
  void* m2 = k.device_alloc(4096);
  ferry_ipc_handle h1 = k.ipc_handle(m1, 4096), h2 = k.ipc_handle(m2, 4096);
  ferry_buffer b1{}, b2{};
  REQUIRE(ferry_buffer_import(c, &h1, &b1) == 0);
  CHECK(ferry_buffer_import(c, &h2, &b2) == -EDQUOT);
  REQUIRE(ferry_buffer_free(c, b1) == 0);
  CHECK(ferry_buffer_import(c, &h2, &b2) == 0);
  ze_event_pool_handle_t pools[2]{};
  uint64_t ids[2]{};
  for (int i = 0; i < 2; ++i) {
    const ferry_ipc_handle h = k.ipc_event_pool(4, &pools[i]);
    CHECK(ferry_event_pool_register(c, &h, 4, &ids[i]) == (i == 0 ? 0 : -EDQUOT));
  }
  ferry_disconnect(c);
  CHECK(d.holds_nothing());
  for (auto* p : pools) zeEventPoolDestroy(p);
  zeMemFree(k.ctx, m1);
  zeMemFree(k.ctx, m2);
}

TEST_CASE("exports stay charged to their user past free and disconnect, at most --user-memory of them, until ferryd "
          "restarts",
          "[sharing][limits][export]") {
  const std::vector<std::string> args{"--user-memory", "65536"};
  auto user_row = [](Daemon& d, const char* what) {
    const auto st = status(d.socket);
    for (const auto& [k, row] : st.get_child("users"))
      if (row.get<uid_t>("uid") == ::getuid()) return row.get<uint64_t>(what);
    return uint64_t{0};
  };
  // Allocate, export, free, disconnect, over several connections: an
  // importer may keep each round's memory alive, so each export stays
  // charged. Live allocations keep their own bound.
  auto round = [](const std::string& socket, uint64_t bytes) {
    ferry_client* c = nullptr;
    REQUIRE(ferry_connect(socket.c_str(), &c) == 0);
    ferry_buffer b{};
    REQUIRE(ferry_buffer_alloc(c, bytes, &b) == 0);
    ferry_ipc_handle h{};
    const int r = ferry_buffer_export(c, b, &h);
    const std::string why = r != 0 ? ferry_last_error() : "";
    if (r == 0 && h.fd >= 0) ::close(h.fd);  // the handle is written only on success
    REQUIRE(ferry_buffer_free(c, b) == 0);
    ferry_disconnect(c);
    return std::make_pair(r, why);
  };
  {
    Daemon d(args);
    CHECK(round(d.socket, 32768).first == 0);
    CHECK(user_row(d, "exported_bytes") == 32768);
    CHECK(eventually([&] { return user_row(d, "exports_kept_bytes") == 32768; }));
    CHECK(round(d.socket, 32768).first == 0);
    for (int i = 0; i < 3; ++i) {
      const auto [r, why] = round(d.socket, 32768);
      CHECK(r == -EDQUOT);
      CHECK_THAT(why, Catch::EndsWith(": exports 65536 B + 32768 B > export allowance --user-memory 65536"));
    }
    CHECK(user_row(d, "exported_bytes") == 65536);
    CHECK(d.holds_nothing());  // nothing a client holds: the charge is the user's
    // An export of one buffer, repeated, counts once; live memory keeps its whole bound.
    ferry_client* c = nullptr;
    REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
    ferry_buffer b{};
    CHECK(ferry_buffer_alloc(c, 65536, &b) == 0);
    ferry_disconnect(c);
    // ferryctl shows it, per user and as metrics.
    const auto [rc, out] = run_command(std::string(FERRYCTL_PATH) + " --socket " + d.socket + " status");
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::Contains("EXPORTS") && Catch::Contains("64 KiB") &&
                        Catch::Contains("charged until ferryd restarts"));
    const auto [mrc, metrics] = run_command(std::string(FERRYCTL_PATH) + " --socket " + d.socket + " metrics");
    CHECK(mrc == 0);
    CHECK_THAT(metrics, Catch::Contains("ferry_user_exports_kept_bytes{") && Catch::Contains("} 65536"));
  }
  // A restart releases the charge.
  Daemon d(args);
  CHECK(user_row(d, "exported_bytes") == 0);
  CHECK(round(d.socket, 65536).first == 0);
}

TEST_CASE("what a client held goes back at free and at disconnect: the daemon's descriptors and mappings, counted",
          "[sharing][limits][simonly]") {
  // No segment pool: a client's segment is made at its Hello and unmapped
  // when it goes, so the counts return exactly to where they were.
  Daemon d({"--segment-pool", "0"});
  Consumer k;
  auto counts = [&] { return std::make_pair(fd_count(d.pid), memfd_map_count(d.pid)); };
  // Counted once the daemon holds no socket but these (a status request's
  // connection closes a moment after its reply).
  auto sockets = [&] {
    size_t n = 0;
    for (int fd = 0; fd < 1024; ++fd) {
      char target[64] = {};
      const std::string p = "/proc/" + std::to_string(d.pid) + "/fd/" + std::to_string(fd);
      n += ::readlink(p.c_str(), target, sizeof target - 1) > 0 && std::strncmp(target, "socket:", 7) == 0;
    }
    return n;
  };
  REQUIRE(d.holds_nothing());
  REQUIRE(eventually([&] { return sockets() == 1; }));  // the listening one
  const auto before = counts();
  ferry_client* c = nullptr;
  REQUIRE(ferry_connect(d.socket.c_str(), &c) == 0);
  // A reply after the Welcome: the segment's descriptor sent with it is closed by now.
  REQUIRE(ferry_buffer_free(c, ferry_buffer{999}) == -ENOENT);
  const auto connected = counts();
  // An allocation, freed: its descriptor and mapping go at once.
  ferry_buffer b{};
  REQUIRE(ferry_buffer_alloc(c, 1 << 16, &b) == 0);
  CHECK(counts() != connected);  // the simulated allocation holds a memfd and a mapping in ferryd
  REQUIRE(ferry_buffer_free(c, b) == 0);
  CHECK(eventually([&] { return counts() == connected; }));
  // Then everything at once: exported allocations (twice each), imports, IPC event pools.
  std::vector<void*> theirs;
  std::vector<ze_event_pool_handle_t> pools;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(ferry_buffer_alloc(c, 1 << 16, &b) == 0);
    for (int j = 0; j < 2; ++j) {
      ferry_ipc_handle h{};
      REQUIRE(ferry_buffer_export(c, b, &h) == 0);
      if (h.fd >= 0) ::close(h.fd);
    }
    theirs.push_back(k.device_alloc(4096));
    ferry_ipc_handle ih = k.ipc_handle(theirs.back(), 4096);
    ferry_buffer imported{};
    REQUIRE(ferry_buffer_import(c, &ih, &imported) == 0);
    pools.emplace_back();
    const ferry_ipc_handle eh = k.ipc_event_pool(4, &pools.back());
    uint64_t pool = 0;
    REQUIRE(ferry_event_pool_register(c, &eh, 4, &pool) == 0);
  }
  const auto holding = counts();
  INFO("descriptors " << before.first << " -> " << holding.first << ", mappings " << before.second << " -> "
                      << holding.second);
  CHECK(holding.first > connected.first);
  CHECK(holding.second > connected.second);
  ferry_disconnect(c);
  CHECK(d.holds_nothing());
  CHECK(eventually([&] { return sockets() == 1 && counts() == before; }));
  for (auto* p : pools) zeEventPoolDestroy(p);
  for (void* m : theirs) zeMemFree(k.ctx, m);
}

TEST_CASE("a burst of copies grows the daemon's event pools, which shrink back once it is over", "[sharing][limits][simonly]") {
  // A slow simulated link keeps copies in flight: 6 clients with 64 tickets
  // each queue more copies than one pool of the daemon's events holds (256).
  Daemon d({"--segment-pool", "0"}, {{"FERRY_SIM_LATENCY_US", "2000"}});
  REQUIRE(d.holds_nothing());
  std::vector<ferry_client*> cs(6, nullptr);
  std::vector<ferry_buffer> bufs(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    REQUIRE(ferry_connect(d.socket.c_str(), &cs[i]) == 0);
    REQUIRE(ferry_buffer_alloc(cs[i], 1 << 16, &bufs[i]) == 0);
  }
  // Every copy once, so the first pool exists and the count below is idle's.
  for (size_t i = 0; i < cs.size(); ++i) {
    ferry_ticket t = 0;
    const uint8_t byte = 1;
    REQUIRE(ferry_upload(cs[i], bufs[i], 0, &byte, 1, &t) == 0);
    REQUIRE(ferry_wait(cs[i], t, -1) == 0);
  }
  const size_t idle = fd_count(d.pid);
  std::vector<uint8_t> src(4096, 7);
  std::vector<std::thread> burst;
  std::atomic<int> failed{0};  // (Catch's assertions are for this thread only)
  for (size_t i = 0; i < cs.size(); ++i)
    burst.emplace_back([&, i] {
      ferry_ticket t = 0;
      for (int k = 0; k < 64; ++k) failed += ferry_upload(cs[i], bufs[i], 0, src.data(), src.size(), &t) != 0;
      failed += ferry_wait(cs[i], t, -1) != 0;
    });
  // The burst made a second pool (one descriptor more in the simulation)...
  CHECK(eventually([&] { return fd_count(d.pid) > idle; }, std::chrono::seconds(10)));
  for (auto& t : burst) t.join();
  CHECK(failed == 0);
  // ...which goes once no copy has been in flight for a second, as the poller
  // next goes to sleep (before: it stayed for good). A request that moves no
  // copy and opens no descriptor wakes it.
  CHECK(eventually(
      [&] { return ferry_buffer_free(cs[0], ferry_buffer{999}) == -ENOENT && fd_count(d.pid) == idle; },
      std::chrono::seconds(10)));
  for (auto* c : cs) ferry_disconnect(c);
}
