/* Orders an application's CUDA streams with its ferry uploads, on the device,
 * with no host thread: header-only, so libferry gains no link dependency; the
 * application links the CUDA driver library (-lcuda) itself.
 *
 * Uses 64-bit stream memory operations (cuStreamWaitValue64,
 * cuStreamWriteValue64) on this client's staging segment, registered in the
 * current context. Each function returns 0 or a negative errno: -ENOTSUP
 * where the device lacks 64-bit stream memory operations (no silent fallback
 * to a host wait), -EIO when the driver refuses the call.
 *
 * Typical use, per upload between kernels of one stream:
 *   ferry_cu_register(c);                                    once, context current
 *   ...kernels that read the old bytes...
 *   ferry_cu_stream_signal(c, stream, ++value);              they are done
 *   ferry_upload_after(c, buf, 0, src, n, value, &t);        copy after them
 *   ferry_cu_stream_wait(c, stream, t);                      kernels after it
 *   ...kernels that read the new bytes...
 * Valid C11 and C++. */
#ifndef FERRY_CUDA_H
#define FERRY_CUDA_H

#include <cuda.h>
#include <errno.h>
#include <stdint.h>

#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the segment with the current context (cuMemHostRegister,
 * device-mapped); ferry_cu_unregister undoes it (before ferry_disconnect). */
static inline int ferry_cu_register(ferry_client *c) {
  ferry_timeline tl;
  int r = ferry_get_timeline(c, &tl);
  if (r != 0) return r;
  CUdevice dev;
  int ops = 0;
  if (cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -EIO;
  cuDeviceGetAttribute(&ops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev);
  if (!ops) return -ENOTSUP;
  CUresult e = cuMemHostRegister(tl.segment, (size_t)tl.segment_bytes,
                                 CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  return e == CUDA_SUCCESS || e == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED ? 0 : -EIO;
}

static inline int ferry_cu_unregister(ferry_client *c) {
  ferry_timeline tl;
  int r = ferry_get_timeline(c, &tl);
  if (r != 0) return r;
  return cuMemHostUnregister(tl.segment) == CUDA_SUCCESS ? 0 : -EIO;
}

/* Read after upload: work queued on `stream` after this starts only once
 * ticket t's bytes are on the device. */
static inline int ferry_cu_stream_wait(ferry_client *c, CUstream stream, ferry_ticket t) {
  ferry_timeline tl;
  int r = ferry_get_timeline(c, &tl);
  if (r != 0) return r;
  CUdeviceptr word;
  if (cuMemHostGetDevicePointer(&word, (void *)tl.completed, 0) != CUDA_SUCCESS) return -EIO;
  return cuStreamWaitValue64(stream, word, t, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS ? 0 : -EIO;
}

/* Write after read: once `stream` gets here, the device raises the client's
 * *app_value to `value`, releasing ferry_upload_after(..., value, ...). */
static inline int ferry_cu_stream_signal(ferry_client *c, CUstream stream, uint64_t value) {
  ferry_timeline tl;
  int r = ferry_get_timeline(c, &tl);
  if (r != 0) return r;
  CUdeviceptr word;
  if (cuMemHostGetDevicePointer(&word, (void *)tl.app_value, 0) != CUDA_SUCCESS) return -EIO;
  return cuStreamWriteValue64(stream, word, value, 0) == CUDA_SUCCESS ? 0 : -EIO;
}

#ifdef __cplusplus
}
#endif

#endif /* FERRY_CUDA_H */
