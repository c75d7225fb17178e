// SPDX-License-Identifier: MIT
// The few CUDA types and numbers the CUDA interposer uses, as the driver and
// runtime ABIs fix them, so that it builds where no CUDA toolkit is (the
// Debian packages). Checked against the toolkit's own headers wherever a
// build has them (cuda_abi_check.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::run::cu {

using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using cudaError_t = int;

inline constexpr CUresult kCudaSuccess = 0;
inline constexpr CUresult kCudaErrorNotFound = 500;
inline constexpr CUresult kCudaErrorHostMemoryAlreadyRegistered = 712;

inline const CUstream kCuStreamLegacy = reinterpret_cast<CUstream>(0x1);
inline const CUstream kCuStreamPerThread = reinterpret_cast<CUstream>(0x2);

inline constexpr int kCuPointerAttributeMemoryType = 2;
inline constexpr int kCuPointerAttributeIsManaged = 8;
inline constexpr unsigned kCuMemorytypeHost = 1;
inline constexpr unsigned kCuMemorytypeDevice = 2;
inline constexpr unsigned kCuMemorytypeUnified = 4;
inline constexpr int kCuStreamCaptureStatusNone = 0;
inline constexpr unsigned kCuMemhostregisterPortable = 0x01;
inline constexpr unsigned kCuMemhostregisterDevicemap = 0x02;
inline constexpr int kCuDeviceAttributeCanUse64BitStreamMemOps = 122;
inline constexpr uint64_t kCuGetProcAddressPerThreadDefaultStream = 1u << 1;

// cudaMemcpyKind
inline constexpr int kCudaMemcpyHostToDevice = 1;
inline constexpr int kCudaMemcpyDefault = 4;

// The driver's entry points this code calls, and those it stands in for.
using GetProcAddressV2 = CUresult (*)(const char*, void**, int, uint64_t, int*);
using GetProcAddressV1 = CUresult (*)(const char*, void**, int, uint64_t);
using PointerGetAttributes = CUresult (*)(unsigned, int*, void**, CUdeviceptr);
using CtxGetCurrent = CUresult (*)(CUcontext*);
using CtxPushCurrent = CUresult (*)(CUcontext);
using CtxPopCurrent = CUresult (*)(CUcontext*);
using CtxGetDevice = CUresult (*)(CUdevice*);
using DeviceGetAttribute = CUresult (*)(int*, int, CUdevice);
using StreamGetCtx = CUresult (*)(CUstream, CUcontext*);
using StreamIsCapturing = CUresult (*)(CUstream, int*);
using StreamSynchronize = CUresult (*)(CUstream);
using MemHostRegister = CUresult (*)(void*, size_t, unsigned);
using MemHostUnregister = CUresult (*)(void*);
using MemHostGetDevicePointer = CUresult (*)(CUdeviceptr*, void*, unsigned);
using StreamWriteValue64 = CUresult (*)(CUstream, CUdeviceptr, uint64_t, unsigned);
using MemcpyHtoDAsync = CUresult (*)(CUdeviceptr, const void*, size_t, CUstream);
using MemcpyHtoD = CUresult (*)(CUdeviceptr, const void*, size_t);
using MemcpyAsync = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
using Memcpy = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t);
using MemAlloc = CUresult (*)(CUdeviceptr* out, size_t bytes);
using RtMemcpyAsync = cudaError_t (*)(void*, const void*, size_t, int, CUstream);
using RtMemcpy = cudaError_t (*)(void*, const void*, size_t, int);
using RtMemcpy2DAsync = cudaError_t (*)(void*, size_t, const void*, size_t, size_t, size_t, int, CUstream);
using RtGetDriverEntryPoint = cudaError_t (*)(const char*, void**, unsigned long long, int*);
using RtGetDriverEntryPointByVersion = cudaError_t (*)(const char*, void**, unsigned, unsigned long long, int*);

}  // namespace ferry::run::cu
