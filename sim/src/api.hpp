// SPDX-License-Identifier: MIT
// Entry points of the simulated driver, for the tables in ddi.cpp.
#pragma once

#include <level_zero/ze_api.h>

namespace ferry::sim {

ze_result_t zeInit(ze_init_flags_t flags);
ze_result_t zeDriverGet(uint32_t* pCount, ze_driver_handle_t* phDrivers);
ze_result_t zeDriverGetApiVersion(ze_driver_handle_t h, ze_api_version_t* v);
ze_result_t zeDriverGetProperties(ze_driver_handle_t h, ze_driver_properties_t* p);
ze_result_t zeDriverGetIpcProperties(ze_driver_handle_t h, ze_driver_ipc_properties_t* p);
ze_result_t zeDriverGetExtensionProperties(ze_driver_handle_t h, uint32_t* pCount, ze_driver_extension_properties_t* props);
ze_result_t zeDriverGetExtensionFunctionAddress(ze_driver_handle_t h, const char* name, void** out);
ze_result_t zeDeviceGet(ze_driver_handle_t h, uint32_t* pCount, ze_device_handle_t* out);
ze_result_t zeDeviceGetSubDevices(ze_device_handle_t h, uint32_t* pCount, ze_device_handle_t*);
ze_result_t zeDeviceGetProperties(ze_device_handle_t h, ze_device_properties_t* p);
ze_result_t zeDeviceGetComputeProperties(ze_device_handle_t h, ze_device_compute_properties_t* p);
ze_result_t zeDeviceGetCommandQueueGroupProperties(ze_device_handle_t h, uint32_t* pCount, ze_command_queue_group_properties_t* p);
ze_result_t zeDeviceGetMemoryProperties(ze_device_handle_t h, uint32_t* pCount, ze_device_memory_properties_t* p);
ze_result_t zeDeviceGetMemoryAccessProperties(ze_device_handle_t h, ze_device_memory_access_properties_t* p);
ze_result_t zeDeviceGetExternalMemoryProperties(ze_device_handle_t h, ze_device_external_memory_properties_t* p);
ze_result_t zeDeviceGetStatus(ze_device_handle_t h);
ze_result_t zeContextCreate(ze_driver_handle_t h, const ze_context_desc_t* desc, ze_context_handle_t* out);
ze_result_t zeContextDestroy(ze_context_handle_t h);
ze_result_t zeContextGetStatus(ze_context_handle_t h);
ze_result_t zeMemAllocDevice(ze_context_handle_t hc, const ze_device_mem_alloc_desc_t* desc, size_t size, size_t align, ze_device_handle_t hd, void** out);
ze_result_t zeMemAllocHost(ze_context_handle_t hc, const ze_host_mem_alloc_desc_t* desc, size_t size, size_t align, void** out);
ze_result_t zeMemAllocShared(ze_context_handle_t hc, const ze_device_mem_alloc_desc_t* ddesc, const ze_host_mem_alloc_desc_t* hdesc, size_t size, size_t align, ze_device_handle_t hd, void** out);
ze_result_t zeMemFree(ze_context_handle_t hc, void* ptr);
ze_result_t zeMemGetAllocProperties(ze_context_handle_t hc, const void* ptr, ze_memory_allocation_properties_t* p, ze_device_handle_t* dev);
ze_result_t zeMemGetAddressRange(ze_context_handle_t hc, const void* ptr, void** base, size_t* size);
ze_result_t zeMemGetIpcHandle(ze_context_handle_t hc, const void* ptr, ze_ipc_mem_handle_t* out);
ze_result_t zeMemOpenIpcHandle(ze_context_handle_t hc, ze_device_handle_t hd, ze_ipc_mem_handle_t h, ze_ipc_memory_flags_t, void** out);
ze_result_t zeMemCloseIpcHandle(ze_context_handle_t hc, const void* ptr);
ze_result_t zeEventPoolCreate(ze_context_handle_t hc, const ze_event_pool_desc_t* desc, uint32_t, ze_device_handle_t*, ze_event_pool_handle_t* out);
ze_result_t zeEventPoolDestroy(ze_event_pool_handle_t h);
ze_result_t zeEventPoolGetIpcHandle(ze_event_pool_handle_t h, ze_ipc_event_pool_handle_t* out);
ze_result_t zeEventPoolOpenIpcHandle(ze_context_handle_t hc, ze_ipc_event_pool_handle_t h, ze_event_pool_handle_t* out);
ze_result_t zeEventPoolCloseIpcHandle(ze_event_pool_handle_t h);
ze_result_t zeEventCreate(ze_event_pool_handle_t h, const ze_event_desc_t* desc, ze_event_handle_t* out);
ze_result_t zeEventDestroy(ze_event_handle_t h);
ze_result_t zeEventHostSignal(ze_event_handle_t h);
ze_result_t zeEventHostSynchronize(ze_event_handle_t h, uint64_t timeout);
ze_result_t zeEventQueryStatus(ze_event_handle_t h);
ze_result_t zeEventHostReset(ze_event_handle_t h);
ze_result_t zeFenceCreate(ze_command_queue_handle_t hq, const ze_fence_desc_t* desc, ze_fence_handle_t* out);
ze_result_t zeFenceDestroy(ze_fence_handle_t h);
ze_result_t zeFenceHostSynchronize(ze_fence_handle_t h, uint64_t timeout);
ze_result_t zeFenceQueryStatus(ze_fence_handle_t h);
ze_result_t zeFenceReset(ze_fence_handle_t h);
ze_result_t zeCommandQueueCreate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_command_queue_desc_t* desc, ze_command_queue_handle_t* out);
ze_result_t zeCommandQueueDestroy(ze_command_queue_handle_t h);
ze_result_t zeCommandQueueExecuteCommandLists(ze_command_queue_handle_t h, uint32_t n, ze_command_list_handle_t* lists, ze_fence_handle_t hf);
ze_result_t zeCommandQueueSynchronize(ze_command_queue_handle_t h, uint64_t timeout);
ze_result_t zeCommandListCreate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_command_list_desc_t* desc, ze_command_list_handle_t* out);
ze_result_t zeCommandListCreateImmediate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_command_queue_desc_t* desc, ze_command_list_handle_t* out);
ze_result_t zeCommandListDestroy(ze_command_list_handle_t h);
ze_result_t zeCommandListClose(ze_command_list_handle_t h);
ze_result_t zeCommandListReset(ze_command_list_handle_t h);
ze_result_t zeCommandListAppendMemoryCopy(ze_command_list_handle_t h, void* dst, const void* src, size_t size, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendMemoryFill(ze_command_list_handle_t h, void* dst, const void* pattern, size_t pattern_size, size_t size, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendBarrier(ze_command_list_handle_t h, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendSignalEvent(ze_command_list_handle_t h, ze_event_handle_t hEvent);
ze_result_t zeCommandListAppendWaitOnEvents(ze_command_list_handle_t h, uint32_t n, ze_event_handle_t* events);
ze_result_t zeCommandListAppendEventReset(ze_command_list_handle_t h, ze_event_handle_t hEvent);
ze_result_t zeModuleCreate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_module_desc_t* desc, ze_module_handle_t* out, ze_module_build_log_handle_t* log);
ze_result_t zeModuleDestroy(ze_module_handle_t h);
ze_result_t zeModuleGetKernelNames(ze_module_handle_t h, uint32_t* pCount, const char** names);
ze_result_t zeModuleBuildLogDestroy(ze_module_build_log_handle_t h);
ze_result_t zeModuleBuildLogGetString(ze_module_build_log_handle_t h, size_t* pSize, char* out);
ze_result_t zeKernelCreate(ze_module_handle_t h, const ze_kernel_desc_t* desc, ze_kernel_handle_t* out);
ze_result_t zeKernelDestroy(ze_kernel_handle_t h);
ze_result_t zeKernelSetGroupSize(ze_kernel_handle_t h, uint32_t x, uint32_t y, uint32_t z);
ze_result_t zeKernelSuggestGroupSize(ze_kernel_handle_t h, uint32_t, uint32_t, uint32_t, uint32_t* x, uint32_t* y, uint32_t* z);
ze_result_t zeKernelSetArgumentValue(ze_kernel_handle_t h, uint32_t index, size_t size, const void* value);
ze_result_t zeKernelGetName(ze_kernel_handle_t h, size_t* pSize, char* name);
ze_result_t zeCommandListAppendLaunchKernel(ze_command_list_handle_t h, ze_kernel_handle_t hk, const ze_group_count_t* groups, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);

ze_result_t zeCommandListAppendWriteGlobalTimestamp(ze_command_list_handle_t h, uint64_t* dst, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
// api_core14.cpp
ze_result_t zeContextCreateEx(ze_driver_handle_t h, const ze_context_desc_t* desc, uint32_t ndev, ze_device_handle_t* devices, ze_context_handle_t* out);
ze_result_t zeContextSystemBarrier(ze_context_handle_t hc, ze_device_handle_t hd);
ze_result_t zeDeviceGetCacheProperties(ze_device_handle_t h, uint32_t* pCount, ze_device_cache_properties_t* p);
ze_result_t zeDeviceGetImageProperties(ze_device_handle_t h, ze_device_image_properties_t* p);
ze_result_t zeDeviceGetModuleProperties(ze_device_handle_t h, ze_device_module_properties_t* p);
ze_result_t zeDeviceGetGlobalTimestamps(ze_device_handle_t h, uint64_t* host, uint64_t* device);
ze_result_t zeCommandListAppendMemoryCopyRegion(ze_command_list_handle_t h, void* dst, const ze_copy_region_t* dr, uint32_t dst_pitch, uint32_t dst_slice, const void* src, const ze_copy_region_t* sr, uint32_t src_pitch, uint32_t src_slice, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendMemoryCopyFromContext(ze_command_list_handle_t h, void* dst, ze_context_handle_t hcs, const void* src, size_t size, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendMemoryRangesBarrier(ze_command_list_handle_t h, uint32_t n, const size_t* sizes, const void** ranges, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendMemoryPrefetch(ze_command_list_handle_t h, const void* ptr, size_t size);
ze_result_t zeCommandListAppendMemAdvise(ze_command_list_handle_t h, ze_device_handle_t hd, const void* ptr, size_t size, ze_memory_advice_t advice);
// api_core14.cpp: images and samplers (the device has none)
ze_result_t zeImageGetProperties(ze_device_handle_t hd, const ze_image_desc_t* desc, ze_image_properties_t* p);
ze_result_t zeImageCreate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_image_desc_t* desc, ze_image_handle_t* out);
ze_result_t zeImageDestroy(ze_image_handle_t h);
ze_result_t zeContextMakeImageResident(ze_context_handle_t hc, ze_device_handle_t hd, ze_image_handle_t hi);
ze_result_t zeContextEvictImage(ze_context_handle_t hc, ze_device_handle_t hd, ze_image_handle_t hi);
ze_result_t zeCommandListAppendImageCopy(ze_command_list_handle_t h, ze_image_handle_t dst, ze_image_handle_t src, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendImageCopyRegion(ze_command_list_handle_t h, ze_image_handle_t dst, ze_image_handle_t src, const ze_image_region_t* dr, const ze_image_region_t* sr, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendImageCopyToMemory(ze_command_list_handle_t h, void* dst, ze_image_handle_t src, const ze_image_region_t* sr, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendImageCopyFromMemory(ze_command_list_handle_t h, ze_image_handle_t dst, const void* src, const ze_image_region_t* dr, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeSamplerCreate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_sampler_desc_t* desc, ze_sampler_handle_t* out);
ze_result_t zeSamplerDestroy(ze_sampler_handle_t h);

// api_kernels.cpp
ze_result_t zeEventQueryKernelTimestamp(ze_event_handle_t h, ze_kernel_timestamp_result_t* out);
ze_result_t zeCommandListAppendQueryKernelTimestamps(ze_command_list_handle_t h, uint32_t n, ze_event_handle_t* events, void* dst, const size_t* offsets, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendLaunchCooperativeKernel(ze_command_list_handle_t h, ze_kernel_handle_t hk, const ze_group_count_t* groups, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendLaunchKernelIndirect(ze_command_list_handle_t h, ze_kernel_handle_t hk, const ze_group_count_t* groups, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeCommandListAppendLaunchMultipleKernelsIndirect(ze_command_list_handle_t h, uint32_t n, ze_kernel_handle_t* kernels, const uint32_t* count, const ze_group_count_t* groups, ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits);
ze_result_t zeModuleDynamicLink(uint32_t n, ze_module_handle_t* modules, ze_module_build_log_handle_t* log);
ze_result_t zeModuleGetNativeBinary(ze_module_handle_t h, size_t* size, uint8_t* out);
ze_result_t zeModuleGetGlobalPointer(ze_module_handle_t h, const char* name, size_t* size, void** ptr);
ze_result_t zeModuleGetProperties(ze_module_handle_t h, ze_module_properties_t* p);
ze_result_t zeModuleGetFunctionPointer(ze_module_handle_t h, const char* name, void** out);
ze_result_t zeKernelSetCacheConfig(ze_kernel_handle_t h, ze_cache_config_flags_t flags);
ze_result_t zeKernelSuggestMaxCooperativeGroupCount(ze_kernel_handle_t h, uint32_t* count);
ze_result_t zeKernelSetIndirectAccess(ze_kernel_handle_t h, ze_kernel_indirect_access_flags_t flags);
ze_result_t zeKernelGetIndirectAccess(ze_kernel_handle_t h, ze_kernel_indirect_access_flags_t* flags);
ze_result_t zeKernelGetSourceAttributes(ze_kernel_handle_t h, uint32_t* size, char** out);
ze_result_t zeKernelGetProperties(ze_kernel_handle_t h, ze_kernel_properties_t* p);

// api_memory.cpp
ze_result_t zeVirtualMemQueryPageSize(ze_context_handle_t hc, ze_device_handle_t hd, size_t size, size_t* out);
ze_result_t zeVirtualMemReserve(ze_context_handle_t hc, const void* hint, size_t size, void** out);
ze_result_t zeVirtualMemFree(ze_context_handle_t hc, const void* ptr, size_t size);
ze_result_t zeVirtualMemMap(ze_context_handle_t hc, const void* ptr, size_t size, ze_physical_mem_handle_t hp, size_t offset, ze_memory_access_attribute_t access);
ze_result_t zeVirtualMemUnmap(ze_context_handle_t hc, const void* ptr, size_t size);
ze_result_t zeVirtualMemSetAccessAttribute(ze_context_handle_t hc, const void* ptr, size_t size, ze_memory_access_attribute_t access);
ze_result_t zeVirtualMemGetAccessAttribute(ze_context_handle_t hc, const void* ptr, size_t size, ze_memory_access_attribute_t* access, size_t* out_size);
ze_result_t zePhysicalMemCreate(ze_context_handle_t hc, ze_device_handle_t hd, ze_physical_mem_desc_t* desc, ze_physical_mem_handle_t* out);
ze_result_t zePhysicalMemDestroy(ze_context_handle_t hc, ze_physical_mem_handle_t hp);
ze_result_t zeContextMakeMemoryResident(ze_context_handle_t hc, ze_device_handle_t hd, void* ptr, size_t size);
ze_result_t zeContextEvictMemory(ze_context_handle_t hc, ze_device_handle_t hd, void* ptr, size_t size);
ze_result_t zeDeviceGetP2PProperties(ze_device_handle_t h, ze_device_handle_t peer, ze_device_p2p_properties_t* p);
ze_result_t zeDeviceCanAccessPeer(ze_device_handle_t h, ze_device_handle_t peer, ze_bool_t* value);

}  // namespace ferry::sim
