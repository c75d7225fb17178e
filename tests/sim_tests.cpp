// SPDX-License-Identifier: MIT
// The simulated Level Zero device, exercised through the system loader and its
// validation layer (catch_main.cpp sets both up).
#include <fcntl.h>
#include <level_zero/loader/ze_loader.h>
#include <level_zero/ze_api.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <algorithm>
#include <vector>

#include "ferry/fdpass.hpp"
#include "ferry/sim.h"
#include "paths.hpp"
#include "sim_fixture.hpp"

extern char** environ;

using ferry::test::build_path;
using ferry::test::Sim;

namespace {

// The extension functions take the driver's own handles.
ze_command_list_handle_t native(ze_command_list_handle_t l) {
  ze_command_list_handle_t n = l;
  zelLoaderTranslateHandle(ZEL_HANDLE_COMMAND_LIST, l, reinterpret_cast<void**>(&n));
  return n;
}

// Intel's memory-operation extensions, as the compute runtime declares them.
struct WaitOnMemDesc {
  uint32_t action_flags;
  uint32_t wait_scope;
};
struct WriteToMemDesc {
  uint32_t write_scope;
};
constexpr uint32_t kWaitEqual = 1u << 0, kWaitGreaterEqual = 1u << 3;
using wait64_fn = ze_result_t (*)(ze_command_list_handle_t, WaitOnMemDesc*, void*, uint64_t, ze_event_handle_t);
using wait32_fn = ze_result_t (*)(ze_command_list_handle_t, WaitOnMemDesc*, void*, uint32_t, ze_event_handle_t);
using write_fn = ze_result_t (*)(ze_command_list_handle_t, WriteToMemDesc*, void*, uint64_t);

using import_fn = ze_result_t (*)(ze_driver_handle_t, void*, size_t);
using release_fn = ze_result_t (*)(ze_driver_handle_t, void*);
using fail_fn = ze_result_t (*)(ze_driver_handle_t, uint64_t, int);
using count_fn = ze_result_t (*)(ze_driver_handle_t, uint64_t*);

// Starts sim_ipc_peer with one end of a socket pair as its fd 3.
struct Peer {
  pid_t pid = -1;
  int sock = -1;
  explicit Peer(const char* mode) {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    const std::string peer = IPC_PEER_PATH;
    const char* argv[] = {peer.c_str(), mode, nullptr};
    REQUIRE(posix_spawn(&pid, peer.c_str(), &fa, nullptr, const_cast<char**>(argv), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    close(sv[1]);
    sock = sv[0];
  }
  void send_fd(int fd, const void* data, size_t n) {
    REQUIRE(ferry::proto::send_fd(sock, data, n, fd, 0) == static_cast<ssize_t>(n));
  }
  uint64_t read_u64() {
    uint64_t v = 0;
    REQUIRE(read(sock, &v, sizeof v) == static_cast<ssize_t>(sizeof v));
    return v;
  }
  void write_u64(uint64_t v) { REQUIRE(write(sock, &v, sizeof v) == static_cast<ssize_t>(sizeof v)); }
  int finish() {
    close(sock);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  }
};

}  // namespace

TEST_CASE("the loader finds the simulated device with a copy-only queue group", "[sim]") {
  Sim s;
  uint32_t n = 0;
  ZE_OK(zeDriverGet(&n, nullptr));
  CHECK(n == 1);
  ze_device_properties_t p{};
  p.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  ZE_OK(zeDeviceGetProperties(s.device, &p));
  CHECK(p.type == ZE_DEVICE_TYPE_GPU);
  CHECK(std::string(p.name).find("simulated") != std::string::npos);
  REQUIRE(s.copy_ordinal != UINT32_MAX);
  ze_driver_ipc_properties_t ip{ZE_STRUCTURE_TYPE_DRIVER_IPC_PROPERTIES, nullptr, 0};
  ZE_OK(zeDriverGetIpcProperties(s.driver, &ip));
  CHECK((ip.flags & ZE_IPC_PROPERTY_FLAG_MEMORY) != 0);
  CHECK((ip.flags & ZE_IPC_PROPERTY_FLAG_EVENT_POOL) != 0);
  // zeInit again (the loader itself calls the driver's twice): nothing changes.
  ZE_OK(zeInit(0));
  ze_driver_handle_t again = nullptr;
  n = 1;
  ZE_OK(zeDriverGet(&n, &again));
  CHECK(again == s.driver);
}

TEST_CASE("FERRY_SIM_DEVICES sets how many devices the driver shows", "[sim]") {
  setenv("FERRY_SIM_DEVICES", "3", 1);  // read by the peer's driver at its zeInit
  Peer peer("devices");
  unsetenv("FERRY_SIM_DEVICES");
  CHECK(peer.read_u64() == 3);
  CHECK(peer.finish() == 0);
}

TEST_CASE("host to device to host round trip, and allocation properties", "[sim]") {
  Sim s;
  const size_t n = 3 * 4096 + 17;
  void* dev = s.device_alloc(n);
  char* host = static_cast<char*>(s.host_alloc(n));
  std::vector<char> src(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<char>(i * 7 + 3);
  s.copy_sync(dev, src.data(), n);
  s.copy_sync(host, dev, n);
  s.copy_sync(back.data(), host, n);
  CHECK(back == src);

  auto type_of = [&](const void* p) {
    ze_memory_allocation_properties_t ap{ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES, nullptr,
                                         ZE_MEMORY_TYPE_FORCE_UINT32, 0, 0};
    ZE_OK(zeMemGetAllocProperties(s.ctx, p, &ap, nullptr));
    return ap.type;
  };
  CHECK(type_of(dev) == ZE_MEMORY_TYPE_DEVICE);
  CHECK(type_of(static_cast<char*>(dev) + 100) == ZE_MEMORY_TYPE_DEVICE);
  CHECK(type_of(host) == ZE_MEMORY_TYPE_HOST);
  CHECK(type_of(src.data()) == ZE_MEMORY_TYPE_UNKNOWN);
  ZE_OK(zeMemFree(s.ctx, dev));
  ZE_OK(zeMemFree(s.ctx, host));
  CHECK(type_of(src.data()) == ZE_MEMORY_TYPE_UNKNOWN);
}

TEST_CASE("a copy behind a held queue is NOT_READY, and HostSynchronize honours its timeout", "[sim]") {
  Sim s;
  void* dev = s.device_alloc(64);
  char src[64] = {1};
  ze_event_handle_t gate = s.events[0], done = s.events[1];
  ZE_OK(zeCommandListAppendWaitOnEvents(s.copy, 1, &gate));
  ZE_OK(zeCommandListAppendMemoryCopy(s.copy, dev, src, sizeof src, done, 0, nullptr));
  // A wait that would end as soon as the copy ran ends by its timeout.
  auto t0 = std::chrono::steady_clock::now();
  CHECK(zeEventHostSynchronize(done, 20'000'000) == ZE_RESULT_NOT_READY);
  CHECK(zeEventQueryStatus(done) == ZE_RESULT_NOT_READY);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(20));
  CHECK(zeEventHostSynchronize(done, 0) == ZE_RESULT_NOT_READY);
  ZE_OK(zeEventHostSignal(gate));
  ZE_OK(zeEventHostSynchronize(done, UINT64_MAX));
  ZE_OK(zeEventQueryStatus(done));
  ZE_OK(zeEventHostReset(done));
  CHECK(zeEventQueryStatus(done) == ZE_RESULT_NOT_READY);
  zeMemFree(s.ctx, dev);
}

TEST_CASE("the hazard: a pageable source is read when the copy executes", "[sim]") {
  Sim s;
  const size_t n = 8192;
  void* dev = s.device_alloc(n);
  std::vector<char> src(n, 'A'), back(n, 0);
  ze_event_handle_t gate = s.events[0], done = s.events[1];
  ZE_OK(zeCommandListAppendWaitOnEvents(s.copy, 1, &gate));
  ZE_OK(zeCommandListAppendMemoryCopy(s.copy, dev, src.data(), n, done, 0, nullptr));
  // The append has returned; the caller now reuses its buffer, as a runtime would.
  std::fill(src.begin(), src.end(), 'Z');
  ZE_OK(zeEventHostSignal(gate));
  ZE_OK(zeEventHostSynchronize(done, UINT64_MAX));
  s.copy_sync(back.data(), dev, n);
  CHECK(std::all_of(back.begin(), back.end(), [](char c) { return c == 'Z'; }));
  zeMemFree(s.ctx, dev);
}

TEST_CASE("commands execute in order on one queue", "[sim]") {
  Sim s;
  void* dev = s.device_alloc(sizeof(uint64_t));
  std::vector<uint64_t> values(200);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = i + 1;
    ZE_OK(zeCommandListAppendMemoryCopy(s.copy, dev, &values[i], sizeof(uint64_t), nullptr, 0, nullptr));
  }
  uint64_t back = 0;
  s.copy_sync(&back, dev, sizeof back);
  CHECK(back == values.size());

  // A busy kernel ahead of a copy on the compute queue: the copy's event may
  // not signal before the kernel's.
  ze_module_handle_t m = nullptr;
  ze_kernel_handle_t busy = s.kernel(FERRY_SIM_KERNEL_BUSY, &m);
  uint64_t us = 20'000;
  ZE_OK(zeKernelSetArgumentValue(busy, 0, sizeof us, &us));
  ze_group_count_t one{1, 1, 1};
  ZE_OK(zeCommandListAppendLaunchKernel(s.compute, busy, &one, s.events[0], 0, nullptr));
  ZE_OK(zeCommandListAppendMemoryCopy(s.compute, dev, &values[0], sizeof(uint64_t), s.events[1], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[1], UINT64_MAX));
  CHECK(zeEventQueryStatus(s.events[0]) == ZE_RESULT_SUCCESS);
  zeKernelDestroy(busy);
  zeModuleDestroy(m);
  zeMemFree(s.ctx, dev);
}

TEST_CASE("regular command lists run on a queue and signal a fence", "[sim]") {
  Sim s;
  ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, s.copy_ordinal, 0, 0,
                             ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_queue_handle_t q = nullptr;
  ZE_OK(zeCommandQueueCreate(s.ctx, s.device, &qd, &q));
  ze_command_list_desc_t ld{ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC, nullptr, s.copy_ordinal, 0};
  ze_command_list_handle_t l = nullptr;
  ZE_OK(zeCommandListCreate(s.ctx, s.device, &ld, &l));
  void* dev = s.device_alloc(256);
  uint8_t pattern = 0x5a;
  ZE_OK(zeCommandListAppendMemoryFill(l, dev, &pattern, 1, 256, nullptr, 0, nullptr));
  ZE_OK(zeCommandListAppendBarrier(l, nullptr, 0, nullptr));
  ZE_OK(zeCommandListAppendSignalEvent(l, s.events[2]));
  ZE_OK(zeCommandListClose(l));
  ze_fence_desc_t fd{ZE_STRUCTURE_TYPE_FENCE_DESC, nullptr, 0};
  ze_fence_handle_t f = nullptr;
  ZE_OK(zeFenceCreate(q, &fd, &f));
  CHECK(zeFenceQueryStatus(f) == ZE_RESULT_NOT_READY);
  ZE_OK(zeCommandQueueExecuteCommandLists(q, 1, &l, f));
  ZE_OK(zeFenceHostSynchronize(f, UINT64_MAX));
  ZE_OK(zeEventQueryStatus(s.events[2]));
  ZE_OK(zeCommandQueueSynchronize(q, UINT64_MAX));
  std::vector<uint8_t> back(256);
  s.copy_sync(back.data(), dev, back.size());
  CHECK(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0x5a; }));
  zeFenceDestroy(f);
  zeCommandListDestroy(l);
  zeCommandQueueDestroy(q);
  zeMemFree(s.ctx, dev);
}

TEST_CASE("built-in kernels: checksum and fill on device memory", "[sim]") {
  Sim s;
  const uint64_t n = 10000;
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 131);
  void* dev = s.device_alloc(n);
  void* sum = s.device_alloc(8);
  s.copy_sync(dev, data.data(), n);
  ze_module_handle_t m = nullptr;
  ze_kernel_handle_t k = s.kernel(FERRY_SIM_KERNEL_CHECKSUM, &m);
  ZE_OK(zeKernelSetArgumentValue(k, 0, sizeof dev, &dev));
  ZE_OK(zeKernelSetArgumentValue(k, 1, sizeof n, &n));
  ZE_OK(zeKernelSetArgumentValue(k, 2, sizeof sum, &sum));
  ze_group_count_t one{1, 1, 1};
  ZE_OK(zeCommandListAppendLaunchKernel(s.compute, k, &one, s.events[0], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[0], UINT64_MAX));
  uint64_t got = 0;
  s.copy_sync(&got, sum, 8);
  CHECK(got == ferry_sim_checksum(data.data(), n));
  // Kernels run on compute engines only.
  CHECK(zeCommandListAppendLaunchKernel(s.copy, k, &one, nullptr, 0, nullptr) != ZE_RESULT_SUCCESS);
  // A module that is not the built-in one does not build.
  ze_module_desc_t md{ZE_STRUCTURE_TYPE_MODULE_DESC, nullptr, ZE_MODULE_FORMAT_NATIVE, 3,
                      reinterpret_cast<const uint8_t*>("xyz"), nullptr, nullptr};
  ze_module_handle_t bad = nullptr;
  CHECK(zeModuleCreate(s.ctx, s.device, &md, &bad, nullptr) == ZE_RESULT_ERROR_MODULE_BUILD_FAILURE);
  ze_kernel_desc_t kd{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, "no-such-kernel"};
  ze_kernel_handle_t none = nullptr;
  CHECK(zeKernelCreate(m, &kd, &none) == ZE_RESULT_ERROR_INVALID_KERNEL_NAME);
  zeKernelDestroy(k);
  zeModuleDestroy(m);
  zeMemFree(s.ctx, dev);
  zeMemFree(s.ctx, sum);
}

TEST_CASE("zexDriverImportExternalPointer registers, refuses overlaps, releases", "[sim]") {
  Sim s;
  auto import = s.ext<import_fn>("zexDriverImportExternalPointer");
  auto release = s.ext<release_fn>("zexDriverReleaseImportedPointer");
  REQUIRE(import != nullptr);
  REQUIRE(release != nullptr);
  ze_driver_handle_t d = s.native_driver();
  std::vector<char> mem(1 << 16);
  ZE_OK(import(d, mem.data(), 4096));
  CHECK(import(d, mem.data(), 4096) != ZE_RESULT_SUCCESS);         // repeated
  CHECK(import(d, mem.data() + 100, 8192) != ZE_RESULT_SUCCESS);   // overlapping
  ZE_OK(import(d, mem.data() + 4096, 4096));                       // adjacent is fine
  CHECK(release(d, mem.data() + 8192) != ZE_RESULT_SUCCESS);       // never imported
  ZE_OK(release(d, mem.data()));
  ZE_OK(release(d, mem.data() + 4096));
  ZE_OK(import(d, mem.data(), mem.size()));
  ZE_OK(release(d, mem.data()));
  CHECK(import(nullptr, mem.data(), 16) != ZE_RESULT_SUCCESS);
}

TEST_CASE("the cost model: pageable sources cost more than host USM and imported ones", "[sim]") {
  Sim s;
  void* dev = s.device_alloc(4096);
  std::vector<char> pageable(4096, 1);
  void* usm = s.host_alloc(8192);  // room for a copy that starts inside it
  std::vector<char> imported(4096, 2);
  ZE_OK(s.ext<import_fn>("zexDriverImportExternalPointer")(s.native_driver(), imported.data(), imported.size()));
  // Which appends the model charges is counted, not timed: a loaded machine
  // (or a sanitizer) stretches every append alike.
  auto charged = s.ext<count_fn>(FERRY_SIM_EXT_PAGEABLE_APPENDS);
  REQUIRE(charged != nullptr);
  auto count = [&] {
    uint64_t n = 0;
    ZE_OK(charged(s.native_driver(), &n));
    return n;
  };
  auto append = [&](const void* src) {
    const uint64_t before = count();
    const auto t0 = std::chrono::steady_clock::now();
    ZE_OK(zeCommandListAppendMemoryCopy(s.copy, dev, src, 4096, nullptr, 0, nullptr));
    return std::make_pair(count() - before, std::chrono::steady_clock::now() - t0);
  };
  const auto [from_pageable, took] = append(pageable.data());
  CHECK(from_pageable == 1);
  // FERRY_SIM_PAGEABLE_US=20 (catch_main): the appending thread pays at least
  // that (a bound that load cannot break: it only adds).
  CHECK(took >= std::chrono::microseconds(20));
  CHECK(append(usm).first == 0);
  CHECK(append(imported.data()).first == 0);
  CHECK(append(static_cast<char*>(usm) + 100).first == 0);  // inside host USM
  s.copy_sync(dev, usm, 16);
  s.ext<release_fn>("zexDriverReleaseImportedPointer")(s.native_driver(), imported.data());
  CHECK(append(imported.data()).first == 1);  // released: pageable again
  s.copy_sync(dev, usm, 16);
  zeMemFree(s.ctx, usm);
  zeMemFree(s.ctx, dev);
}

TEST_CASE("fault injection: the Nth copy fails with DEVICE_LOST, later ones succeed", "[sim]") {
  Sim s;
  auto fail = s.ext<fail_fn>(FERRY_SIM_EXT_FAIL_COPY);
  REQUIRE(fail != nullptr);
  void* dev = s.device_alloc(64);
  uint64_t a = 1, b = 2, back = 0;
  s.copy_sync(dev, &a, 8);
  ZE_OK(fail(s.native_driver(), 2, 0));  // the second copy from now
  ZE_OK(zeCommandListAppendMemoryCopy(s.copy, dev, &a, 8, s.events[0], 0, nullptr));
  ZE_OK(zeCommandListAppendMemoryCopy(s.copy, dev, &b, 8, s.events[1], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[0], UINT64_MAX));
  CHECK(zeEventHostSynchronize(s.events[1], UINT64_MAX) == ZE_RESULT_ERROR_DEVICE_LOST);
  CHECK(zeEventQueryStatus(s.events[1]) == ZE_RESULT_ERROR_DEVICE_LOST);
  s.copy_sync(&back, dev, 8);
  CHECK(back == a);  // the failed copy wrote nothing
  s.copy_sync(dev, &b, 8);
  s.copy_sync(&back, dev, 8);
  CHECK(back == b);
  ZE_OK(zeDeviceGetStatus(s.device));

  // "lost": every later command fails and the device reports it.
  ZE_OK(fail(s.native_driver(), 1, 1));
  ZE_OK(zeCommandListAppendMemoryCopy(s.copy, dev, &a, 8, s.events[2], 0, nullptr));
  CHECK(zeEventHostSynchronize(s.events[2], UINT64_MAX) == ZE_RESULT_ERROR_DEVICE_LOST);
  CHECK(zeDeviceGetStatus(s.device) == ZE_RESULT_ERROR_DEVICE_LOST);
  CHECK(zeCommandListAppendMemoryCopy(s.copy, dev, &a, 8, nullptr, 0, nullptr) == ZE_RESULT_ERROR_DEVICE_LOST);
  ZE_OK(fail(s.native_driver(), 0, 0));  // disarm and recover, for the tests after this one
  ZE_OK(zeDeviceGetStatus(s.device));
  zeMemFree(s.ctx, dev);
}

TEST_CASE("misuse is refused with the right result", "[sim]") {
  Sim s;
  void* dev = s.device_alloc(100);
  char host[256] = {};
  // A copy that runs past the end of a known allocation.
  CHECK(zeCommandListAppendMemoryCopy(s.copy, dev, host, 101, nullptr, 0, nullptr) == ZE_RESULT_ERROR_INVALID_SIZE);
  CHECK(zeCommandListAppendMemoryCopy(s.copy, static_cast<char*>(dev) + 50, host, 51, nullptr, 0, nullptr) ==
        ZE_RESULT_ERROR_INVALID_SIZE);
  CHECK(zeCommandListAppendMemoryCopy(s.copy, host, dev, 200, nullptr, 0, nullptr) == ZE_RESULT_ERROR_INVALID_SIZE);
  // NULL pointers.
  CHECK(zeCommandListAppendMemoryCopy(s.copy, nullptr, host, 1, nullptr, 0, nullptr) ==
        ZE_RESULT_ERROR_INVALID_NULL_POINTER);
  CHECK(zeDeviceGetProperties(s.device, nullptr) == ZE_RESULT_ERROR_INVALID_NULL_POINTER);
  // A free of a pointer the driver never gave out.
  CHECK(zeMemFree(s.ctx, host) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
  // Bad ordinals and queue indices.
  ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, 7, 0, 0,
                             ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t l = nullptr;
  CHECK(zeCommandListCreateImmediate(s.ctx, s.device, &qd, &l) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
  qd.ordinal = 0;
  qd.index = 99;
  CHECK(zeCommandListCreateImmediate(s.ctx, s.device, &qd, &l) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
  // An event index outside its pool.
  ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 1000, 0, ZE_EVENT_SCOPE_FLAG_HOST};
  ze_event_handle_t e = nullptr;
  CHECK(zeEventCreate(s.pool, &ed, &e) != ZE_RESULT_SUCCESS);
  // Zero-size allocation.
  ze_device_mem_alloc_desc_t dd{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* p = nullptr;
  CHECK(zeMemAllocDevice(s.ctx, &dd, 0, 64, s.device, &p) != ZE_RESULT_SUCCESS);
  // An IPC handle only for the start of a device allocation.
  ze_ipc_mem_handle_t h{};
  CHECK(zeMemGetIpcHandle(s.ctx, static_cast<char*>(dev) + 8, &h) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
  zeMemFree(s.ctx, dev);
}

TEST_CASE("device memory IPC: another process opens, reads and writes the allocation", "[sim][ipc]") {
  Sim s;
  const uint64_t n = 1 << 16;
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i ^ (i >> 8));
  void* dev = s.device_alloc(n);
  s.copy_sync(dev, data.data(), n);
  ze_ipc_mem_handle_t h{};
  ZE_OK(zeMemGetIpcHandle(s.ctx, dev, &h));
  int fd = 0;
  std::memcpy(&fd, h.data, sizeof fd);  // the fd leads the handle, as on Intel's runtime
  Peer peer("mem");
  peer.send_fd(fd, h.data, sizeof h.data);
  // The peer copies the allocation back to its host, checksums it, then
  // fills the first 4 KiB with 0xab on the device.
  CHECK(peer.read_u64() == ferry_sim_checksum(data.data(), n));
  CHECK(peer.finish() == 0);
  std::vector<uint8_t> back(4096);
  s.copy_sync(back.data(), dev, back.size());
  CHECK(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0xab; }));
  zeMemFree(s.ctx, dev);
}

TEST_CASE("event pool IPC: events signal across processes", "[sim][ipc]") {
  Sim s(4, ZE_EVENT_POOL_FLAG_HOST_VISIBLE | ZE_EVENT_POOL_FLAG_IPC);
  ze_ipc_event_pool_handle_t h{};
  ZE_OK(zeEventPoolGetIpcHandle(s.pool, &h));
  int fd = 0;
  std::memcpy(&fd, h.data, sizeof fd);
  Peer peer("event");
  peer.send_fd(fd, h.data, sizeof h.data);
  // The peer's copy engine waits on our event 0, then signals event 1.
  CHECK(peer.read_u64() == 1);  // it is waiting
  // A wait that would end as soon as the peer signalled ends by its timeout.
  CHECK(zeEventHostSynchronize(s.events[1], 10'000'000) == ZE_RESULT_NOT_READY);
  ZE_OK(zeEventHostSignal(s.events[0]));
  ZE_OK(zeEventHostSynchronize(s.events[1], 5'000'000'000ull));
  CHECK(peer.finish() == 0);
}

TEST_CASE("memory sync: a wait on memory holds only its own queue until the word comes", "[sim][memsync]") {
  Sim s;
  auto wait64 = s.ext<wait64_fn>("zexCommandListAppendWaitOnMemory64");
  auto write = s.ext<write_fn>("zexCommandListAppendWriteToMemory");
  REQUIRE(wait64 != nullptr);
  REQUIRE(write != nullptr);
  auto* word = static_cast<uint64_t*>(s.host_alloc(64));
  __atomic_store_n(word, 0, __ATOMIC_RELEASE);
  void* dev = s.device_alloc(64);
  uint64_t a = 0x1111, b = 0x2222, back = 0;
  s.copy_sync(dev, &a, 8);
  // The compute queue: wait until word >= 5, then overwrite dev, then signal.
  WaitOnMemDesc wd{kWaitGreaterEqual, 0};
  ZE_OK(wait64(native(s.compute), &wd, word, 5, s.events[0]));
  ZE_OK(zeCommandListAppendMemoryCopy(s.compute, dev, &b, 8, s.events[1], 0, nullptr));
  // The copy queue is not held: it reads the old bytes meanwhile.
  s.copy_sync(&back, dev, 8);
  CHECK(back == a);
  __atomic_store_n(word, 4, __ATOMIC_RELEASE);  // not yet
  // Waits that would end as soon as the queue went on end by their timeouts.
  CHECK(zeEventHostSynchronize(s.events[0], 20'000'000) == ZE_RESULT_NOT_READY);
  CHECK(zeEventHostSynchronize(s.events[1], 1'000'000) == ZE_RESULT_NOT_READY);
  // Another queue of the device reaches the value: the wait ends, the copy runs.
  WriteToMemDesc wr{0};
  ZE_OK(write(native(s.copy), &wr, word, 7));
  ZE_OK(zeEventHostSynchronize(s.events[1], UINT64_MAX));
  CHECK(zeEventQueryStatus(s.events[0]) == ZE_RESULT_SUCCESS);
  CHECK(__atomic_load_n(word, __ATOMIC_ACQUIRE) == 7);
  s.copy_sync(&back, dev, 8);
  CHECK(back == b);
  zeMemFree(s.ctx, dev);
  zeMemFree(s.ctx, word);
}

TEST_CASE("memory sync: a write lands after the copies before it, in queue order", "[sim][memsync]") {
  Sim s;
  auto write = s.ext<write_fn>("zexCommandListAppendWriteToMemory");
  auto wait32 = s.ext<wait32_fn>("zexCommandListAppendWaitOnMemory");
  REQUIRE(wait32 != nullptr);
  auto* word = static_cast<uint64_t*>(s.host_alloc(64));
  *word = 0;
  auto* hold = static_cast<uint32_t*>(s.host_alloc(64));
  *hold = 0;
  void* dev = s.device_alloc(1 << 16);
  std::vector<uint8_t> src(1 << 16, 0x5a);
  WriteToMemDesc wr{0};
  // Held behind a 32-bit wait for equality, so the order is checked, not luck.
  WaitOnMemDesc wd{kWaitEqual, 0};
  ZE_OK(wait32(native(s.copy), &wd, hold, 1, nullptr));
  for (uint64_t i = 1; i <= 8; ++i) {
    ZE_OK(zeCommandListAppendMemoryCopy(s.copy, dev, src.data(), src.size(), nullptr, 0, nullptr));
    ZE_OK(write(native(s.copy), &wr, word, i));
  }
  // A wait for all of them that would end once they ran ends by its timeout.
  ZE_OK(zeCommandListAppendBarrier(s.copy, s.events[1], 0, nullptr));
  CHECK(zeEventHostSynchronize(s.events[1], 10'000'000) == ZE_RESULT_NOT_READY);
  CHECK(__atomic_load_n(word, __ATOMIC_ACQUIRE) == 0);  // nothing ran past the wait
  __atomic_store_n(hold, 1, __ATOMIC_RELEASE);
  ZE_OK(zeCommandListAppendBarrier(s.copy, s.events[0], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[0], UINT64_MAX));
  CHECK(__atomic_load_n(word, __ATOMIC_ACQUIRE) == 8);
  zeMemFree(s.ctx, dev);
  zeMemFree(s.ctx, word);
  zeMemFree(s.ctx, hold);
}

TEST_CASE("memory sync: bad descriptors are refused; a queue that failed a copy writes no more", "[sim][memsync]") {
  Sim s;
  auto wait64 = s.ext<wait64_fn>("zexCommandListAppendWaitOnMemory64");
  auto write = s.ext<write_fn>("zexCommandListAppendWriteToMemory");
  auto fail = s.ext<fail_fn>(FERRY_SIM_EXT_FAIL_COPY);
  auto* word = static_cast<uint64_t*>(s.host_alloc(64));
  *word = 0;
  WaitOnMemDesc none{0, 0};
  CHECK(wait64(native(s.copy), &none, word, 1, nullptr) == ZE_RESULT_ERROR_INVALID_ENUMERATION);
  WaitOnMemDesc wd{kWaitGreaterEqual, 0};
  CHECK(wait64(native(s.copy), nullptr, word, 1, nullptr) == ZE_RESULT_ERROR_INVALID_NULL_POINTER);
  CHECK(wait64(native(s.copy), &wd, reinterpret_cast<char*>(word) + 4, 1, nullptr) ==
        ZE_RESULT_ERROR_INVALID_ARGUMENT);  // misaligned
  WriteToMemDesc wr{0};
  CHECK(write(native(s.copy), &wr, nullptr, 1) == ZE_RESULT_ERROR_INVALID_NULL_POINTER);
  // A device that failed a copy does not then claim, through a write, that it is done.
  void* dev = s.device_alloc(64);
  uint64_t a = 1;
  ZE_OK(fail(s.native_driver(), 1, 0));
  ZE_OK(zeCommandListAppendMemoryCopy(s.copy, dev, &a, 8, nullptr, 0, nullptr));
  ZE_OK(write(native(s.copy), &wr, word, 1));
  ZE_OK(zeCommandListAppendBarrier(s.copy, s.events[0], 0, nullptr));
  // The barrier's event reports the failure before it; the word was not written.
  CHECK(zeEventHostSynchronize(s.events[0], UINT64_MAX) == ZE_RESULT_ERROR_DEVICE_LOST);
  CHECK(*word == 0);
  // Later copies work again (this fault was a single copy's), but the queue
  // writes no word any more: it cannot vouch for what ran before.
  uint64_t back = 0;
  s.copy_sync(dev, &a, 8);
  s.copy_sync(&back, dev, 8);
  CHECK(back == a);
  ZE_OK(write(native(s.copy), &wr, word, 2));
  ZE_OK(zeCommandListAppendBarrier(s.copy, s.events[1], 0, nullptr));
  zeEventHostSynchronize(s.events[1], UINT64_MAX);
  CHECK(*word == 0);
  ZE_OK(fail(s.native_driver(), 0, 0));
  zeMemFree(s.ctx, dev);
  zeMemFree(s.ctx, word);
}

TEST_CASE("synchronous mode: an immediate append and a queue's execute return once the work ran", "[sim][conformance]") {
  Sim s;
  ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, 0, 0, 0,
                             ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t sync = nullptr;
  ZE_OK(zeCommandListCreateImmediate(s.ctx, s.device, &qd, &sync));
  void* dev = s.device_alloc(1 << 20);
  {
    // The source is freed right after the append: a synchronous list read it already.
    std::vector<uint8_t> src(1 << 20, 0x6b);
    ZE_OK(zeCommandListAppendMemoryCopy(sync, dev, src.data(), src.size(), nullptr, 0, nullptr));
  }
  std::vector<uint8_t> back(1 << 20, 0);
  ZE_OK(zeCommandListAppendMemoryCopy(sync, back.data(), dev, back.size(), nullptr, 0, nullptr));
  CHECK(back == std::vector<uint8_t>(1 << 20, 0x6b));  // no wait: the append returned after the copy
  // A synchronous queue's execute waits for its lists, events they wait on included.
  ze_command_queue_handle_t q = nullptr;
  ZE_OK(zeCommandQueueCreate(s.ctx, s.device, &qd, &q));
  ze_command_list_desc_t ld{};
  ld.stype = ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC;
  ze_command_list_handle_t l = nullptr;
  ZE_OK(zeCommandListCreate(s.ctx, s.device, &ld, &l));
  ze_event_handle_t gate = s.events[0];
  ZE_OK(zeCommandListAppendBarrier(l, s.events[1], 1, &gate));
  ZE_OK(zeCommandListClose(l));
  std::atomic<bool> opened{false};
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a chance to return too early
    opened = true;
    zeEventHostSignal(gate);
  });
  ZE_OK(zeCommandQueueExecuteCommandLists(q, 1, &l, nullptr));
  CHECK(opened.load());  // it returned only after the gate opened
  CHECK(zeEventQueryStatus(s.events[1]) == ZE_RESULT_SUCCESS);
  opener.join();
  zeCommandListDestroy(l);
  zeCommandQueueDestroy(q);
  zeCommandListDestroy(sync);
  zeMemFree(s.ctx, dev);
}

TEST_CASE("device properties: the timer's resolution in both forms of the structure", "[sim][conformance]") {
  Sim s;
  ze_device_properties_t p{};
  p.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  ZE_OK(zeDeviceGetProperties(s.device, &p));
  CHECK(p.timerResolution == 1);  // nanoseconds per tick
  ze_device_properties_t p12{};
  p12.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2;
  ZE_OK(zeDeviceGetProperties(s.device, &p12));
  CHECK(p12.timerResolution == 1'000'000'000ull);  // ticks per second
}

// The spec has an event pool's events destroyed before the pool: a real
// driver may crash on a pool destroyed first (its events point into it), so
// the simulated one refuses it (and ferryd logs an error if a pool of its is
// refused). catch_main.cpp also turns on the loader's handle-lifetime and
// threading validation for every test and every ferryd they start.
TEST_CASE("an event pool with live events is not destroyed", "[sim][validation]") {
  Sim s;
  ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1};
  ze_event_pool_handle_t pool = nullptr;
  REQUIRE(zeEventPoolCreate(s.ctx, &pd, 1, &s.device, &pool) == ZE_RESULT_SUCCESS);
  ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, 0, ZE_EVENT_SCOPE_FLAG_HOST};
  ze_event_handle_t e = nullptr;
  REQUIRE(zeEventCreate(pool, &ed, &e) == ZE_RESULT_SUCCESS);
  CHECK(zeEventPoolDestroy(pool) == ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE);
  REQUIRE(zeEventDestroy(e) == ZE_RESULT_SUCCESS);
  CHECK(zeEventPoolDestroy(pool) == ZE_RESULT_SUCCESS);
}
