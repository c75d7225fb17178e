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
// ferry_upload_direct; on a regular list, the copy is staged when the list
// is executed: ze_lists.hpp, with the list's close, reset and destroy and
// the queue's execute), zeCommandListAppendMemoryCopyRegion (the same, its
// source's rows staged as one span: ze_region.hpp), and what it needs to judge a copy: which lists are
// immediate and of which context, which context belongs to which driver,
// and which host ranges the program imported itself. Everything else is the
// real driver's, untouched. Handles here are the driver's own (the loader's
// wrappers, if any, sit above).
//
// The driver it wraps: $FERRY_RUN_ZE_DRIVER (ferry-run sets it to the first
// entry of the program's driver list). Only the table getters are exported.
#include <dlfcn.h>
#include <level_zero/zes_ddi.h>
#include <level_zero/zet_ddi.h>

#include <cstdlib>

#include "ze_shim.hpp"

#define FERRY_EXPORT extern "C" __attribute__((visibility("default")))

namespace ferry::run {

Real& real() {
  static Real r;
  return r;
}

namespace {

void* real_lib() {
  static void* lib = [] {
    const char* path = std::getenv("FERRY_RUN_ZE_DRIVER");
    if (path == nullptr || *path == '\0') path = "libze_intel_gpu.so.1";
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }();
  return lib;
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

// The first table the loader was given keeps the real entries (a layer may
// ask again); an entry the driver has is replaced with ours.
template <class Table>
void keep(Table& into, bool& kept, const Table& t) {
  if (!kept) into = t, kept = true;
}
template <class Fn>
void put(Fn& slot, Fn ours) {
  if (slot != nullptr) slot = ours;
}

}  // namespace
}  // namespace ferry::run

namespace fr = ferry::run;

// Tables with entries of ours: the real entries kept, ours put in their place.
FERRY_EXPORT ze_result_t zeGetDriverProcAddrTable(ze_api_version_t v, ze_driver_dditable_t* t) {
  const ze_result_t r = fr::forward("zeGetDriverProcAddrTable", v, t);
  if (r != ZE_RESULT_SUCCESS) return r;
  fr::keep(fr::real().driver, fr::real().have_driver, *t);
  fr::put(t->pfnGet, &fr::driver_get);
  fr::put(t->pfnGetExtensionFunctionAddress, &fr::driver_extension);
  return r;
}

FERRY_EXPORT ze_result_t zeGetContextProcAddrTable(ze_api_version_t v, ze_context_dditable_t* t) {
  const ze_result_t r = fr::forward("zeGetContextProcAddrTable", v, t);
  if (r != ZE_RESULT_SUCCESS) return r;
  fr::keep(fr::real().context, fr::real().have_context, *t);
  fr::put(t->pfnCreate, &fr::context_create);
  fr::put(t->pfnCreateEx, &fr::context_create_ex);
  fr::put(t->pfnDestroy, &fr::context_destroy);
  return r;
}

FERRY_EXPORT ze_result_t zeGetCommandListProcAddrTable(ze_api_version_t v, ze_command_list_dditable_t* t) {
  const ze_result_t r = fr::forward("zeGetCommandListProcAddrTable", v, t);
  if (r != ZE_RESULT_SUCCESS) return r;
  fr::keep(fr::real().list, fr::real().have_list, *t);
  fr::put(t->pfnCreate, &fr::list_create);
  fr::put(t->pfnCreateImmediate, &fr::list_create_immediate);
  fr::put(t->pfnDestroy, &fr::list_destroy);
  fr::put(t->pfnClose, &fr::list_close);
  fr::put(t->pfnReset, &fr::list_reset);
  // Without the calls it needs, copies stay the driver's.
  if (t->pfnAppendMemoryCopy != nullptr && t->pfnAppendBarrier != nullptr) t->pfnAppendMemoryCopy = fr::append_copy;
  if (t->pfnAppendMemoryCopyRegion != nullptr && t->pfnAppendMemoryCopy != nullptr && t->pfnAppendBarrier != nullptr)
    t->pfnAppendMemoryCopyRegion = fr::append_copy_region;
  return r;
}

FERRY_EXPORT ze_result_t zeGetCommandQueueProcAddrTable(ze_api_version_t v, ze_command_queue_dditable_t* t) {
  const ze_result_t r = fr::forward("zeGetCommandQueueProcAddrTable", v, t);
  if (r != ZE_RESULT_SUCCESS) return r;
  fr::keep(fr::real().queue, fr::real().have_queue, *t);
  fr::put(t->pfnExecuteCommandLists, &fr::queue_execute);
  return r;
}

FERRY_EXPORT ze_result_t zeGetMemProcAddrTable(ze_api_version_t v, ze_mem_dditable_t* t) {
  const ze_result_t r = fr::forward("zeGetMemProcAddrTable", v, t);
  if (r == ZE_RESULT_SUCCESS) fr::keep(fr::real().mem, fr::real().have_mem, *t);
  return r;
}

// Every other table: the real driver's, as it is.
#define FERRY_FORWARD(name, table) \
  FERRY_EXPORT ze_result_t name(ze_api_version_t v, table* t) { return fr::forward(#name, v, t); }

FERRY_FORWARD(zeGetGlobalProcAddrTable, ze_global_dditable_t)
FERRY_FORWARD(zeGetDeviceProcAddrTable, ze_device_dditable_t)
FERRY_FORWARD(zeGetDeviceExpProcAddrTable, ze_device_exp_dditable_t)
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
