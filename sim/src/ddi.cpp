// SPDX-License-Identifier: MIT
// The only symbols the simulated driver exports: the table getters the
// Level Zero loader dlsym()s. Every core (ze) function of API 1.4 has an
// entry; the tools (zet) and sysman (zes) tables are returned with NULL
// entries, which the loader turns into ZE_RESULT_ERROR_UNSUPPORTED_FEATURE.
#include <level_zero/ze_ddi.h>
#include <level_zero/zes_ddi.h>
#include <level_zero/zet_ddi.h>

#include <cstring>

#include "api.hpp"

#define FERRY_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// Accepts any 1.x version up to our own (the loader asks for 1.4).
template <class Table>
ze_result_t prepare(ze_api_version_t version, Table* table) {
  if (table == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (ZE_MAJOR_VERSION(version) != ZE_MAJOR_VERSION(ZE_API_VERSION_CURRENT) ||
      ZE_MINOR_VERSION(version) > ZE_MINOR_VERSION(ZE_API_VERSION_CURRENT))
    return ZE_RESULT_ERROR_UNSUPPORTED_VERSION;
  std::memset(table, 0, sizeof *table);
  return ZE_RESULT_SUCCESS;
}

}  // namespace

namespace s = ferry::sim;

// Each getter defines one exported function that fills its table; BODY names
// the entries we implement.
#define FERRY_TABLE(getter, type, BODY)                                  \
  FERRY_EXPORT ze_result_t getter(ze_api_version_t version, type* t) { \
    ze_result_t r = prepare(version, t);                                 \
    if (r != ZE_RESULT_SUCCESS) return r;                                \
    BODY return ZE_RESULT_SUCCESS;                                       \
  }

FERRY_TABLE(zeGetGlobalProcAddrTable, ze_global_dditable_t, { t->pfnInit = s::zeInit; })

FERRY_TABLE(zeGetDriverProcAddrTable, ze_driver_dditable_t, {
  t->pfnGet = s::zeDriverGet;
  t->pfnGetApiVersion = s::zeDriverGetApiVersion;
  t->pfnGetProperties = s::zeDriverGetProperties;
  t->pfnGetIpcProperties = s::zeDriverGetIpcProperties;
  t->pfnGetExtensionProperties = s::zeDriverGetExtensionProperties;
  t->pfnGetExtensionFunctionAddress = s::zeDriverGetExtensionFunctionAddress;
})

FERRY_TABLE(zeGetDeviceProcAddrTable, ze_device_dditable_t, {
  t->pfnGet = s::zeDeviceGet;
  t->pfnGetSubDevices = s::zeDeviceGetSubDevices;
  t->pfnGetProperties = s::zeDeviceGetProperties;
  t->pfnGetComputeProperties = s::zeDeviceGetComputeProperties;
  t->pfnGetCommandQueueGroupProperties = s::zeDeviceGetCommandQueueGroupProperties;
  t->pfnGetMemoryProperties = s::zeDeviceGetMemoryProperties;
  t->pfnGetMemoryAccessProperties = s::zeDeviceGetMemoryAccessProperties;
  t->pfnGetExternalMemoryProperties = s::zeDeviceGetExternalMemoryProperties;
  t->pfnGetStatus = s::zeDeviceGetStatus;
  t->pfnGetCacheProperties = s::zeDeviceGetCacheProperties;
  t->pfnGetImageProperties = s::zeDeviceGetImageProperties;
  t->pfnGetModuleProperties = s::zeDeviceGetModuleProperties;
  t->pfnGetGlobalTimestamps = s::zeDeviceGetGlobalTimestamps;
  t->pfnGetP2PProperties = s::zeDeviceGetP2PProperties;
  t->pfnCanAccessPeer = s::zeDeviceCanAccessPeer;
})

FERRY_TABLE(zeGetContextProcAddrTable, ze_context_dditable_t, {
  t->pfnCreate = s::zeContextCreate;
  t->pfnDestroy = s::zeContextDestroy;
  t->pfnGetStatus = s::zeContextGetStatus;
  t->pfnCreateEx = s::zeContextCreateEx;
  t->pfnSystemBarrier = s::zeContextSystemBarrier;
  t->pfnMakeMemoryResident = s::zeContextMakeMemoryResident;
  t->pfnEvictMemory = s::zeContextEvictMemory;
  t->pfnMakeImageResident = s::zeContextMakeImageResident;
  t->pfnEvictImage = s::zeContextEvictImage;
})

FERRY_TABLE(zeGetCommandQueueProcAddrTable, ze_command_queue_dditable_t, {
  t->pfnCreate = s::zeCommandQueueCreate;
  t->pfnDestroy = s::zeCommandQueueDestroy;
  t->pfnExecuteCommandLists = s::zeCommandQueueExecuteCommandLists;
  t->pfnSynchronize = s::zeCommandQueueSynchronize;
})

FERRY_TABLE(zeGetCommandListProcAddrTable, ze_command_list_dditable_t, {
  t->pfnCreate = s::zeCommandListCreate;
  t->pfnCreateImmediate = s::zeCommandListCreateImmediate;
  t->pfnDestroy = s::zeCommandListDestroy;
  t->pfnClose = s::zeCommandListClose;
  t->pfnReset = s::zeCommandListReset;
  t->pfnAppendBarrier = s::zeCommandListAppendBarrier;
  t->pfnAppendMemoryCopy = s::zeCommandListAppendMemoryCopy;
  t->pfnAppendMemoryCopyRegion = s::zeCommandListAppendMemoryCopyRegion;
  t->pfnAppendMemoryCopyFromContext = s::zeCommandListAppendMemoryCopyFromContext;
  t->pfnAppendMemoryRangesBarrier = s::zeCommandListAppendMemoryRangesBarrier;
  t->pfnAppendMemoryPrefetch = s::zeCommandListAppendMemoryPrefetch;
  t->pfnAppendMemAdvise = s::zeCommandListAppendMemAdvise;
  t->pfnAppendWriteGlobalTimestamp = s::zeCommandListAppendWriteGlobalTimestamp;
  t->pfnAppendMemoryFill = s::zeCommandListAppendMemoryFill;
  t->pfnAppendSignalEvent = s::zeCommandListAppendSignalEvent;
  t->pfnAppendWaitOnEvents = s::zeCommandListAppendWaitOnEvents;
  t->pfnAppendEventReset = s::zeCommandListAppendEventReset;
  t->pfnAppendLaunchKernel = s::zeCommandListAppendLaunchKernel;
  t->pfnAppendImageCopy = s::zeCommandListAppendImageCopy;
  t->pfnAppendImageCopyRegion = s::zeCommandListAppendImageCopyRegion;
  t->pfnAppendImageCopyToMemory = s::zeCommandListAppendImageCopyToMemory;
  t->pfnAppendImageCopyFromMemory = s::zeCommandListAppendImageCopyFromMemory;
  t->pfnAppendQueryKernelTimestamps = s::zeCommandListAppendQueryKernelTimestamps;
  t->pfnAppendLaunchCooperativeKernel = s::zeCommandListAppendLaunchCooperativeKernel;
  t->pfnAppendLaunchKernelIndirect = s::zeCommandListAppendLaunchKernelIndirect;
  t->pfnAppendLaunchMultipleKernelsIndirect = s::zeCommandListAppendLaunchMultipleKernelsIndirect;
})

FERRY_TABLE(zeGetFenceProcAddrTable, ze_fence_dditable_t, {
  t->pfnCreate = s::zeFenceCreate;
  t->pfnDestroy = s::zeFenceDestroy;
  t->pfnHostSynchronize = s::zeFenceHostSynchronize;
  t->pfnQueryStatus = s::zeFenceQueryStatus;
  t->pfnReset = s::zeFenceReset;
})

FERRY_TABLE(zeGetEventPoolProcAddrTable, ze_event_pool_dditable_t, {
  t->pfnCreate = s::zeEventPoolCreate;
  t->pfnDestroy = s::zeEventPoolDestroy;
  t->pfnGetIpcHandle = s::zeEventPoolGetIpcHandle;
  t->pfnOpenIpcHandle = s::zeEventPoolOpenIpcHandle;
  t->pfnCloseIpcHandle = s::zeEventPoolCloseIpcHandle;
})

FERRY_TABLE(zeGetEventProcAddrTable, ze_event_dditable_t, {
  t->pfnCreate = s::zeEventCreate;
  t->pfnDestroy = s::zeEventDestroy;
  t->pfnHostSignal = s::zeEventHostSignal;
  t->pfnHostSynchronize = s::zeEventHostSynchronize;
  t->pfnQueryStatus = s::zeEventQueryStatus;
  t->pfnHostReset = s::zeEventHostReset;
  t->pfnQueryKernelTimestamp = s::zeEventQueryKernelTimestamp;
})

FERRY_TABLE(zeGetModuleProcAddrTable, ze_module_dditable_t, {
  t->pfnCreate = s::zeModuleCreate;
  t->pfnDestroy = s::zeModuleDestroy;
  t->pfnGetKernelNames = s::zeModuleGetKernelNames;
  t->pfnDynamicLink = s::zeModuleDynamicLink;
  t->pfnGetNativeBinary = s::zeModuleGetNativeBinary;
  t->pfnGetGlobalPointer = s::zeModuleGetGlobalPointer;
  t->pfnGetProperties = s::zeModuleGetProperties;
  t->pfnGetFunctionPointer = s::zeModuleGetFunctionPointer;
})

FERRY_TABLE(zeGetModuleBuildLogProcAddrTable, ze_module_build_log_dditable_t, {
  t->pfnDestroy = s::zeModuleBuildLogDestroy;
  t->pfnGetString = s::zeModuleBuildLogGetString;
})

FERRY_TABLE(zeGetKernelProcAddrTable, ze_kernel_dditable_t, {
  t->pfnCreate = s::zeKernelCreate;
  t->pfnDestroy = s::zeKernelDestroy;
  t->pfnSetGroupSize = s::zeKernelSetGroupSize;
  t->pfnSuggestGroupSize = s::zeKernelSuggestGroupSize;
  t->pfnSetArgumentValue = s::zeKernelSetArgumentValue;
  t->pfnGetName = s::zeKernelGetName;
  t->pfnSetCacheConfig = s::zeKernelSetCacheConfig;
  t->pfnSuggestMaxCooperativeGroupCount = s::zeKernelSuggestMaxCooperativeGroupCount;
  t->pfnSetIndirectAccess = s::zeKernelSetIndirectAccess;
  t->pfnGetIndirectAccess = s::zeKernelGetIndirectAccess;
  t->pfnGetSourceAttributes = s::zeKernelGetSourceAttributes;
  t->pfnGetProperties = s::zeKernelGetProperties;
})

FERRY_TABLE(zeGetMemProcAddrTable, ze_mem_dditable_t, {
  t->pfnAllocShared = s::zeMemAllocShared;
  t->pfnAllocDevice = s::zeMemAllocDevice;
  t->pfnAllocHost = s::zeMemAllocHost;
  t->pfnFree = s::zeMemFree;
  t->pfnGetAllocProperties = s::zeMemGetAllocProperties;
  t->pfnGetAddressRange = s::zeMemGetAddressRange;
  t->pfnGetIpcHandle = s::zeMemGetIpcHandle;
  t->pfnOpenIpcHandle = s::zeMemOpenIpcHandle;
  t->pfnCloseIpcHandle = s::zeMemCloseIpcHandle;
})

FERRY_TABLE(zeGetImageProcAddrTable, ze_image_dditable_t, {
  t->pfnGetProperties = s::zeImageGetProperties;
  t->pfnCreate = s::zeImageCreate;
  t->pfnDestroy = s::zeImageDestroy;
})

FERRY_TABLE(zeGetSamplerProcAddrTable, ze_sampler_dditable_t, {
  t->pfnCreate = s::zeSamplerCreate;
  t->pfnDestroy = s::zeSamplerDestroy;
})

FERRY_TABLE(zeGetPhysicalMemProcAddrTable, ze_physical_mem_dditable_t, {
  t->pfnCreate = s::zePhysicalMemCreate;
  t->pfnDestroy = s::zePhysicalMemDestroy;
})

FERRY_TABLE(zeGetVirtualMemProcAddrTable, ze_virtual_mem_dditable_t, {
  t->pfnReserve = s::zeVirtualMemReserve;
  t->pfnFree = s::zeVirtualMemFree;
  t->pfnQueryPageSize = s::zeVirtualMemQueryPageSize;
  t->pfnMap = s::zeVirtualMemMap;
  t->pfnUnmap = s::zeVirtualMemUnmap;
  t->pfnSetAccessAttribute = s::zeVirtualMemSetAccessAttribute;
  t->pfnGetAccessAttribute = s::zeVirtualMemGetAccessAttribute;
})

FERRY_TABLE(zetGetDeviceProcAddrTable, zet_device_dditable_t, {})
FERRY_TABLE(zetGetContextProcAddrTable, zet_context_dditable_t, {})
FERRY_TABLE(zetGetCommandListProcAddrTable, zet_command_list_dditable_t, {})
FERRY_TABLE(zetGetKernelProcAddrTable, zet_kernel_dditable_t, {})
FERRY_TABLE(zetGetModuleProcAddrTable, zet_module_dditable_t, {})
FERRY_TABLE(zetGetDebugProcAddrTable, zet_debug_dditable_t, {})
FERRY_TABLE(zetGetMetricProcAddrTable, zet_metric_dditable_t, {})
FERRY_TABLE(zetGetMetricGroupProcAddrTable, zet_metric_group_dditable_t, {})
FERRY_TABLE(zetGetMetricQueryProcAddrTable, zet_metric_query_dditable_t, {})
FERRY_TABLE(zetGetMetricQueryPoolProcAddrTable, zet_metric_query_pool_dditable_t, {})
FERRY_TABLE(zetGetMetricStreamerProcAddrTable, zet_metric_streamer_dditable_t, {})
FERRY_TABLE(zetGetTracerExpProcAddrTable, zet_tracer_exp_dditable_t, {})

FERRY_TABLE(zesGetDriverProcAddrTable, zes_driver_dditable_t, {})
FERRY_TABLE(zesGetDeviceProcAddrTable, zes_device_dditable_t, {})
FERRY_TABLE(zesGetSchedulerProcAddrTable, zes_scheduler_dditable_t, {})
FERRY_TABLE(zesGetPerformanceFactorProcAddrTable, zes_performance_factor_dditable_t, {})
FERRY_TABLE(zesGetPowerProcAddrTable, zes_power_dditable_t, {})
FERRY_TABLE(zesGetFrequencyProcAddrTable, zes_frequency_dditable_t, {})
FERRY_TABLE(zesGetEngineProcAddrTable, zes_engine_dditable_t, {})
FERRY_TABLE(zesGetStandbyProcAddrTable, zes_standby_dditable_t, {})
FERRY_TABLE(zesGetFirmwareProcAddrTable, zes_firmware_dditable_t, {})
FERRY_TABLE(zesGetMemoryProcAddrTable, zes_memory_dditable_t, {})
FERRY_TABLE(zesGetFabricPortProcAddrTable, zes_fabric_port_dditable_t, {})
FERRY_TABLE(zesGetTemperatureProcAddrTable, zes_temperature_dditable_t, {})
FERRY_TABLE(zesGetPsuProcAddrTable, zes_psu_dditable_t, {})
FERRY_TABLE(zesGetFanProcAddrTable, zes_fan_dditable_t, {})
FERRY_TABLE(zesGetLedProcAddrTable, zes_led_dditable_t, {})
FERRY_TABLE(zesGetRasProcAddrTable, zes_ras_dditable_t, {})
FERRY_TABLE(zesGetDiagnosticsProcAddrTable, zes_diagnostics_dditable_t, {})
