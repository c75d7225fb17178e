// SPDX-License-Identifier: MIT
// The rest of the 1.4 core API on the simulated device, through the system
// loader and its validation layer: contexts, device properties, region and
// cross-context copies, timestamps (global and kernel), launch variants,
// module and kernel queries, virtual and physical memory, residency, peers,
// and the image calls of a device without images.
#include <level_zero/ze_api.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "ferry/sim.h"
#include "sim_fixture.hpp"

using ferry::test::Sim;

TEST_CASE("core 1.4 functions the loader used to refuse: contexts, device properties, timestamps", "[sim][core14]") {
  Sim s;
  ze_context_desc_t cd{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
  ze_context_handle_t ctx2 = nullptr;
  ZE_OK(zeContextCreateEx(s.driver, &cd, 1, &s.device, &ctx2));
  ZE_OK(zeContextSystemBarrier(ctx2, s.device));
  ZE_OK(zeContextDestroy(ctx2));
  uint32_t n = 0;
  ZE_OK(zeDeviceGetCacheProperties(s.device, &n, nullptr));
  REQUIRE(n == 1);
  ze_device_cache_properties_t cp{ZE_STRUCTURE_TYPE_DEVICE_CACHE_PROPERTIES, nullptr, 0, 0};
  ZE_OK(zeDeviceGetCacheProperties(s.device, &n, &cp));
  CHECK(cp.cacheSize > 0);
  ze_device_image_properties_t ip{};
  ip.stype = ZE_STRUCTURE_TYPE_DEVICE_IMAGE_PROPERTIES;
  ip.maxImageDims2D = 77;
  ZE_OK(zeDeviceGetImageProperties(s.device, &ip));
  CHECK(ip.maxImageDims2D == 0);  // no images, said the way the specification asks
  ze_device_module_properties_t mp{};
  mp.stype = ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES;
  ZE_OK(zeDeviceGetModuleProperties(s.device, &mp));
  CHECK(mp.maxArgumentsSize > 0);
  // The device works in host memory: plain malloc'd memory is reachable too.
  ze_device_memory_access_properties_t ap{};
  ap.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_ACCESS_PROPERTIES;
  ZE_OK(zeDeviceGetMemoryAccessProperties(s.device, &ap));
  CHECK((ap.sharedSystemAllocCapabilities & ZE_MEMORY_ACCESS_CAP_FLAG_RW) != 0);
  uint64_t h0 = 0, d0 = 0, h1 = 0, d1 = 0;
  ZE_OK(zeDeviceGetGlobalTimestamps(s.device, &h0, &d0));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ZE_OK(zeDeviceGetGlobalTimestamps(s.device, &h1, &d1));
  CHECK(d1 > d0);
  CHECK(d1 - d0 >= 2'000'000);  // 1 ns ticks, as timerResolution says
  CHECK(zeDeviceGetGlobalTimestamps(s.device, nullptr, &d0) == ZE_RESULT_ERROR_INVALID_NULL_POINTER);
}

TEST_CASE("a region copy moves exactly its rectangle; ranges barriers order; hints are accepted", "[sim][core14]") {
  Sim s;
  // A 64 x 16 byte image in a 100-byte pitch; copy the 20 x 5 rectangle at (7, 3)
  // to (1, 2) of a destination with a pitch of 40.
  const uint32_t sp = 100, dp = 40;
  std::vector<unsigned char> src(sp * 16), out(dp * 10, 0xee);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 13 + 1);
  void* dev_src = s.device_alloc(src.size());
  void* dev_dst = s.device_alloc(out.size());
  s.copy_sync(dev_src, src.data(), src.size());
  s.copy_sync(dev_dst, out.data(), out.size());
  ze_copy_region_t sr{7, 3, 0, 20, 5, 0};
  ze_copy_region_t dr{1, 2, 0, 20, 5, 0};
  ZE_OK(zeCommandListAppendMemoryCopyRegion(s.copy, dev_dst, &dr, dp, 0, dev_src, &sr, sp, 0, s.events[0], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[0], UINT64_MAX));
  s.copy_sync(out.data(), dev_dst, out.size());
  for (uint32_t y = 0; y < 10; ++y)
    for (uint32_t x = 0; x < dp; ++x) {
      const bool inside = y >= 2 && y < 7 && x >= 1 && x < 21;
      const unsigned char want = inside ? src[(3 + y - 2) * sp + 7 + x - 1] : 0xee;
      INFO("x " << x << " y " << y);
      REQUIRE(out[y * dp + x] == want);
    }
  // Regions of different sizes, or rows past their pitch, are refused.
  ze_copy_region_t wide{0, 0, 0, 21, 5, 0};
  CHECK(zeCommandListAppendMemoryCopyRegion(s.copy, dev_dst, &wide, dp, 0, dev_src, &sr, sp, 0, nullptr, 0, nullptr) ==
        ZE_RESULT_ERROR_INVALID_SIZE);
  ze_copy_region_t past{30, 0, 0, 20, 5, 0};
  CHECK(zeCommandListAppendMemoryCopyRegion(s.copy, dev_dst, &past, dp, 0, dev_src, &sr, sp, 0, nullptr, 0, nullptr) ==
        ZE_RESULT_ERROR_INVALID_SIZE);
  // An empty rectangle copies nothing and still signals its event.
  ze_copy_region_t empty{0, 0, 0, 0, 0, 0};
  ZE_OK(zeCommandListAppendMemoryCopyRegion(s.copy, dev_dst, &empty, 0, 0, dev_src, &empty, 0, 0, s.events[3], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[3], UINT64_MAX));
  // A copy from another context's allocation, behind a ranges barrier.
  ze_context_desc_t cd{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
  ze_context_handle_t other = nullptr;
  ZE_OK(zeContextCreate(s.driver, &cd, &other));
  const size_t sizes[] = {16};
  const void* ranges[] = {dev_dst};
  ZE_OK(zeCommandListAppendMemoryRangesBarrier(s.copy, 1, sizes, ranges, nullptr, 0, nullptr));
  ZE_OK(zeCommandListAppendMemoryCopyFromContext(s.copy, dev_dst, other, dev_src, 16, s.events[1], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[1], UINT64_MAX));
  s.copy_sync(out.data(), dev_dst, 16);
  CHECK(std::equal(out.begin(), out.begin() + 16, src.begin()));
  ZE_OK(zeContextDestroy(other));
  // A timestamp written when the command runs: after the copy before it, in
  // the device's clock (the host's, here), between the host's readings around it.
  uint64_t* when = static_cast<uint64_t*>(s.host_alloc(8));
  *when = 0;
  uint64_t before = 0, after = 0, dev = 0;
  ZE_OK(zeDeviceGetGlobalTimestamps(s.device, &before, &dev));
  ZE_OK(zeCommandListAppendWriteGlobalTimestamp(s.copy, when, s.events[2], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[2], UINT64_MAX));
  ZE_OK(zeDeviceGetGlobalTimestamps(s.device, &after, &dev));
  CHECK(*when >= before);
  CHECK(*when <= after);
  ZE_OK(zeMemFree(s.ctx, when));
  ZE_OK(zeCommandListAppendMemoryPrefetch(s.copy, dev_src, 64));
  ZE_OK(zeCommandListAppendMemAdvise(s.copy, s.device, dev_src, 64, ZE_MEMORY_ADVICE_SET_READ_MOSTLY));
  ZE_OK(zeMemFree(s.ctx, dev_src));
  ZE_OK(zeMemFree(s.ctx, dev_dst));
}

TEST_CASE("kernel timestamps: when the signalling command ran, on the global clock", "[sim][core14]") {
  Sim s(4, ZE_EVENT_POOL_FLAG_HOST_VISIBLE | ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP);
  ze_module_handle_t m = nullptr;
  ze_kernel_handle_t busy = s.kernel(FERRY_SIM_KERNEL_BUSY, &m);
  const uint64_t us = 3000;
  ZE_OK(zeKernelSetArgumentValue(busy, 0, sizeof us, &us));
  uint64_t before = 0, after = 0, dev = 0;
  ZE_OK(zeDeviceGetGlobalTimestamps(s.device, &before, &dev));
  ze_group_count_t g{1, 1, 1};
  // Held until the host signals events[3]: it cannot have run when queried.
  ZE_OK(zeCommandListAppendLaunchKernel(s.compute, busy, &g, s.events[0], 1, &s.events[3]));
  ze_kernel_timestamp_result_t early{};
  CHECK(zeEventQueryKernelTimestamp(s.events[0], &early) == ZE_RESULT_NOT_READY);
  ZE_OK(zeEventHostSignal(s.events[3]));
  ZE_OK(zeEventHostSynchronize(s.events[0], UINT64_MAX));
  ZE_OK(zeDeviceGetGlobalTimestamps(s.device, &after, &dev));
  ze_kernel_timestamp_result_t t{};
  ZE_OK(zeEventQueryKernelTimestamp(s.events[0], &t));
  CHECK(t.global.kernelStart >= before);
  CHECK(t.global.kernelEnd <= after);
  CHECK(t.global.kernelEnd - t.global.kernelStart >= us * 1000);  // 1 ns ticks
  CHECK(t.context.kernelStart == t.global.kernelStart);
  // The same results written by the device, at offsets of our choosing.
  auto* out = static_cast<ze_kernel_timestamp_result_t*>(s.host_alloc(4 * sizeof(ze_kernel_timestamp_result_t)));
  std::memset(out, 0, 4 * sizeof *out);
  const size_t offsets[] = {2 * sizeof *out};
  ZE_OK(zeCommandListAppendQueryKernelTimestamps(s.compute, 1, &s.events[0], out, offsets, s.events[1], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[1], UINT64_MAX));
  CHECK(out[0].global.kernelStart == 0);
  CHECK(out[2].global.kernelStart == t.global.kernelStart);
  CHECK(out[2].global.kernelEnd == t.global.kernelEnd);
  ZE_OK(zeMemFree(s.ctx, out));
  // An event of a pool without the flag has no kernel timestamps.
  Sim plain(1);
  ZE_OK(zeEventHostSignal(plain.events[0]));
  CHECK(zeEventQueryKernelTimestamp(plain.events[0], &t) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
  ZE_OK(zeKernelDestroy(busy));
  ZE_OK(zeModuleDestroy(m));
}

TEST_CASE("launch variants: cooperative, indirect, and several kernels counted by the device", "[sim][core14]") {
  Sim s;
  ze_module_handle_t m = nullptr;
  ze_kernel_handle_t fill = s.kernel(FERRY_SIM_KERNEL_FILL, &m);
  const uint64_t n = 256;
  auto* a = static_cast<unsigned char*>(s.host_alloc(n));
  auto* b = static_cast<unsigned char*>(s.host_alloc(n));
  auto* words = static_cast<uint32_t*>(s.host_alloc(64));
  auto set = [&](void* p, uint64_t v) {
    ZE_OK(zeKernelSetArgumentValue(fill, 0, sizeof p, &p));
    ZE_OK(zeKernelSetArgumentValue(fill, 1, sizeof n, &n));
    ZE_OK(zeKernelSetArgumentValue(fill, 2, sizeof v, &v));
  };
  ze_group_count_t g{1, 1, 1};
  set(a, 0x11);
  ZE_OK(zeCommandListAppendLaunchCooperativeKernel(s.compute, fill, &g, s.events[0], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[0], UINT64_MAX));
  CHECK(std::all_of(a, a + n, [](unsigned char c) { return c == 0x11; }));
  auto* groups = reinterpret_cast<ze_group_count_t*>(words + 4);
  *groups = g;
  set(b, 0x22);
  ZE_OK(zeCommandListAppendLaunchKernelIndirect(s.compute, fill, groups, s.events[1], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(s.events[1], UINT64_MAX));
  CHECK(std::all_of(b, b + n, [](unsigned char c) { return c == 0x22; }));
  // Two kernels appended, the count word says 1 when the command runs: only
  // the first runs. The word is written after the append.
  ze_module_handle_t m2 = nullptr;
  ze_kernel_handle_t fill2 = s.kernel(FERRY_SIM_KERNEL_FILL, &m2);
  set(a, 0x33);
  const uint64_t v2 = 0x44;
  ZE_OK(zeKernelSetArgumentValue(fill2, 0, sizeof b, &b));
  ZE_OK(zeKernelSetArgumentValue(fill2, 1, sizeof n, &n));
  ZE_OK(zeKernelSetArgumentValue(fill2, 2, sizeof v2, &v2));
  ze_kernel_handle_t both[] = {fill, fill2};
  words[0] = 2;
  ZE_OK(zeEventHostReset(s.events[2]));
  ZE_OK(zeCommandListAppendWaitOnEvents(s.compute, 1, &s.events[2]));  // holds the launch until the word is set
  ZE_OK(zeCommandListAppendLaunchMultipleKernelsIndirect(s.compute, 2, both, words, groups, s.events[3], 0, nullptr));
  words[0] = 1;
  ZE_OK(zeEventHostSignal(s.events[2]));
  ZE_OK(zeEventHostSynchronize(s.events[3], UINT64_MAX));
  CHECK(std::all_of(a, a + n, [](unsigned char c) { return c == 0x33; }));
  CHECK(std::all_of(b, b + n, [](unsigned char c) { return c == 0x22; }));  // not run
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(words)}) ZE_OK(zeMemFree(s.ctx, p));
  ZE_OK(zeKernelDestroy(fill));
  ZE_OK(zeKernelDestroy(fill2));
  ZE_OK(zeModuleDestroy(m));
  ZE_OK(zeModuleDestroy(m2));
}

TEST_CASE("module and kernel queries: native binary round trip, properties, indirect access", "[sim][core14]") {
  Sim s;
  ze_module_handle_t m = nullptr;
  ze_kernel_handle_t k = s.kernel(FERRY_SIM_KERNEL_CHECKSUM, &m);
  size_t size = 0;
  ZE_OK(zeModuleGetNativeBinary(m, &size, nullptr));
  std::vector<uint8_t> bin(size);
  ZE_OK(zeModuleGetNativeBinary(m, &size, bin.data()));
  // What it gives back builds a module again.
  ze_module_desc_t md{ZE_STRUCTURE_TYPE_MODULE_DESC, nullptr, ZE_MODULE_FORMAT_NATIVE, bin.size(), bin.data(), nullptr,
                      nullptr};
  ze_module_handle_t again = nullptr;
  ZE_OK(zeModuleCreate(s.ctx, s.device, &md, &again, nullptr));
  ze_module_handle_t both[] = {m, again};
  ze_module_build_log_handle_t log = nullptr;
  ZE_OK(zeModuleDynamicLink(2, both, &log));
  ZE_OK(zeModuleBuildLogDestroy(log));
  ze_module_properties_t mp{ZE_STRUCTURE_TYPE_MODULE_PROPERTIES, nullptr, 0xff};
  ZE_OK(zeModuleGetProperties(m, &mp));
  CHECK(mp.flags == 0);
  void* ptr = nullptr;
  CHECK(zeModuleGetGlobalPointer(m, "nothing", &size, &ptr) == ZE_RESULT_ERROR_INVALID_GLOBAL_NAME);
  CHECK(zeModuleGetFunctionPointer(m, "nothing", &ptr) == ZE_RESULT_ERROR_INVALID_FUNCTION_NAME);
  ze_kernel_properties_t kp{};
  kp.stype = ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES;
  ZE_OK(zeKernelGetProperties(k, &kp));
  CHECK(kp.numKernelArgs == 3);  // buffer, bytes, result
  ze_kernel_indirect_access_flags_t f = 0xff;
  ZE_OK(zeKernelGetIndirectAccess(k, &f));
  CHECK(f == 0);
  ZE_OK(zeKernelSetIndirectAccess(k, ZE_KERNEL_INDIRECT_ACCESS_FLAG_DEVICE | ZE_KERNEL_INDIRECT_ACCESS_FLAG_HOST));
  ZE_OK(zeKernelGetIndirectAccess(k, &f));
  CHECK(f == (ZE_KERNEL_INDIRECT_ACCESS_FLAG_DEVICE | ZE_KERNEL_INDIRECT_ACCESS_FLAG_HOST));
  ZE_OK(zeKernelSetCacheConfig(k, ZE_CACHE_CONFIG_FLAG_LARGE_SLM));
  uint32_t groups = 0;
  ZE_OK(zeKernelSuggestMaxCooperativeGroupCount(k, &groups));
  CHECK(groups >= 1);
  uint32_t asize = 0;
  char* none = nullptr;
  ZE_OK(zeKernelGetSourceAttributes(k, &asize, &none));
  CHECK(asize == 1);  // the empty string and its terminator
  char text[4] = "xyz";
  char* str = text;
  ZE_OK(zeKernelGetSourceAttributes(k, &asize, &str));
  CHECK(text[0] == '\0');
  // A handle that was never ours (an uninitialised variable after a failed
  // create, as in one of Intel's tests) is refused, not read.
  const uint64_t v = 1;
  for (uintptr_t garbage : {~uintptr_t{0} - 159, uintptr_t{8}, reinterpret_cast<uintptr_t>(&v) + 1})
    CHECK(zeKernelSetArgumentValue(reinterpret_cast<ze_kernel_handle_t>(garbage), 0, sizeof v, &v) ==
          ZE_RESULT_ERROR_INVALID_NULL_HANDLE);
  ZE_OK(zeKernelDestroy(k));
  ZE_OK(zeModuleDestroy(again));
  ZE_OK(zeModuleDestroy(m));
}

TEST_CASE("virtual memory: reserve, back with physical memory, copy through it, unmap, free", "[sim][core14]") {
  Sim s;
  size_t page = 0;
  ZE_OK(zeVirtualMemQueryPageSize(s.ctx, s.device, 1, &page));
  REQUIRE(page >= 4096);
  REQUIRE(page % 4096 == 0);
  const size_t size = 4 * page;
  void* va = nullptr;
  // A start address is a hint (the validation layer of loader 1.8 insists on one).
  static char hint_probe;
  const void* hint = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(&hint_probe) + (uintptr_t{1} << 36)) / page * page);
  ZE_OK(zeVirtualMemReserve(s.ctx, hint, size, &va));
  REQUIRE(va != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(va) % page == 0);
  ze_memory_access_attribute_t access{};
  size_t span = 0;
  ZE_OK(zeVirtualMemGetAccessAttribute(s.ctx, va, size, &access, &span));
  CHECK(access == ZE_MEMORY_ACCESS_ATTRIBUTE_NONE);
  CHECK(span == size);
  // Two pages of physical memory under the middle of the reservation.
  ze_physical_mem_desc_t pd{ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, nullptr, 0, 2 * page};
  ze_physical_mem_handle_t pm = nullptr;
  ZE_OK(zePhysicalMemCreate(s.ctx, s.device, &pd, &pm));
  char* mid = static_cast<char*>(va) + page;
  ZE_OK(zeVirtualMemMap(s.ctx, mid, 2 * page, pm, 0, ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE));
  CHECK(zeVirtualMemMap(s.ctx, mid, page, pm, 0, ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE) ==
        ZE_RESULT_ERROR_INVALID_ARGUMENT);  // already mapped
  CHECK(zeVirtualMemMap(s.ctx, mid + 1, page, pm, 0, ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE) ==
        ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
  ZE_OK(zeVirtualMemGetAccessAttribute(s.ctx, mid, 3 * page, &access, &span));
  CHECK(access == ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE);
  CHECK(span == 2 * page);  // the last page is not mapped
  // The device fills it and copies it back out.
  const unsigned char pattern = 0x5a;
  ZE_OK(zeCommandListAppendMemoryFill(s.copy, mid, &pattern, 1, 2 * page, nullptr, 0, nullptr));
  std::vector<unsigned char> out(2 * page, 0);
  ZE_OK(zeCommandListAppendBarrier(s.copy, nullptr, 0, nullptr));
  s.copy_sync(out.data(), mid, out.size());
  CHECK(std::all_of(out.begin(), out.end(), [](unsigned char c) { return c == 0x5a; }));
  // Read-only: the attribute reads back; the bytes stay readable.
  ZE_OK(zeVirtualMemSetAccessAttribute(s.ctx, mid, page, ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY));
  ZE_OK(zeVirtualMemGetAccessAttribute(s.ctx, mid, 2 * page, &access, &span));
  CHECK(access == ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY);
  CHECK(span == page);
  CHECK(static_cast<unsigned char>(mid[7]) == 0x5a);
  // Unmapped and mapped again from the second physical page: its bytes come along.
  ZE_OK(zeVirtualMemUnmap(s.ctx, mid, 2 * page));
  ZE_OK(zeVirtualMemMap(s.ctx, va, page, pm, page, ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE));
  CHECK(static_cast<unsigned char*>(va)[page - 1] == 0x5a);
  ZE_OK(zeVirtualMemUnmap(s.ctx, va, page));
  // Physical memory is device memory: more than the device has is refused.
  ze_physical_mem_desc_t huge{ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, nullptr, 0, size_t{1} << 46};
  ze_physical_mem_handle_t none = nullptr;
  CHECK(zePhysicalMemCreate(s.ctx, s.device, &huge, &none) == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY);
  ze_physical_mem_desc_t odd{ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, nullptr, 0, page + 1};
  CHECK(zePhysicalMemCreate(s.ctx, s.device, &odd, &none) == ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
  ZE_OK(zePhysicalMemDestroy(s.ctx, pm));
  CHECK(zeVirtualMemFree(s.ctx, va, size - page) == ZE_RESULT_ERROR_INVALID_ARGUMENT);  // not the reservation
  ZE_OK(zeVirtualMemFree(s.ctx, va, size));
}

TEST_CASE("residency, peers, and the image calls of a device without images", "[sim][core14]") {
  Sim s;
  void* p = s.device_alloc(4096);
  ZE_OK(zeContextMakeMemoryResident(s.ctx, s.device, p, 4096));
  ZE_OK(zeContextEvictMemory(s.ctx, s.device, p, 4096));
  CHECK(zeContextMakeMemoryResident(s.ctx, s.device, p, 8192) == ZE_RESULT_ERROR_INVALID_SIZE);  // past its end
  ze_bool_t can = 0;
  ZE_OK(zeDeviceCanAccessPeer(s.device, s.device, &can));
  CHECK(can);
  ze_device_p2p_properties_t pp{ZE_STRUCTURE_TYPE_DEVICE_P2P_PROPERTIES, nullptr, 0};
  ZE_OK(zeDeviceGetP2PProperties(s.device, s.device, &pp));
  CHECK((pp.flags & ZE_DEVICE_P2P_PROPERTY_FLAG_ACCESS) != 0);
  ze_image_desc_t id{};
  id.stype = ZE_STRUCTURE_TYPE_IMAGE_DESC;
  id.type = ZE_IMAGE_TYPE_2D;
  id.format.layout = ZE_IMAGE_FORMAT_LAYOUT_8_8_8_8;
  id.width = id.height = 16;
  id.depth = 1;
  ze_image_properties_t ip{ZE_STRUCTURE_TYPE_IMAGE_PROPERTIES, nullptr, 0};
  CHECK(zeImageGetProperties(s.device, &id, &ip) == ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT);
  ze_image_handle_t img = nullptr;
  CHECK(zeImageCreate(s.ctx, s.device, &id, &img) == ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT);
  CHECK(img == nullptr);
  ZE_OK(zeMemFree(s.ctx, p));
}
