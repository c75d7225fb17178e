// SPDX-License-Identifier: MIT
// What ferryd takes from the Level Zero loader (opened at run time) and from
// Intel's driver extensions: the function list, their table, and the
// extension signatures as the compute runtime declares them.
#pragma once

#include <level_zero/loader/ze_loader.h>
#include <level_zero/ze_api.h>

#include <cerrno>
#include <cstdint>

namespace ferry::ferryd::ze {

#define FERRY_ZE_FUNCS(X)                    \
  X(zeInit)                                  \
  X(zeDriverGet)                             \
  X(zeDriverGetProperties)                   \
  X(zeDriverGetExtensionFunctionAddress)     \
  X(zeDeviceGet)                             \
  X(zeDeviceGetProperties)                   \
  X(zeDeviceGetCommandQueueGroupProperties)  \
  X(zeDeviceGetMemoryProperties)             \
  X(zeDeviceGetStatus)                       \
  X(zeContextCreate)                         \
  X(zeContextDestroy)                        \
  X(zeCommandListCreateImmediate)            \
  X(zeCommandListDestroy)                    \
  X(zeCommandListAppendMemoryCopy)           \
  X(zeEventPoolCreate)                       \
  X(zeEventPoolDestroy)                      \
  X(zeEventCreate)                           \
  X(zeEventDestroy)                          \
  X(zeEventHostSynchronize)                  \
  X(zeEventQueryStatus)                      \
  X(zeEventHostReset)                        \
  X(zeEventPoolGetIpcHandle)                 \
  X(zeEventPoolOpenIpcHandle)                \
  X(zeEventPoolCloseIpcHandle)               \
  X(zeCommandListAppendSignalEvent)          \
  X(zeCommandListAppendBarrier)              \
  X(zeMemGetIpcHandle)                       \
  X(zeMemOpenIpcHandle)                      \
  X(zeMemCloseIpcHandle)                     \
  X(zeMemGetAddressRange)                    \
  X(zeMemAllocDevice)                        \
  X(zeMemFree)

struct Ze {
#define X(f) decltype(&::f) f = nullptr;
  FERRY_ZE_FUNCS(X)
#undef X
  decltype(&::zelLoaderTranslateHandle) translate = nullptr;
  void* lib = nullptr;
};

inline int to_errno(ze_result_t r) {
  switch (r) {
    case ZE_RESULT_SUCCESS: return 0;
    case ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY:
    case ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY: return -ENOMEM;
    case ZE_RESULT_ERROR_DEVICE_LOST: return -EIO;
    case ZE_RESULT_NOT_READY: return -EAGAIN;
    case ZE_RESULT_ERROR_UNSUPPORTED_SIZE:
    case ZE_RESULT_ERROR_INVALID_SIZE: return -EINVAL;
    default: return -EIO;
  }
}

using import_fn = ze_result_t (*)(ze_driver_handle_t, void*, size_t);
// zexCommandListAppendWriteToMemory; its descriptor's one field is the write's scope.
struct WriteToMemDesc {
  uint32_t write_scope;
};
using write_fn = ze_result_t (*)(ze_command_list_handle_t, WriteToMemDesc*, void*, uint64_t);
inline constexpr uint32_t kScopeHost = 1u << 2;  // ZEX_MEM_ACTION_SCOPE_FLAG_HOST
using release_fn = ze_result_t (*)(ze_driver_handle_t, void*);

}  // namespace ferry::ferryd::ze
