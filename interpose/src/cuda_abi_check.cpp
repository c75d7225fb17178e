// SPDX-License-Identifier: MIT
// cuda_abi.hpp's numbers and signatures against the CUDA toolkit's headers
// (compiled only where the build has them: -DFERRY_CUDA=ON).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <type_traits>

#include "cuda_abi.hpp"

namespace c = ferry::run::cu;

static_assert(c::CUDA_SUCCESS == CUDA_SUCCESS);
static_assert(c::CUDA_ERROR_NOT_FOUND == CUDA_ERROR_NOT_FOUND);
static_assert(c::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
static_assert(c::CU_POINTER_ATTRIBUTE_MEMORY_TYPE == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(c::CU_POINTER_ATTRIBUTE_IS_MANAGED == CU_POINTER_ATTRIBUTE_IS_MANAGED);
static_assert(c::CU_MEMORYTYPE_HOST == CU_MEMORYTYPE_HOST && c::CU_MEMORYTYPE_DEVICE == CU_MEMORYTYPE_DEVICE &&
              c::CU_MEMORYTYPE_UNIFIED == CU_MEMORYTYPE_UNIFIED);
static_assert(c::CU_STREAM_CAPTURE_STATUS_NONE == CU_STREAM_CAPTURE_STATUS_NONE);
static_assert(c::CU_MEMHOSTREGISTER_PORTABLE == CU_MEMHOSTREGISTER_PORTABLE &&
              c::CU_MEMHOSTREGISTER_DEVICEMAP == CU_MEMHOSTREGISTER_DEVICEMAP);
static_assert(c::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS == CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS);
static_assert(c::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
static_assert(c::cudaMemcpyHostToDevice == cudaMemcpyHostToDevice && c::cudaMemcpyDefault == cudaMemcpyDefault);
static_assert(sizeof(c::CUdeviceptr) == sizeof(CUdeviceptr));
static_assert(std::is_same_v<decltype(&cuMemcpyHtoDAsync_v2),
                             CUresult (*)(CUdeviceptr, const void*, size_t, CUstream)>);
static_assert(std::is_same_v<decltype(&cuGetProcAddress_v2),
                             CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>);
