// SPDX-License-Identifier: MIT
// Level Zero entry points of the simulated driver. None of these symbols is
// exported: the loader reaches them only through the tables in ddi.cpp.
#include "api.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "ferry/sim.h"
#include "sim.hpp"

namespace ferry::sim {

namespace {

std::once_flag g_init_once;
Driver* g_driver = nullptr;

constexpr uint32_t kIpcMagic = 0x46535043;  // "FSPC"

struct IpcMem {  // layout of ze_ipc_mem_handle_t: the fd first, as Intel's runtime does
  int32_t fd;
  uint32_t magic;
  uint64_t size;
};
struct IpcPool {
  int32_t fd;
  uint32_t magic;
  uint32_t count;
  uint32_t flags;  // kIpcPoolKernelTimestamps
};
constexpr uint32_t kIpcPoolKernelTimestamps = 1;
static_assert(sizeof(IpcMem) <= ZE_MAX_IPC_HANDLE_SIZE);
static_assert(sizeof(IpcPool) <= ZE_MAX_IPC_HANDLE_SIZE);

ze_result_t check_lost() {
  return faults().device_lost.load() ? ZE_RESULT_ERROR_DEVICE_LOST : ZE_RESULT_SUCCESS;
}

template <class T>
void copy_name(T& dst, const char* s) {
  std::snprintf(dst, sizeof dst, "%s", s);
}

}  // namespace

Driver* the_driver() { return g_driver; }

// ---------------------------------------------------------------- global
ze_result_t zeInit(ze_init_flags_t flags) {
  if (flags != 0 && (flags & (ZE_INIT_FLAG_GPU_ONLY | ZE_INIT_FLAG_VPU_ONLY)) == 0)
    return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (flags == ZE_INIT_FLAG_VPU_ONLY) return ZE_RESULT_ERROR_UNINITIALIZED;
  // The loader calls this twice; only the first builds anything.
  std::call_once(g_init_once, [] {
    auto* d = new Driver();
    for (uint32_t i = 0; i < config().devices; ++i) d->devices.push_back(std::make_unique<Device>(d, i));
    g_driver = d;
  });
  return ZE_RESULT_SUCCESS;
}

// ---------------------------------------------------------------- driver
ze_result_t zeDriverGet(uint32_t* pCount, ze_driver_handle_t* phDrivers) {
  if (pCount == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (g_driver == nullptr) return ZE_RESULT_ERROR_UNINITIALIZED;
  if (*pCount == 0 || phDrivers == nullptr) {
    *pCount = 1;
    return ZE_RESULT_SUCCESS;
  }
  *pCount = 1;
  phDrivers[0] = handle<ze_driver_handle_t>(g_driver);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDriverGetApiVersion(ze_driver_handle_t h, ze_api_version_t* v) {
  if (get<Driver>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (v == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *v = ZE_API_VERSION_CURRENT;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDriverGetProperties(ze_driver_handle_t h, ze_driver_properties_t* p) {
  if (get<Driver>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  std::memset(&p->uuid, 0, sizeof p->uuid);
  std::memcpy(p->uuid.id, "ferry-sim-drv", 13);
  p->driverVersion = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDriverGetIpcProperties(ze_driver_handle_t h, ze_driver_ipc_properties_t* p) {
  if (get<Driver>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  p->flags = ZE_IPC_PROPERTY_FLAG_MEMORY | ZE_IPC_PROPERTY_FLAG_EVENT_POOL;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDriverGetExtensionProperties(ze_driver_handle_t h, uint32_t* pCount,
                                           ze_driver_extension_properties_t* props) {
  if (get<Driver>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (pCount == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  static const char* const kNames[] = {"ZE_experimental_ferry_sim", "ZE_intel_experimental_command_list_memory_sync"};
  const uint32_t n = 2;
  if (*pCount == 0 || props == nullptr) {
    *pCount = n;
    return ZE_RESULT_SUCCESS;
  }
  uint32_t k = std::min(*pCount, n);
  for (uint32_t i = 0; i < k; ++i) {
    copy_name(props[i].name, kNames[i]);
    props[i].version = 1;
  }
  *pCount = k;
  return ZE_RESULT_SUCCESS;
}

namespace {
ze_result_t import_pointer(ze_driver_handle_t h, void* ptr, size_t size) {
  if (get<Driver>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return memory().import(ptr, size);
}
ze_result_t release_pointer(ze_driver_handle_t h, void* ptr) {
  if (get<Driver>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return memory().release_import(ptr);
}
ze_result_t fail_copy(ze_driver_handle_t h, uint64_t nth, int lost) {
  if (get<Driver>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  Faults& f = faults();
  f.lose_device = lost != 0;
  f.fail_at = nth == 0 ? 0 : f.copies_executed.load() + nth;
  if (nth == 0) f.device_lost = false;
  return ZE_RESULT_SUCCESS;
}

std::atomic<uint64_t> pageable_appends{0};  // appends that paid the pageable cost

ze_result_t count_pageable(ze_driver_handle_t h, uint64_t* count) {
  if (get<Driver>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (count == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *count = pageable_appends.load();
  return ZE_RESULT_SUCCESS;
}

// Intel's memory-operation extensions (ZE_intel_experimental_command_list_memory_sync),
// with the compute runtime's signatures. The descriptors are plain structs
// whose first word is the action (wait) or the scope (write); scopes are
// accepted and change nothing here, where every agent sees memory at once.

struct WaitOnMemDesc {
  uint32_t action_flags;  // ZEX_WAIT_ON_MEMORY_FLAG_*: EQUAL 1, NOT_EQUAL 2, GT 4, GE 8, LT 16, LE 32
  uint32_t wait_scope;
};
struct WriteToMemDesc {
  uint32_t write_scope;
};

ze_result_t wait_on_memory(ze_command_list_handle_t h, WaitOnMemDesc* desc, void* ptr, uint64_t data, uint32_t bytes,
                           ze_event_handle_t hSignal) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->action_flags == 0 || (desc->action_flags & ~63u) != 0) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  // The word must be memory the device reaches: USM, or an imported host range.
  if (ze_result_t r = memory().check_range(ptr, bytes); r != ZE_RESULT_SUCCESS) return r;
  Command c;
  c.op = Command::Op::wait_mem;
  c.dst = ptr;
  c.value = data;
  c.wait_flags = desc->action_flags;
  c.wait_bytes = bytes;
  if (ze_result_t r = signal_event(hSignal, &c.signal); r != ZE_RESULT_SUCCESS) return r;
  return append(l, std::move(c), 0, nullptr);
}

ze_result_t wait_on_memory32(ze_command_list_handle_t h, WaitOnMemDesc* desc, void* ptr, uint32_t data,
                             ze_event_handle_t hSignal) {
  return wait_on_memory(h, desc, ptr, data, 4, hSignal);
}

ze_result_t wait_on_memory64(ze_command_list_handle_t h, WaitOnMemDesc* desc, void* ptr, uint64_t data,
                             ze_event_handle_t hSignal) {
  return wait_on_memory(h, desc, ptr, data, 8, hSignal);
}

ze_result_t write_to_memory(ze_command_list_handle_t h, WriteToMemDesc* desc, void* ptr, uint64_t data) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (reinterpret_cast<uintptr_t>(ptr) % 8 != 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (ze_result_t r = memory().check_range(ptr, 8); r != ZE_RESULT_SUCCESS) return r;
  Command c;
  c.op = Command::Op::write_mem;
  c.dst = ptr;
  c.value = data;
  return append(l, std::move(c), 0, nullptr);
}
}  // namespace

ze_result_t zeDriverGetExtensionFunctionAddress(ze_driver_handle_t h, const char* name, void** out) {
  if (get<Driver>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (name == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (std::strcmp(name, "zexDriverImportExternalPointer") == 0) {
    *out = reinterpret_cast<void*>(&import_pointer);
  } else if (std::strcmp(name, "zexDriverReleaseImportedPointer") == 0) {
    *out = reinterpret_cast<void*>(&release_pointer);
  } else if (std::strcmp(name, "zexCommandListAppendWaitOnMemory") == 0) {
    *out = reinterpret_cast<void*>(&wait_on_memory32);
  } else if (std::strcmp(name, "zexCommandListAppendWaitOnMemory64") == 0) {
    *out = reinterpret_cast<void*>(&wait_on_memory64);
  } else if (std::strcmp(name, "zexCommandListAppendWriteToMemory") == 0) {
    *out = reinterpret_cast<void*>(&write_to_memory);
  } else if (std::strcmp(name, FERRY_SIM_EXT_FAIL_COPY) == 0) {
    *out = reinterpret_cast<void*>(&fail_copy);
  } else if (std::strcmp(name, FERRY_SIM_EXT_PAGEABLE_APPENDS) == 0) {
    *out = reinterpret_cast<void*>(&count_pageable);
  } else {
    *out = nullptr;
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  return ZE_RESULT_SUCCESS;
}

// ---------------------------------------------------------------- device
ze_result_t zeDeviceGet(ze_driver_handle_t h, uint32_t* pCount, ze_device_handle_t* out) {
  Driver* d = get<Driver>(h);
  if (d == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (pCount == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  const auto n = static_cast<uint32_t>(d->devices.size());
  if (*pCount == 0 || out == nullptr) {
    *pCount = n;
    return ZE_RESULT_SUCCESS;
  }
  uint32_t k = std::min(*pCount, n);
  for (uint32_t i = 0; i < k; ++i) out[i] = handle<ze_device_handle_t>(d->devices[i].get());
  *pCount = k;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetSubDevices(ze_device_handle_t h, uint32_t* pCount, ze_device_handle_t*) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (pCount == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *pCount = 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetProperties(ze_device_handle_t h, ze_device_properties_t* p) {
  Device* d = get<Device>(h);
  if (d == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  p->type = ZE_DEVICE_TYPE_GPU;
  p->vendorId = 0xfe77;  // not a PCI vendor: this device is simulated
  p->deviceId = 0x0001;
  p->flags = 0;
  p->subdeviceId = 0;
  p->coreClockRate = 1000;
  p->maxMemAllocSize = config().device_memory;
  p->maxHardwareContexts = 64;
  p->maxCommandQueuePriority = 0;
  p->numThreadsPerEU = 1;
  p->physicalEUSimdWidth = 8;
  p->numEUsPerSubslice = 1;
  p->numSubslicesPerSlice = 1;
  p->numSlices = 1;
  // The timer counts nanoseconds: its resolution is 1 ns in the original form
  // of the structure, and 1e9 cycles per second in the 1.2 form.
  p->timerResolution = p->stype == ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2 ? 1'000'000'000ull : 1;
  p->timestampValidBits = 64;
  p->kernelTimestampValidBits = 64;
  std::memset(&p->uuid, 0, sizeof p->uuid);
  std::memcpy(p->uuid.id, "ferry-sim-dev", 13);
  p->uuid.id[15] = static_cast<uint8_t>(d->index);
  std::snprintf(p->name, sizeof p->name, "ferry simulated GPU %u (CPU threads)", d->index);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetComputeProperties(ze_device_handle_t h, ze_device_compute_properties_t* p) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  p->maxTotalGroupSize = 1024;
  p->maxGroupSizeX = p->maxGroupSizeY = p->maxGroupSizeZ = 1024;
  p->maxGroupCountX = p->maxGroupCountY = p->maxGroupCountZ = 1u << 30;
  p->maxSharedLocalMemory = 65536;
  p->numSubGroupSizes = 1;
  std::memset(p->subGroupSizes, 0, sizeof p->subGroupSizes);
  p->subGroupSizes[0] = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetCommandQueueGroupProperties(ze_device_handle_t h, uint32_t* pCount,
                                                   ze_command_queue_group_properties_t* p) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (pCount == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (*pCount == 0 || p == nullptr) {
    *pCount = 2;
    return ZE_RESULT_SUCCESS;
  }
  uint32_t k = std::min(*pCount, 2u);
  for (uint32_t i = 0; i < k; ++i) {
    p[i].flags = i == kComputeOrdinal ? (ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE |
                                         ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY)
                                      : ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
    p[i].maxMemoryFillPatternSize = 128;
    p[i].numQueues = kQueuesPerGroup[i];
  }
  *pCount = k;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetMemoryProperties(ze_device_handle_t h, uint32_t* pCount,
                                        ze_device_memory_properties_t* p) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (pCount == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (*pCount == 0 || p == nullptr) {
    *pCount = 1;
    return ZE_RESULT_SUCCESS;
  }
  p[0].flags = 0;
  p[0].maxClockRate = 1000;
  p[0].maxBusWidth = 64;
  p[0].totalSize = config().device_memory;
  copy_name(p[0].name, "ferry-sim-memory");
  *pCount = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetMemoryAccessProperties(ze_device_handle_t h, ze_device_memory_access_properties_t* p) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  const auto rw = ZE_MEMORY_ACCESS_CAP_FLAG_RW;
  p->hostAllocCapabilities = rw;
  p->deviceAllocCapabilities = rw;
  p->sharedSingleDeviceAllocCapabilities = rw;
  // Every simulated device works in the host's own memory: another device's
  // shared allocations and plain malloc'd memory are as reachable as its own.
  p->sharedCrossDeviceAllocCapabilities = rw;
  p->sharedSystemAllocCapabilities = rw;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetExternalMemoryProperties(ze_device_handle_t h, ze_device_external_memory_properties_t* p) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  p->memoryAllocationImportTypes = 0;
  p->memoryAllocationExportTypes = 0;
  p->imageImportTypes = 0;
  p->imageExportTypes = 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetStatus(ze_device_handle_t h) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return check_lost();
}

// ---------------------------------------------------------------- context
ze_result_t zeContextCreate(ze_driver_handle_t h, const ze_context_desc_t* desc, ze_context_handle_t* out) {
  Driver* d = get<Driver>(h);
  if (d == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *out = handle<ze_context_handle_t>(new Context(d));
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeContextDestroy(ze_context_handle_t h) {
  Context* c = get<Context>(h);
  if (c == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  delete c;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeContextGetStatus(ze_context_handle_t h) {
  if (get<Context>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return check_lost();
}

// ---------------------------------------------------------------- memory
namespace {
ze_result_t alloc_common(ze_context_handle_t hc, ze_device_handle_t hd, bool need_device, AllocKind kind,
                         size_t size, size_t align, void** out) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  Device* d = hd == nullptr ? nullptr : get<Device>(hd);
  if (need_device && d == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (hd != nullptr && d == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (d != nullptr && size > config().device_memory) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  return memory().alloc(kind, d, size, align, out);
}
}  // namespace

ze_result_t zeMemAllocDevice(ze_context_handle_t hc, const ze_device_mem_alloc_desc_t* desc, size_t size,
                             size_t align, ze_device_handle_t hd, void** out) {
  if (desc == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return alloc_common(hc, hd, true, AllocKind::device, size, align, out);
}

ze_result_t zeMemAllocHost(ze_context_handle_t hc, const ze_host_mem_alloc_desc_t* desc, size_t size,
                           size_t align, void** out) {
  if (desc == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return alloc_common(hc, nullptr, false, AllocKind::host, size, align, out);
}

ze_result_t zeMemAllocShared(ze_context_handle_t hc, const ze_device_mem_alloc_desc_t* ddesc,
                             const ze_host_mem_alloc_desc_t* hdesc, size_t size, size_t align,
                             ze_device_handle_t hd, void** out) {
  if (ddesc == nullptr || hdesc == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return alloc_common(hc, hd, false, AllocKind::shared, size, align, out);
}

ze_result_t zeMemFree(ze_context_handle_t hc, void* ptr) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Alloc a;
  if (memory().find(ptr, &a) && a.kind == AllocKind::ipc_opened) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  return memory().free(ptr);
}

ze_result_t zeMemGetAllocProperties(ze_context_handle_t hc, const void* ptr, ze_memory_allocation_properties_t* p,
                                    ze_device_handle_t* dev) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr || p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Alloc a;
  if (!memory().find(ptr, &a)) {
    p->type = ZE_MEMORY_TYPE_UNKNOWN;  // pageable memory the driver knows nothing of
    p->id = 0;
    p->pageSize = 0;
    if (dev != nullptr) *dev = nullptr;
    return ZE_RESULT_SUCCESS;
  }
  switch (a.kind) {
    case AllocKind::host: p->type = ZE_MEMORY_TYPE_HOST; break;
    case AllocKind::shared: p->type = ZE_MEMORY_TYPE_SHARED; break;
    case AllocKind::device:
    case AllocKind::ipc_opened: p->type = ZE_MEMORY_TYPE_DEVICE; break;
  }
  p->id = a.base;
  p->pageSize = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (dev != nullptr) *dev = a.device != nullptr ? handle<ze_device_handle_t>(a.device) : nullptr;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeMemGetAddressRange(ze_context_handle_t hc, const void* ptr, void** base, size_t* size) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Alloc a;
  if (!memory().find(ptr, &a)) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (base != nullptr) *base = reinterpret_cast<void*>(a.base);
  if (size != nullptr) *size = a.size;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeMemGetIpcHandle(ze_context_handle_t hc, const void* ptr, ze_ipc_mem_handle_t* out) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Alloc a;
  // Spec 1.4: device allocations only, and the handle names the whole allocation.
  if (!memory().find(ptr, &a) || a.kind != AllocKind::device || a.base != reinterpret_cast<uintptr_t>(ptr))
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  std::memset(out->data, 0, sizeof out->data);
  IpcMem m{a.fd, kIpcMagic, a.size};
  std::memcpy(out->data, &m, sizeof m);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeMemOpenIpcHandle(ze_context_handle_t hc, ze_device_handle_t hd, ze_ipc_mem_handle_t h,
                               ze_ipc_memory_flags_t, void** out) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  Device* d = get<Device>(hd);
  if (d == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  IpcMem m{};
  std::memcpy(&m, h.data, sizeof m);
  if (m.magic != kIpcMagic || m.fd < 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  // The fd stays the caller's: it passed it in (after receiving it over a
  // socket) and closes it when it likes; the mapping outlives it.
  return memory().open_ipc(d, m.fd, out);
}

ze_result_t zeMemCloseIpcHandle(ze_context_handle_t hc, const void* ptr) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Alloc a;
  if (!memory().find(ptr, &a) || a.kind != AllocKind::ipc_opened || a.base != reinterpret_cast<uintptr_t>(ptr))
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  return memory().free(const_cast<void*>(ptr));
}

// ---------------------------------------------------------------- events
ze_result_t zeEventPoolCreate(ze_context_handle_t hc, const ze_event_pool_desc_t* desc, uint32_t, ze_device_handle_t*,
                              ze_event_pool_handle_t* out) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->count == 0) return ZE_RESULT_ERROR_INVALID_SIZE;
  auto pool = std::make_unique<EventPool>();
  pool->count = desc->count;
  pool->ipc_capable = (desc->flags & ZE_EVENT_POOL_FLAG_IPC) != 0;
  pool->kernel_timestamps = (desc->flags & ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP) != 0;
  pool->mapped = (static_cast<size_t>(desc->count) * sizeof(EventSlot) + 4095) / 4096 * 4096;
  pool->fd = sealed_memfd("ferry-sim-events", pool->mapped);
  if (pool->fd < 0) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  void* p = mmap(nullptr, pool->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, pool->fd, 0);
  if (p == MAP_FAILED) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  pool->slots = static_cast<EventSlot*>(p);
  *out = handle<ze_event_pool_handle_t>(pool.release());
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventPoolDestroy(ze_event_pool_handle_t h) {
  EventPool* p = get<EventPool>(h);
  if (p == nullptr || p->opened_from_ipc) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p->events.load() != 0) return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
  delete p;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventPoolGetIpcHandle(ze_event_pool_handle_t h, ze_ipc_event_pool_handle_t* out) {
  EventPool* p = get<EventPool>(h);
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (!p->ipc_capable) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  std::memset(out->data, 0, sizeof out->data);
  IpcPool m{p->fd, kIpcMagic, p->count, p->kernel_timestamps ? kIpcPoolKernelTimestamps : 0};
  std::memcpy(out->data, &m, sizeof m);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventPoolOpenIpcHandle(ze_context_handle_t hc, ze_ipc_event_pool_handle_t h,
                                     ze_event_pool_handle_t* out) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  IpcPool m{};
  std::memcpy(&m, h.data, sizeof m);
  if (m.magic != kIpcMagic || m.fd < 0 || m.count == 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  auto pool = std::make_unique<EventPool>();
  pool->count = m.count;
  pool->opened_from_ipc = true;
  pool->kernel_timestamps = (m.flags & kIpcPoolKernelTimestamps) != 0;
  pool->fd = m.fd;
  pool->mapped = (static_cast<size_t>(m.count) * sizeof(EventSlot) + 4095) / 4096 * 4096;
  // The count comes from the handle: the memory must really hold that many
  // events, and stay so.
  if (!safe_to_map(m.fd, pool->mapped)) {
    pool->fd = -1;  // the caller's, not ours to close
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  void* p = mmap(nullptr, pool->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0);
  if (p == MAP_FAILED) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  pool->slots = static_cast<EventSlot*>(p);
  *out = handle<ze_event_pool_handle_t>(pool.release());
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventPoolCloseIpcHandle(ze_event_pool_handle_t h) {
  EventPool* p = get<EventPool>(h);
  if (p == nullptr || !p->opened_from_ipc) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p->events.load() != 0) return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
  delete p;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventCreate(ze_event_pool_handle_t h, const ze_event_desc_t* desc, ze_event_handle_t* out) {
  EventPool* p = get<EventPool>(h);
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->index >= p->count) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  *out = handle<ze_event_handle_t>(new Event(p, desc->index));
  ++p->events;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventDestroy(ze_event_handle_t h) {
  Event* e = get<Event>(h);
  if (e == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  --e->pool->events;
  delete e;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeEventHostSignal(ze_event_handle_t h) {
  Event* e = get<Event>(h);
  if (e == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  e->signal(kSignaled);
  return ZE_RESULT_SUCCESS;
}

namespace {
ze_result_t status_of(uint32_t s) {
  switch (s) {
    case kSignaled: return ZE_RESULT_SUCCESS;
    case kFailed: return ZE_RESULT_ERROR_DEVICE_LOST;
    default: return ZE_RESULT_NOT_READY;
  }
}
}  // namespace

ze_result_t zeEventHostSynchronize(ze_event_handle_t h, uint64_t timeout) {
  Event* e = get<Event>(h);
  if (e == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return status_of(e->wait(timeout));
}

ze_result_t zeEventQueryStatus(ze_event_handle_t h) {
  Event* e = get<Event>(h);
  if (e == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return status_of(e->state().load(std::memory_order_acquire));
}

ze_result_t zeEventHostReset(ze_event_handle_t h) {
  Event* e = get<Event>(h);
  if (e == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  e->state().store(kClear, std::memory_order_release);
  return ZE_RESULT_SUCCESS;
}

// ---------------------------------------------------------------- fences and queues
ze_result_t zeFenceCreate(ze_command_queue_handle_t hq, const ze_fence_desc_t* desc, ze_fence_handle_t* out) {
  if (get<Queue>(hq) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  auto* f = new Fence();
  if (desc->flags & ZE_FENCE_FLAG_SIGNALED) f->state = 1;
  *out = handle<ze_fence_handle_t>(f);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeFenceDestroy(ze_fence_handle_t h) {
  Fence* f = get<Fence>(h);
  if (f == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  delete f;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeFenceHostSynchronize(ze_fence_handle_t h, uint64_t timeout) {
  Fence* f = get<Fence>(h);
  if (f == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  const uint64_t deadline = timeout == UINT64_MAX ? UINT64_MAX : now_ns() + timeout;
  while (f->state.load(std::memory_order_acquire) == 0) {
    if (now_ns() >= deadline) return ZE_RESULT_NOT_READY;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return check_lost();
}

ze_result_t zeFenceQueryStatus(ze_fence_handle_t h) {
  Fence* f = get<Fence>(h);
  if (f == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return f->state.load(std::memory_order_acquire) != 0 ? ZE_RESULT_SUCCESS : ZE_RESULT_NOT_READY;
}

ze_result_t zeFenceReset(ze_fence_handle_t h) {
  Fence* f = get<Fence>(h);
  if (f == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  f->state = 0;
  return ZE_RESULT_SUCCESS;
}

namespace {
ze_result_t check_queue_desc(Device* d, uint32_t ordinal, uint32_t index) {
  if (d == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ordinal > kCopyOrdinal) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (index >= kQueuesPerGroup[ordinal]) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  return ZE_RESULT_SUCCESS;
}
}  // namespace

ze_result_t zeCommandQueueCreate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_command_queue_desc_t* desc,
                                 ze_command_queue_handle_t* out) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Device* d = get<Device>(hd);
  if (ze_result_t r = check_queue_desc(d, desc->ordinal, desc->index); r != ZE_RESULT_SUCCESS) return r;
  auto* q = new Queue();
  q->device = d;
  q->ordinal = desc->ordinal;
  q->synchronous = desc->mode == ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS;
  q->engine.set_priority(desc->priority, &d->high_running);
  *out = handle<ze_command_queue_handle_t>(q);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandQueueDestroy(ze_command_queue_handle_t h) {
  Queue* q = get<Queue>(h);
  if (q == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  delete q;  // the engine finishes what it holds before its thread ends
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandQueueExecuteCommandLists(ze_command_queue_handle_t h, uint32_t n, ze_command_list_handle_t* lists,
                                              ze_fence_handle_t hf) {
  Queue* q = get<Queue>(h);
  if (q == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (n == 0 || lists == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Fence* f = hf == nullptr ? nullptr : get<Fence>(hf);
  if (hf != nullptr && f == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  std::vector<Command> all;
  for (uint32_t i = 0; i < n; ++i) {
    CmdList* l = get<CmdList>(lists[i]);
    if (l == nullptr || l->engine) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    std::lock_guard lock(l->mu);
    if (!l->closed) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    all.insert(all.end(), l->recorded.begin(), l->recorded.end());
  }
  if (f != nullptr) {
    Command c;
    c.op = Command::Op::fence;
    c.fence = f;
    all.push_back(std::move(c));
  }
  q->engine.submit(std::move(all));
  // A synchronous queue returns only once its lists ran (the spec's
  // ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS), however long they wait on events.
  if (q->synchronous) q->engine.drain(UINT64_MAX);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandQueueSynchronize(ze_command_queue_handle_t h, uint64_t timeout) {
  Queue* q = get<Queue>(h);
  if (q == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!q->engine.drain(timeout)) return ZE_RESULT_NOT_READY;
  return check_lost();
}

// ---------------------------------------------------------------- command lists
ze_result_t zeCommandListCreate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_command_list_desc_t* desc,
                                ze_command_list_handle_t* out) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Device* d = get<Device>(hd);
  if (d == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc->commandQueueGroupOrdinal > kCopyOrdinal) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  auto* l = new CmdList();
  l->device = d;
  l->ordinal = desc->commandQueueGroupOrdinal;
  *out = handle<ze_command_list_handle_t>(l);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListCreateImmediate(ze_context_handle_t hc, ze_device_handle_t hd,
                                         const ze_command_queue_desc_t* desc, ze_command_list_handle_t* out) {
  if (get<Context>(hc) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Device* d = get<Device>(hd);
  if (ze_result_t r = check_queue_desc(d, desc->ordinal, desc->index); r != ZE_RESULT_SUCCESS) return r;
  auto* l = new CmdList();
  l->device = d;
  l->ordinal = desc->ordinal;
  l->synchronous = desc->mode == ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS;
  l->engine = std::make_unique<Engine>();
  l->engine->set_priority(desc->priority, &d->high_running);
  *out = handle<ze_command_list_handle_t>(l);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListDestroy(ze_command_list_handle_t h) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  delete l;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListClose(ze_command_list_handle_t h) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  std::lock_guard lock(l->mu);
  l->closed = true;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListReset(ze_command_list_handle_t h) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  std::lock_guard lock(l->mu);
  l->closed = false;
  l->recorded.clear();
  return ZE_RESULT_SUCCESS;
}

ze_result_t signal_event(ze_event_handle_t h, Event** out) {
  *out = nullptr;
  if (h == nullptr) return ZE_RESULT_SUCCESS;
  *out = get<Event>(h);
  return *out == nullptr ? ZE_RESULT_ERROR_INVALID_NULL_HANDLE : ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListAppendMemoryCopy(ze_command_list_handle_t h, void* dst, const void* src, size_t size,
                                          ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (dst == nullptr || src == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (ze_result_t r = check_lost(); r != ZE_RESULT_SUCCESS) return r;
  if (ze_result_t r = memory().check_range(dst, size); r != ZE_RESULT_SUCCESS) return r;
  if (ze_result_t r = memory().check_range(src, size); r != ZE_RESULT_SUCCESS) return r;
  Command c;
  c.op = Command::Op::copy;
  c.dst = dst;
  c.src = src;
  c.bytes = size;
  if (ze_result_t r = signal_event(hSignal, &c.signal); r != ZE_RESULT_SUCCESS) return r;
  // A pageable source costs the appending thread a user-pointer import, as it
  // does on a real driver. Host USM and imported ranges skip it.
  const uint64_t pageable = config().cost.pageable_ns;
  if (pageable != 0 && !memory().is_pinned_host(src, size)) {
    Alloc a;
    const bool device_src = memory().find(src, &a) && (a.kind == AllocKind::device || a.kind == AllocKind::ipc_opened);
    if (!device_src) {
      pageable_appends.fetch_add(1);
      wait_until(now_ns() + pageable);
    }
  }
  return append(l, std::move(c), nwait, waits);
}

ze_result_t zeCommandListAppendWriteGlobalTimestamp(ze_command_list_handle_t h, uint64_t* dst, ze_event_handle_t hSignal,
                                                    uint32_t nwait, ze_event_handle_t* waits) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (dst == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (reinterpret_cast<uintptr_t>(dst) % 8 != 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (ze_result_t r = memory().check_range(dst, 8); r != ZE_RESULT_SUCCESS) return r;
  Command c;
  c.op = Command::Op::timestamp;
  c.dst = dst;
  if (ze_result_t r = signal_event(hSignal, &c.signal); r != ZE_RESULT_SUCCESS) return r;
  return append(l, std::move(c), nwait, waits);
}

ze_result_t zeCommandListAppendMemoryFill(ze_command_list_handle_t h, void* dst, const void* pattern,
                                          size_t pattern_size, size_t size, ze_event_handle_t hSignal, uint32_t nwait,
                                          ze_event_handle_t* waits) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (dst == nullptr || pattern == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (pattern_size == 0 || pattern_size > 128) return ZE_RESULT_ERROR_INVALID_SIZE;
  if (ze_result_t r = memory().check_range(dst, size); r != ZE_RESULT_SUCCESS) return r;
  Command c;
  c.op = Command::Op::fill;
  c.dst = dst;
  c.bytes = size;
  const auto* p = static_cast<const uint8_t*>(pattern);
  c.pattern.assign(p, p + pattern_size);  // the pattern is read at append time, per the spec
  if (ze_result_t r = signal_event(hSignal, &c.signal); r != ZE_RESULT_SUCCESS) return r;
  return append(l, std::move(c), nwait, waits);
}

ze_result_t zeCommandListAppendBarrier(ze_command_list_handle_t h, ze_event_handle_t hSignal, uint32_t nwait,
                                       ze_event_handle_t* waits) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  Command c;
  c.op = Command::Op::barrier;
  if (ze_result_t r = signal_event(hSignal, &c.signal); r != ZE_RESULT_SUCCESS) return r;
  return append(l, std::move(c), nwait, waits);
}

ze_result_t zeCommandListAppendSignalEvent(ze_command_list_handle_t h, ze_event_handle_t hEvent) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  Command c;
  c.op = Command::Op::signal;
  if (hEvent == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ze_result_t r = signal_event(hEvent, &c.signal); r != ZE_RESULT_SUCCESS) return r;
  return append(l, std::move(c), 0, nullptr);
}

ze_result_t zeCommandListAppendWaitOnEvents(ze_command_list_handle_t h, uint32_t n, ze_event_handle_t* events) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (n == 0 || events == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Command c;
  c.op = Command::Op::barrier;
  return append(l, std::move(c), n, events);
}

ze_result_t zeCommandListAppendEventReset(ze_command_list_handle_t h, ze_event_handle_t hEvent) {
  CmdList* l = get<CmdList>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  Command c;
  c.op = Command::Op::reset;
  if (hEvent == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ze_result_t r = signal_event(hEvent, &c.signal); r != ZE_RESULT_SUCCESS) return r;
  return append(l, std::move(c), 0, nullptr);
}

// ---------------------------------------------------------------- modules and kernels
namespace {
struct BuiltinInfo {
  const char* name;
  Builtin kind;
  int nargs;
};
constexpr BuiltinInfo kBuiltins[] = {
    {FERRY_SIM_KERNEL_BUSY, Builtin::busy, 1},
    {FERRY_SIM_KERNEL_CHECKSUM, Builtin::checksum, 3},
    {FERRY_SIM_KERNEL_FILL, Builtin::fill, 3},
};
}  // namespace

ze_result_t zeModuleCreate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_module_desc_t* desc,
                           ze_module_handle_t* out, ze_module_build_log_handle_t* log) {
  if (get<Context>(hc) == nullptr || get<Device>(hd) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr || desc->pInputModule == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  const std::string input(reinterpret_cast<const char*>(desc->pInputModule), desc->inputSize);
  const bool ok = desc->format == ZE_MODULE_FORMAT_NATIVE && input == FERRY_SIM_BUILTIN_MODULE;
  if (log != nullptr) {
    auto* l = new BuildLog();
    if (!ok) l->text = "ferry-sim: only the native module \"" FERRY_SIM_BUILTIN_MODULE "\" can be built";
    *log = handle<ze_module_build_log_handle_t>(l);
  }
  if (!ok) return ZE_RESULT_ERROR_MODULE_BUILD_FAILURE;
  *out = handle<ze_module_handle_t>(new Module());
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeModuleDestroy(ze_module_handle_t h) {
  Module* m = get<Module>(h);
  if (m == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  delete m;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeModuleGetKernelNames(ze_module_handle_t h, uint32_t* pCount, const char** names) {
  if (get<Module>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (pCount == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  const uint32_t n = sizeof kBuiltins / sizeof kBuiltins[0];
  if (*pCount == 0 || names == nullptr) {
    *pCount = n;
    return ZE_RESULT_SUCCESS;
  }
  uint32_t k = std::min(*pCount, n);
  for (uint32_t i = 0; i < k; ++i) names[i] = kBuiltins[i].name;
  *pCount = k;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeModuleBuildLogDestroy(ze_module_build_log_handle_t h) {
  BuildLog* l = get<BuildLog>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  delete l;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeModuleBuildLogGetString(ze_module_build_log_handle_t h, size_t* pSize, char* out) {
  BuildLog* l = get<BuildLog>(h);
  if (l == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (pSize == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (*pSize == 0 || out == nullptr) {
    *pSize = l->text.size() + 1;
    return ZE_RESULT_SUCCESS;
  }
  std::snprintf(out, *pSize, "%s", l->text.c_str());
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeKernelCreate(ze_module_handle_t h, const ze_kernel_desc_t* desc, ze_kernel_handle_t* out) {
  if (get<Module>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr || desc->pKernelName == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  for (const auto& b : kBuiltins) {
    if (std::strcmp(b.name, desc->pKernelName) == 0) {
      auto* k = new Kernel();
      k->builtin = b.kind;
      k->name = b.name;
      k->nargs = b.nargs;
      *out = handle<ze_kernel_handle_t>(k);
      return ZE_RESULT_SUCCESS;
    }
  }
  return ZE_RESULT_ERROR_INVALID_KERNEL_NAME;
}

ze_result_t zeKernelDestroy(ze_kernel_handle_t h) {
  Kernel* k = get<Kernel>(h);
  if (k == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  delete k;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeKernelSetGroupSize(ze_kernel_handle_t h, uint32_t x, uint32_t y, uint32_t z) {
  if (get<Kernel>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (x == 0 || y == 0 || z == 0 || static_cast<uint64_t>(x) * y * z > 1024) return ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeKernelSuggestGroupSize(ze_kernel_handle_t h, uint32_t, uint32_t, uint32_t, uint32_t* x, uint32_t* y,
                                     uint32_t* z) {
  if (get<Kernel>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (x == nullptr || y == nullptr || z == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *x = *y = *z = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeKernelSetArgumentValue(ze_kernel_handle_t h, uint32_t index, size_t size, const void* value) {
  Kernel* k = get<Kernel>(h);
  if (k == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (index >= static_cast<uint32_t>(k->nargs)) return ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX;
  if (value == nullptr || size == 0 || size > sizeof(uint64_t)) return ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE;
  uint64_t v = 0;
  std::memcpy(&v, value, size);
  k->args[index] = v;
  k->arg_set[index] = true;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeKernelGetName(ze_kernel_handle_t h, size_t* pSize, char* name) {
  Kernel* k = get<Kernel>(h);
  if (k == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (pSize == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (*pSize == 0 || name == nullptr) {
    *pSize = k->name.size() + 1;
    return ZE_RESULT_SUCCESS;
  }
  std::snprintf(name, *pSize, "%s", k->name.c_str());
  return ZE_RESULT_SUCCESS;
}

ze_result_t prepare_launch(CmdList* l, Kernel* k, Command::Launch* out) {
  if (l == nullptr || k == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (l->ordinal != kComputeOrdinal) return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // copy engines run no kernels
  if (ze_result_t r = check_lost(); r != ZE_RESULT_SUCCESS) return r;
  for (int i = 0; i < k->nargs; ++i)
    if (!k->arg_set[i]) return ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX;
  out->builtin = k->builtin;
  std::memcpy(out->args, k->args, sizeof out->args);  // arguments are captured at append time
  if (k->builtin == Builtin::checksum) {
    if (ze_result_t r = memory().check_range(reinterpret_cast<void*>(out->args[0]), out->args[1]); r != ZE_RESULT_SUCCESS)
      return r;
    if (ze_result_t r = memory().check_range(reinterpret_cast<void*>(out->args[2]), 8); r != ZE_RESULT_SUCCESS) return r;
  } else if (k->builtin == Builtin::fill) {
    if (ze_result_t r = memory().check_range(reinterpret_cast<void*>(out->args[0]), out->args[1]); r != ZE_RESULT_SUCCESS)
      return r;
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListAppendLaunchKernel(ze_command_list_handle_t h, ze_kernel_handle_t hk,
                                            const ze_group_count_t* groups, ze_event_handle_t hSignal, uint32_t nwait,
                                            ze_event_handle_t* waits) {
  CmdList* l = get<CmdList>(h);
  Command::Launch launch{};
  if (ze_result_t r = prepare_launch(l, get<Kernel>(hk), &launch); r != ZE_RESULT_SUCCESS) return r;
  if (groups == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  Command c;
  c.op = Command::Op::kernel;
  c.builtin = launch.builtin;
  std::memcpy(c.args, launch.args, sizeof c.args);
  if (ze_result_t r = signal_event(hSignal, &c.signal); r != ZE_RESULT_SUCCESS) return r;
  return append(l, std::move(c), nwait, waits);
}

}  // namespace ferry::sim
