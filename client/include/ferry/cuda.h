/* SPDX-License-Identifier: MIT */
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
  tl.size = sizeof tl;
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
  tl.size = sizeof tl;
  int r = ferry_get_timeline(c, &tl);
  if (r != 0) return r;
  return cuMemHostUnregister(tl.segment) == CUDA_SUCCESS ? 0 : -EIO;
}

/* A wait for *word >= value, or a write of value into *word, on `stream`:
 * words of this client's segment, registered with ferry_cu_register. */
static inline int ferry_cu_wait_word_(CUstream stream, volatile uint64_t *word, uint64_t value) {
  CUdeviceptr w;
  if (cuMemHostGetDevicePointer(&w, (void *)word, 0) != CUDA_SUCCESS) return -EIO;
  return cuStreamWaitValue64(stream, w, value, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS ? 0 : -EIO;
}

static inline int ferry_cu_write_word_(CUstream stream, volatile uint64_t *word, uint64_t value) {
  CUdeviceptr w;
  if (cuMemHostGetDevicePointer(&w, (void *)word, 0) != CUDA_SUCCESS) return -EIO;
  return cuStreamWriteValue64(stream, w, value, 0) == CUDA_SUCCESS ? 0 : -EIO;
}

/* Read after upload: work queued on `stream` after this starts only once
 * ticket t's bytes are on the device (a direct upload's ticket too). */
static inline int ferry_cu_stream_wait(ferry_client *c, CUstream stream, ferry_ticket t) {
  ferry_timeline tl;
  tl.size = sizeof tl;
  int r = ferry_get_timeline(c, &tl);
  if (r != 0) return r;
  if (t & FERRY_DIRECT_TICKET) return ferry_cu_wait_word_(stream, tl.direct_completed, t & ~FERRY_DIRECT_TICKET);
  return ferry_cu_wait_word_(stream, tl.device_completed, t);
}

/* Write after read: once `stream` gets here, the device raises the client's
 * *app_value to `value`, releasing ferry_upload_after(..., value, ...). */
static inline int ferry_cu_stream_signal(ferry_client *c, CUstream stream, uint64_t value) {
  ferry_timeline tl;
  tl.size = sizeof tl;
  int r = ferry_get_timeline(c, &tl);
  return r != 0 ? r : ferry_cu_write_word_(stream, tl.app_value, value);
}

/* ---------------------------------------------------------------- direct uploads
 * ferry_upload_direct on a stream: ferry_cu_upload stages `bytes` of `src`
 * into this client's pinned staging memory and appends to `stream` the copy
 * into `dst` (device memory of the stream's context: an allocation of yours,
 * or a ferry buffer you opened there), then the device's write of the
 * client's direct timeline word. Returns once src may be reused; never waits
 * for the stream. Later work on `stream` sees the bytes (stream order); other
 * streams wait with ferry_cu_stream_wait(c, their_stream, *t). Call
 * ferry_cu_register first, in the stream's context.
 * Besides ferry_upload_direct's errors: -EINVAL for CU_STREAM_PER_THREAD
 * (and for the NULL stream where CUDA_API_PER_THREAD_DEFAULT_STREAM makes it
 * the calling thread's own), or a stream being captured into a graph (a
 * replay would copy staging bytes that were recycled since), -EIO when the
 * driver refuses (the segment not registered, a bad stream). Large uploads
 * append from libferry's staging threads too, with the stream's context
 * made current there. Unregister (ferry_cu_unregister) only once the stream
 * finished its copies. */
typedef struct ferry_cu_direct_ {
  CUstream stream;
  CUdeviceptr dst;
  CUcontext ctx;
  CUdeviceptr word; /* the direct timeline word, as the device sees it */
} ferry_cu_direct_;

static inline int ferry_cu_in_ctx_(CUcontext ctx, int *pushed) {
  CUcontext cur = NULL;
  *pushed = 0;
  if (cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx) return 0;
  if (cuCtxPushCurrent(ctx) != CUDA_SUCCESS) return -EIO;
  *pushed = 1;
  return 0;
}

static inline void ferry_cu_out_ctx_(int pushed) {
  CUcontext popped;
  if (pushed) cuCtxPopCurrent(&popped);
}

static inline int ferry_cu_direct_copy_(void *p, uint64_t dst_offset, const void *staging, uint64_t bytes) {
  ferry_cu_direct_ *d = (ferry_cu_direct_ *)p;
  int pushed, r = ferry_cu_in_ctx_(d->ctx, &pushed);
  if (r != 0) return r;
  r = cuMemcpyHtoDAsync(d->dst + dst_offset, staging, (size_t)bytes, d->stream) == CUDA_SUCCESS ? 0 : -EIO;
  ferry_cu_out_ctx_(pushed);
  return r;
}

static inline int ferry_cu_direct_write_(void *p, volatile uint64_t *word, uint64_t value) {
  ferry_cu_direct_ *d = (ferry_cu_direct_ *)p;
  (void)word; /* always the direct word, whose device address d->word is */
  int pushed, r = ferry_cu_in_ctx_(d->ctx, &pushed);
  if (r != 0) return r;
  r = cuStreamWriteValue64(d->stream, d->word, value, 0) == CUDA_SUCCESS ? 0 : -EIO;
  ferry_cu_out_ctx_(pushed);
  return r;
}

static inline int ferry_cu_upload(ferry_client *c, CUstream stream, CUdeviceptr dst, const void *src, uint64_t bytes,
                                  ferry_ticket *t) {
  ferry_timeline tl;
  ferry_cu_direct_ d;
  ferry_direct_ops ops;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  tl.size = sizeof tl;
  int r = ferry_get_timeline(c, &tl);
  if (r != 0) return r;
  /* A per-thread default stream is another stream on each staging thread. */
  if (stream == CU_STREAM_PER_THREAD) return -EINVAL;
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
  if (stream == NULL) return -EINVAL; /* here NULL names the calling thread's own stream */
#endif
  if (stream == NULL) stream = CU_STREAM_LEGACY; /* the same stream, named the same on every thread */
  if (cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS) return -EIO;
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE) return -EINVAL;
  d.stream = stream;
  d.dst = dst;
  if (cuStreamGetCtx(stream, &d.ctx) != CUDA_SUCCESS) return -EIO;
  if (cuMemHostGetDevicePointer(&d.word, (void *)tl.direct_completed, 0) != CUDA_SUCCESS) return -EIO;
  ops.size = sizeof ops;
  ops.flags = 0;
  ops.ctx = &d;
  ops.queue = (uint64_t)(uintptr_t)stream;
  ops.queue_context = (uint64_t)(uintptr_t)d.ctx; /* CU_STREAM_LEGACY is one stream per context */
  ops.copy = ferry_cu_direct_copy_;
  ops.write = ferry_cu_direct_write_;
  return ferry_upload_direct(c, src, bytes, &ops, t);
}

/* The same for a buffer this client allocated and granted (ferry_buffer_fence):
 * work after ferry_cu_stream_wait_fence starts once an upload by any producer
 * published `value` into buf's fence; once `stream` gets to
 * ferry_cu_stream_release_fence, uploads into buf made with after_release
 * <= value may start. */
static inline int ferry_cu_stream_wait_fence(ferry_client *c, CUstream stream, ferry_buffer buf, uint64_t value) {
  ferry_fence f;
  int r = ferry_buffer_fence(c, buf, &f);
  return r != 0 ? r : ferry_cu_wait_word_(stream, f.ready, value);
}

static inline int ferry_cu_stream_release_fence(ferry_client *c, CUstream stream, ferry_buffer buf, uint64_t value) {
  ferry_fence f;
  int r = ferry_buffer_fence(c, buf, &f);
  return r != 0 ? r : ferry_cu_write_word_(stream, f.released, value);
}

#ifdef __cplusplus
}
#endif

#endif /* FERRY_CUDA_H */
