// SPDX-License-Identifier: MIT
// The simulated device as most sim tests need it: one driver, device and
// context through the system loader (catch_main.cpp sets it and the
// validation layer up), an immediate list on each queue group, and a pool of
// host-visible events.
#pragma once

#include <level_zero/loader/ze_loader.h>
#include <level_zero/ze_api.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "ferry/sim.h"

namespace ferry::test {

#define ZE_OK(call) REQUIRE((call) == ZE_RESULT_SUCCESS)

// One driver, device, context, an immediate list on each queue group, and a
// host-visible event pool: what nearly every test needs.
struct Sim {
  ze_driver_handle_t driver = nullptr;
  ze_device_handle_t device = nullptr;
  ze_context_handle_t ctx = nullptr;
  ze_command_list_handle_t copy = nullptr;
  ze_command_list_handle_t compute = nullptr;
  ze_event_pool_handle_t pool = nullptr;
  std::vector<ze_event_handle_t> events;
  uint32_t copy_ordinal = UINT32_MAX;

  explicit Sim(uint32_t nevents = 8, ze_event_pool_flags_t pool_flags = ZE_EVENT_POOL_FLAG_HOST_VISIBLE) {
    ZE_OK(zeInit(0));
    uint32_t n = 1;
    ZE_OK(zeDriverGet(&n, &driver));
    n = 1;
    ZE_OK(zeDeviceGet(driver, &n, &device));
    uint32_t ng = 0;
    ZE_OK(zeDeviceGetCommandQueueGroupProperties(device, &ng, nullptr));
    std::vector<ze_command_queue_group_properties_t> g(ng);
    for (auto& x : g) x.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
    ZE_OK(zeDeviceGetCommandQueueGroupProperties(device, &ng, g.data()));
    for (uint32_t i = 0; i < ng; ++i)
      if (!(g[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE)) copy_ordinal = i;
    ze_context_desc_t cd{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
    ZE_OK(zeContextCreate(driver, &cd, &ctx));
    copy = immediate(copy_ordinal);
    compute = immediate(0);
    ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, pool_flags, nevents};
    ZE_OK(zeEventPoolCreate(ctx, &pd, 1, &device, &pool));
    for (uint32_t i = 0; i < nevents; ++i) {
      ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, i, 0, ZE_EVENT_SCOPE_FLAG_HOST};
      ze_event_handle_t e = nullptr;
      ZE_OK(zeEventCreate(pool, &ed, &e));
      events.push_back(e);
    }
  }
  ~Sim() {
    for (auto* e : events) zeEventDestroy(e);
    zeEventPoolDestroy(pool);
    zeCommandListDestroy(copy);
    zeCommandListDestroy(compute);
    zeContextDestroy(ctx);
  }
  ze_command_list_handle_t immediate(uint32_t ordinal) {
    ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, ordinal, 0, 0,
                               ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    ze_command_list_handle_t l = nullptr;
    ZE_OK(zeCommandListCreateImmediate(ctx, device, &qd, &l));
    return l;
  }
  void* device_alloc(size_t n) {
    ze_device_mem_alloc_desc_t d{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
    void* p = nullptr;
    ZE_OK(zeMemAllocDevice(ctx, &d, n, 64, device, &p));
    return p;
  }
  void* host_alloc(size_t n) {
    ze_host_mem_alloc_desc_t d{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
    void* p = nullptr;
    ZE_OK(zeMemAllocHost(ctx, &d, n, 64, &p));
    return p;
  }
  // Copies synchronously through the copy list.
  void copy_sync(void* dst, const void* src, size_t n) {
    ze_event_handle_t e = events.back();
    ZE_OK(zeEventHostReset(e));
    ZE_OK(zeCommandListAppendMemoryCopy(copy, dst, src, n, e, 0, nullptr));
    ZE_OK(zeEventHostSynchronize(e, UINT64_MAX));
  }
  ze_kernel_handle_t kernel(const char* name, ze_module_handle_t* module) {
    ze_module_desc_t md{ZE_STRUCTURE_TYPE_MODULE_DESC, nullptr, ZE_MODULE_FORMAT_NATIVE,
                        std::strlen(FERRY_SIM_BUILTIN_MODULE),
                        reinterpret_cast<const uint8_t*>(FERRY_SIM_BUILTIN_MODULE), nullptr, nullptr};
    ZE_OK(zeModuleCreate(ctx, device, &md, module, nullptr));
    ze_kernel_desc_t kd{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, name};
    ze_kernel_handle_t k = nullptr;
    ZE_OK(zeKernelCreate(*module, &kd, &k));
    return k;
  }
  template <class F>
  F ext(const char* name) {
    void* f = nullptr;
    ZE_OK(zeDriverGetExtensionFunctionAddress(driver, name, &f));
    return reinterpret_cast<F>(f);
  }
  ze_driver_handle_t native_driver() {
    ze_driver_handle_t d = driver;
    zelLoaderTranslateHandle(ZEL_HANDLE_DRIVER, driver, reinterpret_cast<void**>(&d));
    return d;
  }
};

}  // namespace ferry::test
