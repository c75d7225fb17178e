// SPDX-License-Identifier: MIT
// cuda_abi.hpp's numbers and signatures against the CUDA toolkit's headers
// (compiled only where the build has them: -DFERRY_CUDA=ON).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <type_traits>

#include "cuda_abi.hpp"

namespace c = ferry::run::cu;

static_assert(c::kCudaSuccess == CUDA_SUCCESS);
static_assert(c::kCudaErrorNotFound == CUDA_ERROR_NOT_FOUND);
static_assert(c::kCudaErrorHostMemoryAlreadyRegistered == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
static_assert(c::kCuPointerAttributeMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(c::kCuPointerAttributeIsManaged == CU_POINTER_ATTRIBUTE_IS_MANAGED);
static_assert(c::kCuMemorytypeHost == CU_MEMORYTYPE_HOST && c::kCuMemorytypeDevice == CU_MEMORYTYPE_DEVICE &&
              c::kCuMemorytypeUnified == CU_MEMORYTYPE_UNIFIED);
static_assert(c::kCuStreamCaptureStatusNone == CU_STREAM_CAPTURE_STATUS_NONE);
static_assert(c::kCuMemhostregisterPortable == CU_MEMHOSTREGISTER_PORTABLE &&
              c::kCuMemhostregisterDevicemap == CU_MEMHOSTREGISTER_DEVICEMAP);
static_assert(c::kCuDeviceAttributeCanUse64BitStreamMemOps == CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS);
static_assert(c::kCuGetProcAddressPerThreadDefaultStream == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
static_assert(c::kCudaMemcpyHostToDevice == cudaMemcpyHostToDevice && c::kCudaMemcpyDefault == cudaMemcpyDefault);
static_assert(sizeof(c::CUdeviceptr) == sizeof(CUdeviceptr));
static_assert(std::is_same_v<decltype(&cuMemcpyHtoDAsync_v2),
                             CUresult (*)(CUdeviceptr, const void*, size_t, CUstream)>);
static_assert(std::is_same_v<decltype(&cuMemAlloc_v2), CUresult (*)(CUdeviceptr*, size_t)>);
static_assert(std::is_same_v<decltype(&cuGetProcAddress_v2),
                             CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>);
