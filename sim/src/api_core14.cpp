// SPDX-License-Identifier: MIT
// Core functions of the API version the simulated driver reports (1.4) that
// the first version left out: the conformance suite's context, device,
// copy-region, range-barrier and memory-hint cases. Built from the entry
// points in api.cpp where they compose (a region copy is its rows, in order,
// on the same in-order list).
#include <algorithm>
#include <cstring>

#include "api.hpp"
#include "sim.hpp"

namespace ferry::sim {

ze_result_t zeContextCreateEx(ze_driver_handle_t h, const ze_context_desc_t* desc, uint32_t ndev,
                              ze_device_handle_t* devices, ze_context_handle_t* out) {
  if (ndev != 0 && devices == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  for (uint32_t i = 0; i < ndev; ++i)
    if (get<Device>(devices[i]) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  // One device: a context of some of the driver's devices is a context of it.
  return ferry::sim::zeContextCreate(h, desc, out);
}

ze_result_t zeContextSystemBarrier(ze_context_handle_t hc, ze_device_handle_t hd) {
  if (get<Context>(hc) == nullptr || get<Device>(hd) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return ZE_RESULT_SUCCESS;  // host and "device" memory are one coherent memory here
}

ze_result_t zeDeviceGetCacheProperties(ze_device_handle_t h, uint32_t* pCount, ze_device_cache_properties_t* p) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (pCount == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (*pCount == 0 || p == nullptr) {
    *pCount = 1;
    return ZE_RESULT_SUCCESS;
  }
  *pCount = 1;
  p[0].flags = 0;
  p[0].cacheSize = 4u << 20;  // a last-level cache, as a number to plan with
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetImageProperties(ze_device_handle_t h, ze_device_image_properties_t* p) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  // No image support: every limit 0, as the specification says to report it.
  p->maxImageDims1D = p->maxImageDims2D = p->maxImageDims3D = 0;
  p->maxImageBufferSize = 0;
  p->maxImageArraySlices = p->maxSamplers = p->maxReadImageArgs = p->maxWriteImageArgs = 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetModuleProperties(ze_device_handle_t h, ze_device_module_properties_t* p) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  // Its kernels are built in (FERRY_SIM_KERNEL_*), not SPIR-V.
  p->spirvVersionSupported = 0;
  p->flags = 0;
  p->fp16flags = p->fp32flags = p->fp64flags = 0;
  p->maxArgumentsSize = 256;
  p->printfBufferSize = 0;
  std::memset(&p->nativeKernelSupported, 0, sizeof p->nativeKernelSupported);
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDeviceGetGlobalTimestamps(ze_device_handle_t h, uint64_t* host, uint64_t* device) {
  if (get<Device>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (host == nullptr || device == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  // The device's timer is the host's monotonic clock (1 ns, timerResolution).
  *host = *device = now_ns();
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListAppendMemoryCopyRegion(ze_command_list_handle_t h, void* dst, const ze_copy_region_t* dr,
                                                uint32_t dst_pitch, uint32_t dst_slice, const void* src,
                                                const ze_copy_region_t* sr, uint32_t src_pitch, uint32_t src_slice,
                                                ze_event_handle_t hSignal, uint32_t nwait, ze_event_handle_t* waits) {
  if (get<CmdList>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (dst == nullptr || src == nullptr || dr == nullptr || sr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  const uint32_t depth = std::max(1u, sr->depth);
  if (dr->width != sr->width || dr->height != sr->height || std::max(1u, dr->depth) != depth)
    return ZE_RESULT_ERROR_INVALID_SIZE;
  // An empty rectangle copies nothing, as Intel's runtime takes it; its waits
  // and its event still order the list.
  if (sr->width == 0 || sr->height == 0)
    return ferry::sim::zeCommandListAppendBarrier(h, hSignal, nwait, waits);
  // A row may not run past its pitch, nor (in 3-D) a slice past its slice pitch.
  if (uint64_t{sr->originX} + sr->width > src_pitch || uint64_t{dr->originX} + dr->width > dst_pitch)
    return ZE_RESULT_ERROR_INVALID_SIZE;
  if (depth > 1 && (uint64_t{src_pitch} * (sr->originY + sr->height) > src_slice ||
                    uint64_t{dst_pitch} * (dr->originY + dr->height) > dst_slice))
    return ZE_RESULT_ERROR_INVALID_SIZE;
  const uint64_t rows = uint64_t{sr->height} * depth;
  uint64_t k = 0;
  for (uint32_t z = 0; z < depth; ++z) {
    for (uint32_t y = 0; y < sr->height; ++y, ++k) {
      const char* s = static_cast<const char*>(src) + uint64_t{sr->originZ + z} * src_slice +
                      uint64_t{sr->originY + y} * src_pitch + sr->originX;
      char* d = static_cast<char*>(dst) + uint64_t{dr->originZ + z} * dst_slice + uint64_t{dr->originY + y} * dst_pitch +
                dr->originX;
      // The waits hold the first row, the event marks the last: the list is in order.
      const bool first = k == 0, last = k + 1 == rows;
      if (ze_result_t r = ferry::sim::zeCommandListAppendMemoryCopy(h, d, s, sr->width, last ? hSignal : nullptr,
                                                         first ? nwait : 0, first ? waits : nullptr);
          r != ZE_RESULT_SUCCESS)
        return r;
    }
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeCommandListAppendMemoryCopyFromContext(ze_command_list_handle_t h, void* dst, ze_context_handle_t hcs,
                                                     const void* src, size_t size, ze_event_handle_t hSignal,
                                                     uint32_t nwait, ze_event_handle_t* waits) {
  if (get<Context>(hcs) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return ferry::sim::zeCommandListAppendMemoryCopy(h, dst, src, size, hSignal, nwait, waits);
}

ze_result_t zeCommandListAppendMemoryRangesBarrier(ze_command_list_handle_t h, uint32_t n, const size_t* sizes,
                                                   const void** ranges, ze_event_handle_t hSignal, uint32_t nwait,
                                                   ze_event_handle_t* waits) {
  if (n != 0 && (sizes == nullptr || ranges == nullptr)) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  // Everything before it is done before anything after: a full barrier
  // covers any ranges.
  return ferry::sim::zeCommandListAppendBarrier(h, hSignal, nwait, waits);
}

ze_result_t zeCommandListAppendMemoryPrefetch(ze_command_list_handle_t h, const void* ptr, size_t size) {
  if (get<CmdList>(h) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return memory().check_range(ptr, size);  // one memory: nothing to move
}

ze_result_t zeCommandListAppendMemAdvise(ze_command_list_handle_t h, ze_device_handle_t hd, const void* ptr,
                                         size_t size, ze_memory_advice_t advice) {
  if (get<CmdList>(h) == nullptr || get<Device>(hd) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (advice > ZE_MEMORY_ADVICE_BIAS_UNCACHED) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  return memory().check_range(ptr, size);  // advice is a hint; one memory takes none
}

// ---------------------------------------------------------------- images
// The device has no images (zeDeviceGetImageProperties says so, every limit
// 0): no format is supported, so no image handle can exist for the calls
// that take one, and samplers, which only images use, are not offered.
ze_result_t zeImageGetProperties(ze_device_handle_t hd, const ze_image_desc_t* desc, ze_image_properties_t* p) {
  if (get<Device>(hd) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || p == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT;
}

ze_result_t zeImageCreate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_image_desc_t* desc,
                          ze_image_handle_t* out) {
  if (get<Context>(hc) == nullptr || get<Device>(hd) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT;
}

ze_result_t zeImageDestroy(ze_image_handle_t) { return ZE_RESULT_ERROR_INVALID_NULL_HANDLE; }

ze_result_t zeContextMakeImageResident(ze_context_handle_t, ze_device_handle_t, ze_image_handle_t) {
  return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
}

ze_result_t zeContextEvictImage(ze_context_handle_t, ze_device_handle_t, ze_image_handle_t) {
  return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
}

ze_result_t zeCommandListAppendImageCopy(ze_command_list_handle_t, ze_image_handle_t, ze_image_handle_t,
                                         ze_event_handle_t, uint32_t, ze_event_handle_t*) {
  return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
}

ze_result_t zeCommandListAppendImageCopyRegion(ze_command_list_handle_t, ze_image_handle_t, ze_image_handle_t,
                                               const ze_image_region_t*, const ze_image_region_t*, ze_event_handle_t,
                                               uint32_t, ze_event_handle_t*) {
  return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
}

ze_result_t zeCommandListAppendImageCopyToMemory(ze_command_list_handle_t, void*, ze_image_handle_t,
                                                 const ze_image_region_t*, ze_event_handle_t, uint32_t,
                                                 ze_event_handle_t*) {
  return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
}

ze_result_t zeCommandListAppendImageCopyFromMemory(ze_command_list_handle_t, ze_image_handle_t, const void*,
                                                   const ze_image_region_t*, ze_event_handle_t, uint32_t,
                                                   ze_event_handle_t*) {
  return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
}

ze_result_t zeSamplerCreate(ze_context_handle_t hc, ze_device_handle_t hd, const ze_sampler_desc_t* desc,
                            ze_sampler_handle_t* out) {
  if (get<Context>(hc) == nullptr || get<Device>(hd) == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc == nullptr || out == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;  // maxSamplers is 0
}

ze_result_t zeSamplerDestroy(ze_sampler_handle_t) { return ZE_RESULT_ERROR_INVALID_NULL_HANDLE; }

}  // namespace ferry::sim
