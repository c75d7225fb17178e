// SPDX-License-Identifier: MIT
// The other process of the simulated device's IPC tests. Receives a handle
// and its fd over fd 3 (SCM_RIGHTS), as a real application would from a
// socket, and uses it through its own context.
//   sim_ipc_peer mem    open a device allocation, checksum it, fill 4 KiB
//   sim_ipc_peer event  open an event pool; wait on event 0, signal event 1
//   sim_ipc_peer devices  report how many devices the driver shows
#include <level_zero/ze_api.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/fdpass.hpp"
#include "ferry/sim.h"

#define ZE(call)                                                                 \
  do {                                                                           \
    if ((call) != ZE_RESULT_SUCCESS) {                                           \
      std::fprintf(stderr, "sim_ipc_peer: %s failed\n", #call);                  \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

namespace {
int receive(char* data, size_t n) {
  int fd = -1;
  if (ferry::proto::recv_fds(3, data, n, 0, [&](int f) { fd = f; }) != static_cast<ssize_t>(n) || fd < 0) return -1;
  std::memcpy(data, &fd, sizeof fd);  // the handle now names our copy of the fd
  return fd;
}
void reply(uint64_t v) {
  if (write(3, &v, sizeof v) != sizeof v) std::perror("sim_ipc_peer: write");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string mode = argv[1];
  ZE(zeInit(0));
  uint32_t n = 1;
  ze_driver_handle_t drv = nullptr;
  ZE(zeDriverGet(&n, &drv));
  if (mode == "devices") {
    uint32_t count = 0;
    ZE(zeDeviceGet(drv, &count, nullptr));
    std::vector<ze_device_handle_t> all(count);
    ZE(zeDeviceGet(drv, &count, all.data()));
    std::vector<std::string> names;
    for (auto* d : all) {
      ze_device_properties_t p{};
      p.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
      ZE(zeDeviceGetProperties(d, &p));
      names.push_back(p.name);
    }
    // Distinct devices: distinct names (they carry the index).
    std::sort(names.begin(), names.end());
    reply(std::unique(names.begin(), names.end()) == names.end() ? count : 0);
    return 0;
  }
  ze_device_handle_t dev = nullptr;
  n = 1;
  ZE(zeDeviceGet(drv, &n, &dev));
  ze_context_desc_t cd{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
  ze_context_handle_t ctx = nullptr;
  ZE(zeContextCreate(drv, &cd, &ctx));
  ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, 1, 0, 0,
                             ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t list = nullptr;
  ZE(zeCommandListCreateImmediate(ctx, dev, &qd, &list));
  ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1};
  ze_event_pool_handle_t own = nullptr;
  ZE(zeEventPoolCreate(ctx, &pd, 1, &dev, &own));
  ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, 0, ZE_EVENT_SCOPE_FLAG_HOST};
  ze_event_handle_t done = nullptr;
  ZE(zeEventCreate(own, &ed, &done));

  if (mode == "mem") {
    ze_ipc_mem_handle_t h{};
    int fd = receive(h.data, sizeof h.data);
    if (fd < 0) return 1;
    void* p = nullptr;
    ZE(zeMemOpenIpcHandle(ctx, dev, h, 0, &p));
    void* base = nullptr;
    size_t size = 0;
    ZE(zeMemGetAddressRange(ctx, p, &base, &size));
    std::vector<uint8_t> host(size);
    ZE(zeCommandListAppendMemoryCopy(list, host.data(), p, size, done, 0, nullptr));
    ZE(zeEventHostSynchronize(done, UINT64_MAX));
    const uint8_t pattern = 0xab;
    ZE(zeEventHostReset(done));
    ZE(zeCommandListAppendMemoryFill(list, p, &pattern, 1, 4096, done, 0, nullptr));
    ZE(zeEventHostSynchronize(done, UINT64_MAX));
    reply(ferry_sim_checksum(host.data(), size));
    ZE(zeMemCloseIpcHandle(ctx, p));
    close(fd);
  } else if (mode == "event") {
    ze_ipc_event_pool_handle_t h{};
    int fd = receive(h.data, sizeof h.data);
    if (fd < 0) return 1;
    ze_event_pool_handle_t pool = nullptr;
    ZE(zeEventPoolOpenIpcHandle(ctx, h, &pool));
    ze_event_handle_t e0 = nullptr, e1 = nullptr;
    ed.index = 0;
    ZE(zeEventCreate(pool, &ed, &e0));
    ed.index = 1;
    ZE(zeEventCreate(pool, &ed, &e1));
    // The engine, not this thread, waits: ordering without the host.
    ZE(zeCommandListAppendWaitOnEvents(list, 1, &e0));
    ZE(zeCommandListAppendSignalEvent(list, e1));
    reply(1);
    ZE(zeEventHostSynchronize(e1, 5'000'000'000ull));
    zeEventDestroy(e0);
    zeEventDestroy(e1);
    ZE(zeEventPoolCloseIpcHandle(pool));
    close(fd);
  } else {
    return 2;
  }
  zeEventDestroy(done);
  zeEventPoolDestroy(own);
  zeCommandListDestroy(list);
  zeContextDestroy(ctx);
  return 0;
}
