// SPDX-License-Identifier: MIT
// ferry-run's Level Zero side: a driver library that the system loader
// loads in place of the real one (ZE_ENABLE_ALT_DRIVERS, set by ferry-run)
// and that wraps it. It hands the loader the real driver's tables with a few
// entries of its own: however a program reaches the loader, linked or
// through dlopen + dlsym, its calls come through here (LD_PRELOAD sees only
// the linked ones).
//
// The entries it takes: zeCommandListAppendMemoryCopy (a pageable source
// into device memory on an immediate command list is staged into ferry's
// pinned staging before the call returns, and the list copies from there:
// ferry_upload_direct), and what it needs to judge a copy: which lists are
// immediate and of which context, which context belongs to which driver,
// and which host ranges the program imported itself. Everything else is the
// real driver's, untouched. Handles here are the driver's own (the loader's
// wrappers, if any, sit above).
//
// The driver it wraps: $FERRY_RUN_ZE_DRIVER (ferry-run sets it to the first
// entry of the program's driver list). Only the table getters are exported.
#include <dlfcn.h>
#include <ferry/ferry.h>
#include <level_zero/ze_ddi.h>
#include <level_zero/zes_ddi.h>
#include <level_zero/zet_ddi.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "lanes.hpp"
#include "policy.hpp"

#define FERRY_EXPORT extern "C" __attribute__((visibility("default")))

namespace ferry::run {
namespace {

using ImportFn = ze_result_t (*)(ze_driver_handle_t, void*, size_t);
using ReleaseFn = ze_result_t (*)(ze_driver_handle_t, void*);
struct WriteDesc {
  uint32_t scope;  // ZEX_MEM_ACTION_SCOPE_FLAG_HOST = 1 << 2 (as ferry/level_zero.h)
};
using WriteFn = ze_result_t (*)(ze_command_list_handle_t, WriteDesc*, void*, uint64_t);

// The real driver: its library and the entries of its tables we call or replace.
struct Real {
  void* lib = nullptr;
  ze_driver_dditable_t driver{};
  ze_context_dditable_t context{};
  ze_command_list_dditable_t list{};
  ze_mem_dditable_t mem{};
  bool have_driver = false, have_context = false, have_list = false, have_mem = false;
};
Real& real() {
  static Real r;
  return r;
}

void* real_lib() {
  static void* lib = [] {
    const char* path = std::getenv("FERRY_RUN_ZE_DRIVER");
    if (path == nullptr || *path == '\0') path = "libze_intel_gpu.so.1";
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }();
  return lib;
}

struct ListInfo {
  ze_context_handle_t ctx = nullptr;
  bool immediate = false;
};

// What the wrapped calls learned, for judging copies.
struct Known {
  std::shared_mutex mu;
  std::unordered_map<ze_command_list_handle_t, ListInfo> lists;
  std::unordered_map<ze_context_handle_t, ze_driver_handle_t> contexts;
  std::vector<ze_driver_handle_t> drivers;
  std::map<uintptr_t, uintptr_t> imported;  // start -> end of host ranges imported (zexDriverImportExternalPointer)
  std::map<ze_driver_handle_t, ImportFn> import_fn;
  std::map<ze_driver_handle_t, ReleaseFn> release_fn;
  std::map<ze_driver_handle_t, WriteFn> write_fn;
};
Known& known() {
  static Known k;
  return k;
}

ImportFn real_import = nullptr;
ReleaseFn real_release = nullptr;

// ---- the driver's extension functions, by driver
template <class Fn>
Fn extension(ze_driver_handle_t d, const char* name, std::map<ze_driver_handle_t, Fn>& cache) {
  {
    std::shared_lock lock(known().mu);
    if (auto it = cache.find(d); it != cache.end()) return it->second;
  }
  void* f = nullptr;
  if (real().driver.pfnGetExtensionFunctionAddress(d, name, &f) != ZE_RESULT_SUCCESS) f = nullptr;
  std::unique_lock lock(known().mu);
  cache[d] = reinterpret_cast<Fn>(f);
  return reinterpret_cast<Fn>(f);
}

// ---- wrapped entries: what they learn
ze_result_t driver_get(uint32_t* count, ze_driver_handle_t* drivers) {
  const ze_result_t r = real().driver.pfnGet(count, drivers);
  if (r == ZE_RESULT_SUCCESS && drivers != nullptr) {
    std::unique_lock lock(known().mu);
    for (uint32_t i = 0; i < *count; ++i)
      if (std::find(known().drivers.begin(), known().drivers.end(), drivers[i]) == known().drivers.end())
        known().drivers.push_back(drivers[i]);
  }
  return r;
}

ze_result_t import_wrapped(ze_driver_handle_t d, void* p, size_t n) {
  const ze_result_t r = real_import(d, p, n);
  if (r == ZE_RESULT_SUCCESS) {
    std::unique_lock lock(known().mu);
    known().imported[reinterpret_cast<uintptr_t>(p)] = reinterpret_cast<uintptr_t>(p) + n;
  }
  return r;
}

ze_result_t release_wrapped(ze_driver_handle_t d, void* p) {
  const ze_result_t r = real_release(d, p);
  if (r == ZE_RESULT_SUCCESS) {
    std::unique_lock lock(known().mu);
    known().imported.erase(reinterpret_cast<uintptr_t>(p));
  }
  return r;
}

// The program's own imports count as pinned sources: they are handed its
// wrapped functions (ferry's own imports call the real ones directly).
ze_result_t driver_extension(ze_driver_handle_t d, const char* name, void** f) {
  const ze_result_t r = real().driver.pfnGetExtensionFunctionAddress(d, name, f);
  if (r != ZE_RESULT_SUCCESS || name == nullptr || f == nullptr || *f == nullptr) return r;
  if (std::strcmp(name, "zexDriverImportExternalPointer") == 0) {
    real_import = reinterpret_cast<ImportFn>(*f);
    *f = reinterpret_cast<void*>(&import_wrapped);
  } else if (std::strcmp(name, "zexDriverReleaseImportedPointer") == 0) {
    real_release = reinterpret_cast<ReleaseFn>(*f);
    *f = reinterpret_cast<void*>(&release_wrapped);
  }
  return r;
}

void note_context(ze_driver_handle_t d, ze_context_handle_t* c, ze_result_t r) {
  if (r != ZE_RESULT_SUCCESS || c == nullptr) return;
  std::unique_lock lock(known().mu);
  known().contexts[*c] = d;
}

ze_result_t context_create(ze_driver_handle_t d, const ze_context_desc_t* desc, ze_context_handle_t* c) {
  const ze_result_t r = real().context.pfnCreate(d, desc, c);
  note_context(d, c, r);
  return r;
}

ze_result_t context_create_ex(ze_driver_handle_t d, const ze_context_desc_t* desc, uint32_t n,
                              ze_device_handle_t* devices, ze_context_handle_t* c) {
  const ze_result_t r = real().context.pfnCreateEx(d, desc, n, devices, c);
  note_context(d, c, r);
  return r;
}

ze_result_t context_destroy(ze_context_handle_t c) {
  {
    std::unique_lock lock(known().mu);
    known().contexts.erase(c);
  }
  return real().context.pfnDestroy(c);
}

void note_list(ze_command_list_handle_t* l, ze_context_handle_t c, bool immediate, ze_result_t r) {
  if (r != ZE_RESULT_SUCCESS || l == nullptr) return;
  std::unique_lock lock(known().mu);
  known().lists[*l] = ListInfo{c, immediate};
}

ze_result_t list_create(ze_context_handle_t c, ze_device_handle_t dev, const ze_command_list_desc_t* desc,
                        ze_command_list_handle_t* l) {
  const ze_result_t r = real().list.pfnCreate(c, dev, desc, l);
  note_list(l, c, false, r);
  return r;
}

ze_result_t list_create_immediate(ze_context_handle_t c, ze_device_handle_t dev, const ze_command_queue_desc_t* desc,
                                  ze_command_list_handle_t* l) {
  const ze_result_t r = real().list.pfnCreateImmediate(c, dev, desc, l);
  note_list(l, c, true, r);
  return r;
}

ze_result_t list_destroy(ze_command_list_handle_t l) {
  {
    std::unique_lock lock(known().mu);
    known().lists.erase(l);
  }
  return real().list.pfnDestroy(l);
}

// ---- judging a copy
Mem classify(ze_context_handle_t ctx, const void* p) {
  ze_memory_allocation_properties_t props{};
  props.stype = ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES;
  ze_device_handle_t dev = nullptr;
  if (real().mem.pfnGetAllocProperties(ctx, p, &props, &dev) != ZE_RESULT_SUCCESS) return Mem::other;
  switch (props.type) {
    case ZE_MEMORY_TYPE_HOST: return Mem::pinned;
    case ZE_MEMORY_TYPE_DEVICE:
    case ZE_MEMORY_TYPE_SHARED: return Mem::device;
    case ZE_MEMORY_TYPE_UNKNOWN: break;
    default: return Mem::other;
  }
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::shared_lock lock(known().mu);
  auto it = known().imported.upper_bound(at);
  if (it != known().imported.begin() && at < std::prev(it)->second) return Mem::pinned;
  return Mem::pageable;
}

// ---- preparing a lane's client: its staging imported with the driver,
// and its staging areas as they come (ferry_set_staging_hooks)
int attach_area(void* drv, void* area, uint64_t bytes) {
  auto d = static_cast<ze_driver_handle_t>(drv);
  ImportFn f = extension<ImportFn>(d, "zexDriverImportExternalPointer", known().import_fn);
  if (f == nullptr) return -ENOTSUP;
  return f(d, area, bytes) == ZE_RESULT_SUCCESS ? 0 : -EIO;
}

void detach_area(void* drv, void* area, uint64_t) {
  auto d = static_cast<ze_driver_handle_t>(drv);
  if (ReleaseFn f = extension<ReleaseFn>(d, "zexDriverReleaseImportedPointer", known().release_fn)) f(d, area);
}

int prepare(ferry_client* c, uint64_t key, void*) {
  auto d = reinterpret_cast<ze_driver_handle_t>(key);
  if (extension<WriteFn>(d, "zexCommandListAppendWriteToMemory", known().write_fn) == nullptr) return -ENOTSUP;
  ferry_timeline tl{};
  tl.size = sizeof tl;
  if (int r = ferry_get_timeline(c, &tl); r != 0) return r;
  if (int r = attach_area(d, tl.segment, tl.segment_bytes); r != 0) return r;
  // One driver's areas: a lane serves the lists of the driver it was
  // prepared for first (the usual case: one driver in the process).
  ferry_staging_hooks h{};
  h.size = sizeof h;
  h.ctx = d;
  h.attach = attach_area;
  h.detach = detach_area;
  return ferry_set_staging_hooks(c, &h);
}

// ---- the staged copy: ferry_upload_direct's ops on an immediate list
struct ZeCopy {
  ze_command_list_handle_t list;
  char* dst;
  uint64_t bytes;
  ze_event_handle_t signal;
  uint32_t waits;
  ze_event_handle_t* wait_events;
  WriteFn write;
  uint64_t appended = 0;  // copies appended so far
  ze_result_t refused = ZE_RESULT_SUCCESS;
};

// The first piece waits for the program's events, the last signals its
// event: the pieces between are ordered by the barriers before each write.
int ze_copy(void* p, uint64_t off, const void* staging, uint64_t n) {
  auto* z = static_cast<ZeCopy*>(p);
  const bool first = z->appended == 0, last = off + n == z->bytes;
  const ze_result_t r = real().list.pfnAppendMemoryCopy(z->list, z->dst + off, staging, n, last ? z->signal : nullptr,
                                                        first ? z->waits : 0, first ? z->wait_events : nullptr);
  if (r != ZE_RESULT_SUCCESS) {
    if (z->refused == ZE_RESULT_SUCCESS) z->refused = r;
    return -EIO;
  }
  ++z->appended;
  return 0;
}

int ze_write(void* p, volatile uint64_t* word, uint64_t value) {
  auto* z = static_cast<ZeCopy*>(p);
  // Commands of a list may overlap: the write comes after the copy's last byte.
  if (real().list.pfnAppendBarrier(z->list, nullptr, 0, nullptr) != ZE_RESULT_SUCCESS) return -EIO;
  WriteDesc desc{1u << 2};
  return z->write(z->list, &desc, const_cast<uint64_t*>(word), value) == ZE_RESULT_SUCCESS ? 0 : -EIO;
}

ze_result_t append_copy(ze_command_list_handle_t list, void* dst, const void* src, size_t size,
                        ze_event_handle_t signal, uint32_t waits, ze_event_handle_t* wait_events) {
  auto pass = [&](int why) {
    Lanes::get().passed(why, size);
    return real().list.pfnAppendMemoryCopy(list, dst, src, size, signal, waits, wait_events);
  };
  Lanes& lanes = Lanes::get();
  if (small(size, lanes.settings().ze_min_bytes) || dst == nullptr || src == nullptr) return pass(FERRY_PASS_SMALL);
  ListInfo info;
  ze_driver_handle_t drv = nullptr;
  {
    std::shared_lock lock(known().mu);
    auto it = known().lists.find(list);
    if (it != known().lists.end()) info = it->second;
    if (auto c = known().contexts.find(info.ctx); c != known().contexts.end()) drv = c->second;
    if (drv == nullptr && known().drivers.size() == 1) drv = known().drivers.front();
  }
  Copy facts;
  facts.bytes = size;
  facts.min_bytes = lanes.settings().ze_min_bytes;
  facts.dst = classify(info.ctx, dst);
  facts.src = classify(info.ctx, src);
  // A list it never saw made (none should be) is judged unknown.
  facts.queue = info.ctx == nullptr ? FERRY_PASS_UNSUPPORTED
                : !info.immediate   ? FERRY_PASS_REPLAYABLE
                : drv == nullptr    ? FERRY_PASS_UNSUPPORTED
                                    : -1;
  const Verdict v = decide(facts);
  if (!v.stage) return pass(v.why);
  int why = FERRY_PASS_ERROR;
  ferry_client* c = lanes.acquire(reinterpret_cast<uint64_t>(list), 0, reinterpret_cast<uint64_t>(drv), prepare,
                                  nullptr, &why, Lanes::kConnectWaitUnsafe);
  if (c == nullptr) return pass(why);
  ZeCopy z{list, static_cast<char*>(dst), size, signal, waits, wait_events,
           extension<WriteFn>(drv, "zexCommandListAppendWriteToMemory", known().write_fn)};
  ferry_direct_ops ops{};
  ops.size = sizeof ops;
  ops.flags = FERRY_DIRECT_NO_WAIT;
  ops.ctx = &z;
  ops.queue = reinterpret_cast<uint64_t>(list);
  ops.queue_context = 0;  // a list's handle names it in the whole process
  ops.copy = ze_copy;
  ops.write = ze_write;
  const int r = ferry_upload_direct(c, src, size, &ops, nullptr);
  lanes.done(c, r);
  if (r == 0) {
    lanes.staged(size);
    return ZE_RESULT_SUCCESS;
  }
  // The driver refused the copy itself: what the call would have said.
  if (z.refused != ZE_RESULT_SUCCESS && z.appended == 0) {
    lanes.passed(FERRY_PASS_ERROR, size);
    return z.refused;
  }
  // Nothing appended (no room now), or part of it: the driver's own copy,
  // in full, after whatever went before.
  return pass(r == -EAGAIN ? FERRY_PASS_NO_ROOM : FERRY_PASS_ERROR);
}

// ---- the table getters the loader calls
template <class Table>
using Getter = ze_result_t (*)(ze_api_version_t, Table*);

template <class Table>
ze_result_t forward(const char* name, ze_api_version_t v, Table* t) {
  void* lib = real_lib();
  if (lib == nullptr) return ZE_RESULT_ERROR_UNINITIALIZED;
  auto g = reinterpret_cast<Getter<Table>>(dlsym(lib, name));
  if (g == nullptr) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
  return g(v, t);
}

}  // namespace
}  // namespace ferry::run

namespace fr = ferry::run;

// Tables with entries of ours: the real entries kept, ours put in their place.
FERRY_EXPORT ze_result_t zeGetDriverProcAddrTable(ze_api_version_t v, ze_driver_dditable_t* t) {
  const ze_result_t r = fr::forward("zeGetDriverProcAddrTable", v, t);
  if (r != ZE_RESULT_SUCCESS) return r;
  if (!fr::real().have_driver) fr::real().driver = *t, fr::real().have_driver = true;
  if (t->pfnGet != nullptr) t->pfnGet = fr::driver_get;
  if (t->pfnGetExtensionFunctionAddress != nullptr) t->pfnGetExtensionFunctionAddress = fr::driver_extension;
  return r;
}

FERRY_EXPORT ze_result_t zeGetContextProcAddrTable(ze_api_version_t v, ze_context_dditable_t* t) {
  const ze_result_t r = fr::forward("zeGetContextProcAddrTable", v, t);
  if (r != ZE_RESULT_SUCCESS) return r;
  if (!fr::real().have_context) fr::real().context = *t, fr::real().have_context = true;
  if (t->pfnCreate != nullptr) t->pfnCreate = fr::context_create;
  if (t->pfnCreateEx != nullptr) t->pfnCreateEx = fr::context_create_ex;
  if (t->pfnDestroy != nullptr) t->pfnDestroy = fr::context_destroy;
  return r;
}

FERRY_EXPORT ze_result_t zeGetCommandListProcAddrTable(ze_api_version_t v, ze_command_list_dditable_t* t) {
  const ze_result_t r = fr::forward("zeGetCommandListProcAddrTable", v, t);
  if (r != ZE_RESULT_SUCCESS) return r;
  if (!fr::real().have_list) fr::real().list = *t, fr::real().have_list = true;
  if (t->pfnCreate != nullptr) t->pfnCreate = fr::list_create;
  if (t->pfnCreateImmediate != nullptr) t->pfnCreateImmediate = fr::list_create_immediate;
  if (t->pfnDestroy != nullptr) t->pfnDestroy = fr::list_destroy;
  // Without the calls it needs, copies stay the driver's.
  if (t->pfnAppendMemoryCopy != nullptr && t->pfnAppendBarrier != nullptr) t->pfnAppendMemoryCopy = fr::append_copy;
  return r;
}

FERRY_EXPORT ze_result_t zeGetMemProcAddrTable(ze_api_version_t v, ze_mem_dditable_t* t) {
  const ze_result_t r = fr::forward("zeGetMemProcAddrTable", v, t);
  if (r == ZE_RESULT_SUCCESS && !fr::real().have_mem) fr::real().mem = *t, fr::real().have_mem = true;
  return r;
}

// Every other table: the real driver's, as it is.
#define FERRY_FORWARD(name, table) \
  FERRY_EXPORT ze_result_t name(ze_api_version_t v, table* t) { return fr::forward(#name, v, t); }

FERRY_FORWARD(zeGetGlobalProcAddrTable, ze_global_dditable_t)
FERRY_FORWARD(zeGetDeviceProcAddrTable, ze_device_dditable_t)
FERRY_FORWARD(zeGetDeviceExpProcAddrTable, ze_device_exp_dditable_t)
FERRY_FORWARD(zeGetCommandQueueProcAddrTable, ze_command_queue_dditable_t)
FERRY_FORWARD(zeGetEventProcAddrTable, ze_event_dditable_t)
FERRY_FORWARD(zeGetEventExpProcAddrTable, ze_event_exp_dditable_t)
FERRY_FORWARD(zeGetEventPoolProcAddrTable, ze_event_pool_dditable_t)
FERRY_FORWARD(zeGetFabricEdgeExpProcAddrTable, ze_fabric_edge_exp_dditable_t)
FERRY_FORWARD(zeGetFabricVertexExpProcAddrTable, ze_fabric_vertex_exp_dditable_t)
FERRY_FORWARD(zeGetFenceProcAddrTable, ze_fence_dditable_t)
FERRY_FORWARD(zeGetImageProcAddrTable, ze_image_dditable_t)
FERRY_FORWARD(zeGetImageExpProcAddrTable, ze_image_exp_dditable_t)
FERRY_FORWARD(zeGetKernelProcAddrTable, ze_kernel_dditable_t)
FERRY_FORWARD(zeGetKernelExpProcAddrTable, ze_kernel_exp_dditable_t)
FERRY_FORWARD(zeGetModuleProcAddrTable, ze_module_dditable_t)
FERRY_FORWARD(zeGetModuleBuildLogProcAddrTable, ze_module_build_log_dditable_t)
FERRY_FORWARD(zeGetPhysicalMemProcAddrTable, ze_physical_mem_dditable_t)
FERRY_FORWARD(zeGetSamplerProcAddrTable, ze_sampler_dditable_t)
FERRY_FORWARD(zeGetVirtualMemProcAddrTable, ze_virtual_mem_dditable_t)
FERRY_FORWARD(zetGetCommandListProcAddrTable, zet_command_list_dditable_t)
FERRY_FORWARD(zetGetContextProcAddrTable, zet_context_dditable_t)
FERRY_FORWARD(zetGetDebugProcAddrTable, zet_debug_dditable_t)
FERRY_FORWARD(zetGetDeviceProcAddrTable, zet_device_dditable_t)
FERRY_FORWARD(zetGetKernelProcAddrTable, zet_kernel_dditable_t)
FERRY_FORWARD(zetGetMetricGroupExpProcAddrTable, zet_metric_group_exp_dditable_t)
FERRY_FORWARD(zetGetMetricGroupProcAddrTable, zet_metric_group_dditable_t)
FERRY_FORWARD(zetGetMetricProcAddrTable, zet_metric_dditable_t)
FERRY_FORWARD(zetGetMetricQueryPoolProcAddrTable, zet_metric_query_pool_dditable_t)
FERRY_FORWARD(zetGetMetricQueryProcAddrTable, zet_metric_query_dditable_t)
FERRY_FORWARD(zetGetMetricStreamerProcAddrTable, zet_metric_streamer_dditable_t)
FERRY_FORWARD(zetGetModuleProcAddrTable, zet_module_dditable_t)
FERRY_FORWARD(zetGetTracerExpProcAddrTable, zet_tracer_exp_dditable_t)
FERRY_FORWARD(zesGetDeviceProcAddrTable, zes_device_dditable_t)
FERRY_FORWARD(zesGetDiagnosticsProcAddrTable, zes_diagnostics_dditable_t)
FERRY_FORWARD(zesGetDriverProcAddrTable, zes_driver_dditable_t)
FERRY_FORWARD(zesGetEngineProcAddrTable, zes_engine_dditable_t)
FERRY_FORWARD(zesGetFabricPortProcAddrTable, zes_fabric_port_dditable_t)
FERRY_FORWARD(zesGetFanProcAddrTable, zes_fan_dditable_t)
FERRY_FORWARD(zesGetFirmwareProcAddrTable, zes_firmware_dditable_t)
FERRY_FORWARD(zesGetFrequencyProcAddrTable, zes_frequency_dditable_t)
FERRY_FORWARD(zesGetLedProcAddrTable, zes_led_dditable_t)
FERRY_FORWARD(zesGetMemoryProcAddrTable, zes_memory_dditable_t)
FERRY_FORWARD(zesGetPerformanceFactorProcAddrTable, zes_performance_factor_dditable_t)
FERRY_FORWARD(zesGetPowerProcAddrTable, zes_power_dditable_t)
FERRY_FORWARD(zesGetPsuProcAddrTable, zes_psu_dditable_t)
FERRY_FORWARD(zesGetRasProcAddrTable, zes_ras_dditable_t)
FERRY_FORWARD(zesGetSchedulerProcAddrTable, zes_scheduler_dditable_t)
FERRY_FORWARD(zesGetStandbyProcAddrTable, zes_standby_dditable_t)
FERRY_FORWARD(zesGetTemperatureProcAddrTable, zes_temperature_dditable_t)
