// SPDX-License-Identifier: MIT
// ferry-sim-check: loads the simulated driver through the system Level Zero
// loader and shows, step by step, that it behaves as ferry needs: a copy-only
// queue group, asynchronous in-order copies, and the pageable-source hazard.
#include <level_zero/loader/ze_loader.h>
#include <level_zero/ze_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ferry/sim.h"

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  std::printf("  [%s] %s\n", ok ? " ok " : "FAIL", what);
  if (!ok) ++failures;
}

#define ZE(call)                                                                          \
  do {                                                                                    \
    ze_result_t r_ = (call);                                                              \
    if (r_ != ZE_RESULT_SUCCESS) {                                                        \
      std::fprintf(stderr, "ferry-sim-check: %s failed: 0x%x\n", #call, (unsigned)r_); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf(
        "usage: ferry-sim-check\n\n"
        "Loads ferry's simulated Level Zero driver through the system loader\n"
        "(libze_loader) and checks discovery, the copy-only queue group, in-order\n"
        "asynchronous copies and the pageable-source hazard. Exits 0 when every\n"
        "check holds. FERRY_SIM_DRIVER overrides the driver's path.\n");
    return 0;
  }
  const char* driver = std::getenv("FERRY_SIM_DRIVER");
  if (driver == nullptr || *driver == '\0') driver = FERRY_SIM_PATH;
  setenv("ZE_ENABLE_ALT_DRIVERS", driver, 1);
  std::printf("ferry-sim-check: ZE_ENABLE_ALT_DRIVERS=%s\n", driver);

  ZE(zeInit(0));
  uint32_t ndrv = 0;
  ZE(zeDriverGet(&ndrv, nullptr));
  check(ndrv == 1, "the loader finds one driver");
  ze_driver_handle_t drv = nullptr;
  ndrv = 1;
  ZE(zeDriverGet(&ndrv, &drv));
  uint32_t ndev = 0;
  ZE(zeDeviceGet(drv, &ndev, nullptr));
  ze_device_handle_t dev = nullptr;
  ndev = 1;
  ZE(zeDeviceGet(drv, &ndev, &dev));
  ze_device_properties_t props{};
  props.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  ZE(zeDeviceGetProperties(dev, &props));
  std::printf("  device: %s\n", props.name);

  uint32_t ngroups = 0;
  ZE(zeDeviceGetCommandQueueGroupProperties(dev, &ngroups, nullptr));
  std::vector<ze_command_queue_group_properties_t> groups(ngroups);
  for (auto& g : groups) g.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
  ZE(zeDeviceGetCommandQueueGroupProperties(dev, &ngroups, groups.data()));
  int copy_ordinal = -1;
  for (uint32_t i = 0; i < ngroups; ++i)
    if ((groups[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY) &&
        !(groups[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE))
      copy_ordinal = static_cast<int>(i);
  check(copy_ordinal >= 0, "the device has a copy-only queue group");

  ze_context_desc_t cdesc{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
  ze_context_handle_t ctx = nullptr;
  ZE(zeContextCreate(drv, &cdesc, &ctx));
  ze_command_queue_desc_t qdesc{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, static_cast<uint32_t>(copy_ordinal), 0,
                                0, ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t list = nullptr;
  ZE(zeCommandListCreateImmediate(ctx, dev, &qdesc, &list));

  ze_event_pool_desc_t pdesc{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 2};
  ze_event_pool_handle_t pool = nullptr;
  ZE(zeEventPoolCreate(ctx, &pdesc, 1, &dev, &pool));
  ze_event_desc_t edesc{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, ZE_EVENT_SCOPE_FLAG_HOST, ZE_EVENT_SCOPE_FLAG_HOST};
  ze_event_handle_t gate = nullptr, done = nullptr;
  ZE(zeEventCreate(pool, &edesc, &gate));
  edesc.index = 1;
  ZE(zeEventCreate(pool, &edesc, &done));

  ze_device_mem_alloc_desc_t ddesc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* dbuf = nullptr;
  ZE(zeMemAllocDevice(ctx, &ddesc, 4096, 64, dev, &dbuf));

  // The hazard: a copy from pageable memory queued behind a held queue reads
  // the source when it runs, so a mutation after the append reaches the device.
  std::vector<char> src(4096, 'A');
  ZE(zeCommandListAppendWaitOnEvents(list, 1, &gate));
  ZE(zeCommandListAppendMemoryCopy(list, dbuf, src.data(), src.size(), done, 0, nullptr));
  check(zeEventQueryStatus(done) == ZE_RESULT_NOT_READY, "the copy waits behind the held queue (NOT_READY)");
  std::memset(src.data(), 'B', src.size());
  ZE(zeEventHostSignal(gate));
  ZE(zeEventHostSynchronize(done, UINT64_MAX));
  std::vector<char> back(4096, 0);
  ZE(zeEventHostReset(done));
  ZE(zeCommandListAppendMemoryCopy(list, back.data(), dbuf, back.size(), done, 0, nullptr));
  ZE(zeEventHostSynchronize(done, UINT64_MAX));
  check(back[0] == 'B' && back[4095] == 'B',
        "hazard reproduced: the device holds the bytes written after the append returned");

  ze_memory_allocation_properties_t ap{ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES, nullptr,
                                       ZE_MEMORY_TYPE_FORCE_UINT32, 0, 0};
  ZE(zeMemGetAllocProperties(ctx, src.data(), &ap, nullptr));
  check(ap.type == ZE_MEMORY_TYPE_UNKNOWN, "pageable memory reports ZE_MEMORY_TYPE_UNKNOWN");

  using import_fn = ze_result_t (*)(ze_driver_handle_t, void*, size_t);
  import_fn import = nullptr;
  ZE(zeDriverGetExtensionFunctionAddress(drv, "zexDriverImportExternalPointer", reinterpret_cast<void**>(&import)));
  // Extension functions take the driver's own handle: translate the loader's
  // (it wraps handles when several drivers or the intercept layer are active).
  ze_driver_handle_t native = drv;
  zelLoaderTranslateHandle(ZEL_HANDLE_DRIVER, drv, reinterpret_cast<void**>(&native));
  check(import != nullptr && import(native, src.data(), src.size()) == ZE_RESULT_SUCCESS,
        "zexDriverImportExternalPointer registers a host range");

  zeMemFree(ctx, dbuf);
  zeEventDestroy(gate);
  zeEventDestroy(done);
  zeEventPoolDestroy(pool);
  zeCommandListDestroy(list);
  zeContextDestroy(ctx);
  std::printf("ferry-sim-check: %s\n", failures == 0 ? "all checks hold" : "FAILED");
  return failures == 0 ? 0 : 1;
}
