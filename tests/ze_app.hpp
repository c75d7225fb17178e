// SPDX-License-Identifier: MIT
// An application's own Level Zero state on the simulated device, for tests
// that check what a consumer sees through its own context.
#pragma once

#include <ferry/ferry.h>
#include <level_zero/ze_api.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "ferry/sim.h"

#ifndef ZE_OK
#define ZE_OK(call) REQUIRE((call) == ZE_RESULT_SUCCESS)
#endif

namespace ferry::test {

// The consumer's own Level Zero state on the simulated device.
struct Consumer {
  ze_driver_handle_t drv{};
  ze_device_handle_t dev{};
  ze_context_handle_t ctx{};
  ze_command_list_handle_t list{};
  ze_module_handle_t mod{};
  ze_kernel_handle_t checksum{};
  ze_kernel_handle_t busy{};
  Consumer() {
    ZE_OK(zeInit(0));
    uint32_t n = 1;
    ZE_OK(zeDriverGet(&n, &drv));
    n = 1;
    ZE_OK(zeDeviceGet(drv, &n, &dev));
    ze_context_desc_t cd{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
    ZE_OK(zeContextCreate(drv, &cd, &ctx));
    ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, 0, 0, 0,
                               ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    ZE_OK(zeCommandListCreateImmediate(ctx, dev, &qd, &list));
    ze_module_desc_t md{ZE_STRUCTURE_TYPE_MODULE_DESC, nullptr, ZE_MODULE_FORMAT_NATIVE,
                        std::strlen(FERRY_SIM_BUILTIN_MODULE),
                        reinterpret_cast<const uint8_t*>(FERRY_SIM_BUILTIN_MODULE), nullptr, nullptr};
    ZE_OK(zeModuleCreate(ctx, dev, &md, &mod, nullptr));
    ze_kernel_desc_t kd{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, FERRY_SIM_KERNEL_CHECKSUM};
    ZE_OK(zeKernelCreate(mod, &kd, &checksum));
    ze_kernel_desc_t bd{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, FERRY_SIM_KERNEL_BUSY};
    ZE_OK(zeKernelCreate(mod, &bd, &busy));
  }
  ~Consumer() {
    zeKernelDestroy(busy);
    zeKernelDestroy(checksum);
    zeModuleDestroy(mod);
    zeCommandListDestroy(list);
    zeContextDestroy(ctx);
  }
  // Appends the checksum kernel over [p, p+n) into *out (device memory),
  // after `wait` (if any), signalling `done`.
  void append_checksum(void* p, uint64_t n, void* out, ze_event_handle_t wait, ze_event_handle_t done) {
    ZE_OK(zeKernelSetArgumentValue(checksum, 0, sizeof p, &p));
    ZE_OK(zeKernelSetArgumentValue(checksum, 1, sizeof n, &n));
    ZE_OK(zeKernelSetArgumentValue(checksum, 2, sizeof out, &out));
    ze_group_count_t one{1, 1, 1};
    ZE_OK(zeCommandListAppendLaunchKernel(list, checksum, &one, done, wait != nullptr ? 1 : 0,
                                          wait != nullptr ? &wait : nullptr));
  }
  // Appends the busy kernel: the engine is occupied for `us` microseconds.
  void append_busy(uint64_t us) {
    ZE_OK(zeKernelSetArgumentValue(busy, 0, sizeof us, &us));
    ze_group_count_t one{1, 1, 1};
    ZE_OK(zeCommandListAppendLaunchKernel(list, busy, &one, nullptr, 0, nullptr));
  }
  void* device_alloc(uint64_t bytes) {
    ze_device_mem_alloc_desc_t dd{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
    void* p = nullptr;
    ZE_OK(zeMemAllocDevice(ctx, &dd, bytes, 64, dev, &p));
    return p;
  }
  // An allocation of this context as ferry's Import takes it.
  ferry_ipc_handle ipc_handle(void* p, uint64_t bytes) {
    ze_ipc_mem_handle_t zh{};
    ZE_OK(zeMemGetIpcHandle(ctx, p, &zh));
    ferry_ipc_handle h{};
    h.kind = FERRY_IPC_LEVEL_ZERO;
    h.bytes = bytes;
    std::memcpy(h.data, zh.data, sizeof h.data);
    std::memcpy(&h.fd, zh.data, sizeof h.fd);
    return h;
  }
  // A host-visible pool of `events` events that may be shared (IPC), and
  // the handle ferry_event_pool_register takes for it.
  ferry_ipc_handle ipc_event_pool(uint32_t events, ze_event_pool_handle_t* pool) {
    ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr,
                            ZE_EVENT_POOL_FLAG_HOST_VISIBLE | ZE_EVENT_POOL_FLAG_IPC, events};
    ZE_OK(zeEventPoolCreate(ctx, &pd, 1, &dev, pool));
    ze_ipc_event_pool_handle_t ph{};
    ZE_OK(zeEventPoolGetIpcHandle(*pool, &ph));
    ferry_ipc_handle h{};
    h.kind = FERRY_IPC_LEVEL_ZERO;
    std::memcpy(h.data, ph.data, sizeof h.data);
    std::memcpy(&h.fd, ph.data, sizeof h.fd);
    return h;
  }
  uint64_t read_u64(void* dev_ptr, ze_event_handle_t e) {
    uint64_t v = 0;
    ZE_OK(zeEventHostReset(e));
    ZE_OK(zeCommandListAppendMemoryCopy(list, &v, dev_ptr, sizeof v, e, 0, nullptr));
    ZE_OK(zeEventHostSynchronize(e, UINT64_MAX));
    return v;
  }
};

}  // namespace ferry::test
