// SPDX-License-Identifier: MIT
// The rest of the 1.4 core for modules, kernels and timestamps: kernel
// timestamps of events (the device clock when the signalling command started
// and ended, the clock zeDeviceGetGlobalTimestamps reads), the launch
// variants, and the module and kernel queries. The sim's kernels are built
// in, so a module has no globals or function pointers to give, and its
// "native binary" is the name zeModuleCreate takes back.
#include <algorithm>
#include <cstring>

#include "api.hpp"
#include "ferry/sim.h"
#include "sim.hpp"

namespace ferry::sim {

// ---------------------------------------------------------------- timestamps
ze_result_t zeEventQueryKernelTimestamp(ze_event_handle_t h, ze_kernel_timestamp_result_t* out) {
  Event* e = get<Event>(h);
  if (e == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (!e->pool->kernel_timestamps) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (e->state().load(std::memory_order_acquire) == kClear) return ZE_RESULT_NOT_READY;
  const EventSlot& slot = e->pool->slots[e->index];
  out->global.kernelStart = out->context.kernelStart = __atomic_load_n(&slot.started_ns, __ATOMIC_RELAXED);
  out->global.kernelEnd = out->context.kernelEnd = __atomic_load_n(&slot.ended_ns, __ATOMIC_RELAXED);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListAppendQueryKernelTimestamps(ze_command_list_handle_t h, uint32_t n, ze_event_handle_t* events,
                                                     void* dst, const size_t* offsets, ze_event_handle_t hSignal,
                                                     uint32_t nwait, ze_event_handle_t* waits) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (events == nullptr || dst == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Command c;
  c.op = Command::Op::query_timestamps;
  auto extra = std::make_shared<Command::Extra>();
  for (uint32_t i = 0; i < n; ++i) {
    Event* e = get<Event>(events[i]);
    if (e == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!e->pool->kernel_timestamps) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    // Without offsets the results lie one after another.
    const size_t off = offsets != nullptr ? offsets[i] : i * sizeof(ze_kernel_timestamp_result_t);
    auto* slot = reinterpret_cast<ze_kernel_timestamp_result_t*>(static_cast<char*>(dst) + off);
    if (ze_result_t r = memory().check_range(slot, sizeof *slot); r != ZE_RESULT_SUCCESS) return r;
    extra->queried.push_back(e);
    extra->stamps.push_back(slot);
  }
  c.extra = std::move(extra);
  if (ze_result_t r = signal_event(hSignal, &c.signal); r != ZE_RESULT_SUCCESS) return r;
  return append(l, std::move(c), nwait, waits);
}

// ---------------------------------------------------------------- launches
ze_result_t zeCommandListAppendLaunchCooperativeKernel(ze_command_list_handle_t h, ze_kernel_handle_t hk,
                                                       const ze_group_count_t* groups, ze_event_handle_t hSignal,
                                                       uint32_t nwait, ze_event_handle_t* waits) {
  // Every group of a built-in kernel runs at once on the engine's thread:
  // cooperative by construction.
  return ferry::sim::zeCommandListAppendLaunchKernel(h, hk, groups, hSignal, nwait, waits);
}

ze_result_t zeCommandListAppendLaunchKernelIndirect(ze_command_list_handle_t h, ze_kernel_handle_t hk,
                                                    const ze_group_count_t* groups, ze_event_handle_t hSignal,
                                                    uint32_t nwait, ze_event_handle_t* waits) {
  // The group count lives in device memory and is read when the kernel runs;
  // the built-in kernels' work does not depend on it.
  if (groups != nullptr)
    if (ze_result_t r = memory().check_range(groups, sizeof *groups); r != ZE_RESULT_SUCCESS) return r;
  return ferry::sim::zeCommandListAppendLaunchKernel(h, hk, groups, hSignal, nwait, waits);
}

ze_result_t zeCommandListAppendLaunchMultipleKernelsIndirect(ze_command_list_handle_t h, uint32_t n,
                                                             ze_kernel_handle_t* kernels, const uint32_t* count,
                                                             const ze_group_count_t* groups,
                                                             ze_event_handle_t hSignal, uint32_t nwait,
                                                             ze_event_handle_t* waits) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (kernels == nullptr || count == nullptr || groups == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (ze_result_t r = memory().check_range(count, sizeof *count); r != ZE_RESULT_SUCCESS) return r;
  Command c;
  c.op = Command::Op::kernels_indirect;
  auto extra = std::make_shared<Command::Extra>();
  extra->count_word = count;  // read when the command runs: at most n of them
  for (uint32_t i = 0; i < n; ++i) {
    Command::Launch launch{};
    if (ze_result_t r = prepare_launch(l, get<Kernel>(kernels[i]), &launch); r != ZE_RESULT_SUCCESS) return r;
    extra->kernels.push_back(launch);
  }
  c.extra = std::move(extra);
  if (ze_result_t r = signal_event(hSignal, &c.signal); r != ZE_RESULT_SUCCESS) return r;
  return append(l, std::move(c), nwait, waits);
}

// ---------------------------------------------------------------- modules
ze_result_t zeModuleDynamicLink(uint32_t n, ze_module_handle_t* modules, ze_module_build_log_handle_t* log) {
  if (n != 0 && modules == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  for (uint32_t i = 0; i < n; ++i)
    if (get<Module>(modules[i]) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  // Built-in kernels import nothing: every link succeeds, with an empty log.
  if (log != nullptr) *log = handle<ze_module_build_log_handle_t>(new BuildLog());
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeModuleGetNativeBinary(ze_module_handle_t h, size_t* size, uint8_t* out) {
  if (get<Module>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (size == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  // What zeModuleCreate accepts as ZE_MODULE_FORMAT_NATIVE.
  constexpr size_t n = sizeof FERRY_SIM_BUILTIN_MODULE - 1;
  if (out == nullptr) {
    *size = n;
    return ZE_RESULT_SUCCESS;
  }
  std::memcpy(out, FERRY_SIM_BUILTIN_MODULE, std::min(*size, n));
  *size = std::min(*size, n);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeModuleGetGlobalPointer(ze_module_handle_t h, const char* name, size_t*, void**) {
  if (get<Module>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (name == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return ZE_RESULT_ERROR_INVALID_GLOBAL_NAME;  // the built-in module has no globals
}

ze_result_t zeModuleGetProperties(ze_module_handle_t h, ze_module_properties_t* p) {
  if (get<Module>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  p->flags = 0;  // no unresolved imports
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeModuleGetFunctionPointer(ze_module_handle_t h, const char* name, void** out) {
  if (get<Module>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (name == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return ZE_RESULT_ERROR_INVALID_FUNCTION_NAME;  // built-in kernels have no device function pointers
}

// ---------------------------------------------------------------- kernels
ze_result_t zeKernelSetCacheConfig(ze_kernel_handle_t h, ze_cache_config_flags_t flags) {
  if (get<Kernel>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if ((flags & ~uint32_t{ZE_CACHE_CONFIG_FLAG_LARGE_SLM | ZE_CACHE_CONFIG_FLAG_LARGE_DATA}) != 0)
    return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  return ZE_RESULT_SUCCESS;  // a preference; the CPU has one cache layout
}

ze_result_t zeKernelSuggestMaxCooperativeGroupCount(ze_kernel_handle_t h, uint32_t* count) {
  if (get<Kernel>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (count == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *count = 1;  // one engine thread runs every group
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeKernelSetIndirectAccess(ze_kernel_handle_t h, ze_kernel_indirect_access_flags_t flags) {
  Kernel* k = get<Kernel>(h);
  if (k == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  constexpr uint32_t all = ZE_KERNEL_INDIRECT_ACCESS_FLAG_HOST | ZE_KERNEL_INDIRECT_ACCESS_FLAG_DEVICE |
                           ZE_KERNEL_INDIRECT_ACCESS_FLAG_SHARED;
  if ((flags & ~all) != 0) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  k->indirect_access = flags;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeKernelGetIndirectAccess(ze_kernel_handle_t h, ze_kernel_indirect_access_flags_t* flags) {
  Kernel* k = get<Kernel>(h);
  if (k == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (flags == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *flags = k->indirect_access;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeKernelGetSourceAttributes(ze_kernel_handle_t h, uint32_t* size, char** out) {
  if (get<Kernel>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (size == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  // No source, so no attributes: the empty string, with its terminator.
  // Without a string to fill (either pointer null), the size only.
  if (out != nullptr && *out != nullptr && *size >= 1) (*out)[0] = '\0';
  *size = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeKernelGetProperties(ze_kernel_handle_t h, ze_kernel_properties_t* p) {
  Kernel* k = get<Kernel>(h);
  if (k == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  p->numKernelArgs = static_cast<uint32_t>(k->nargs);
  p->requiredGroupSizeX = p->requiredGroupSizeY = p->requiredGroupSizeZ = 0;  // any
  p->requiredNumSubGroups = p->requiredSubgroupSize = 0;
  p->maxSubgroupSize = 1;
  p->maxNumSubgroups = 1024;
  p->localMemSize = p->privateMemSize = p->spillMemSize = 0;
  std::memset(&p->uuid, 0, sizeof p->uuid);
  std::memcpy(p->uuid.kid, k->name.data(), std::min(k->name.size(), sizeof p->uuid.kid));
  std::memcpy(p->uuid.mid, FERRY_SIM_BUILTIN_MODULE, std::min(sizeof FERRY_SIM_BUILTIN_MODULE - 1, sizeof p->uuid.mid));
  return ZE_RESULT_SUCCESS;
}

}  // namespace ferry::sim
