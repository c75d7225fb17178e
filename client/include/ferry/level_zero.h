/* SPDX-License-Identifier: MIT */
/* Orders an application's Level Zero command lists with its ferry uploads,
 * on the device, with no host thread: header-only, so libferry gains no link
 * dependency; the application links the Level Zero loader itself.
 *
 * Uses Intel's memory-sync extension (ZE_intel_experimental_command_list_
 * memory_sync: zexCommandListAppendWaitOnMemory64 and
 * zexCommandListAppendWriteToMemory) and zexDriverImportExternalPointer. Each
 * function returns 0 or a negative errno: -ENOTSUP where the driver lacks
 * them (there is no silent fallback to a host wait), -EIO when the driver
 * refuses the call.
 *
 * Typical use, per upload between kernels of one queue:
 *   ferry_ze_import(c, driver);                             once
 *   ...kernels that read the old bytes...
 *   ferry_ze_append_signal(c, driver, list, ++value);        they are done
 *   ferry_upload_after(c, buf, 0, src, n, value, &t);        copy after them
 *   ferry_ze_append_wait(c, driver, list, t);                kernels after it
 *   ...kernels that read the new bytes...
 * Valid C11 and C++. */
#ifndef FERRY_LEVEL_ZERO_H
#define FERRY_LEVEL_ZERO_H

#include <errno.h>
#include <level_zero/loader/ze_loader.h>
#include <level_zero/ze_api.h>
#include <stdint.h>

#include "ferry/ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The extension's descriptors, laid out as the compute runtime declares them. */
typedef struct ferry_zex_wait_desc {
  uint32_t action; /* ZEX_WAIT_ON_MEMORY_FLAG_GREATER_THAN_EQUAL = 1 << 3 */
  uint32_t scope;
} ferry_zex_wait_desc;
typedef struct ferry_zex_write_desc {
  uint32_t scope; /* ZEX_MEM_ACTION_SCOPE_FLAG_HOST = 1 << 2: a host process reads it */
} ferry_zex_write_desc;

typedef ze_result_t (*ferry_zex_wait64_fn)(ze_command_list_handle_t, ferry_zex_wait_desc *, void *, uint64_t,
                                           ze_event_handle_t);
typedef ze_result_t (*ferry_zex_write_fn)(ze_command_list_handle_t, ferry_zex_write_desc *, void *, uint64_t);
typedef ze_result_t (*ferry_zex_import_fn)(ze_driver_handle_t, void *, size_t);
typedef ze_result_t (*ferry_zex_release_fn)(ze_driver_handle_t, void *);

/* Extension functions take the driver's own handles, not the loader's. */
static inline void *ferry_ze_native_(zel_handle_type_t type, void *h) {
  void *n = h;
  if (zelLoaderTranslateHandle(type, h, &n) != ZE_RESULT_SUCCESS) n = h;
  return n;
}

static inline void *ferry_ze_ext_(ze_driver_handle_t driver, const char *name) {
  void *f = NULL;
  if (zeDriverGetExtensionFunctionAddress(driver, name, &f) != ZE_RESULT_SUCCESS) return NULL;
  return f;
}

/* Registers this client's staging segment with `driver`, so the application's
 * device may read and write its timeline words. Once per driver, before the
 * calls below; ferry_ze_release undoes it (before ferry_disconnect). */
static inline int ferry_ze_import(ferry_client *c, ze_driver_handle_t driver) {
  ferry_timeline tl;
  tl.size = sizeof tl;
  int r = ferry_get_timeline(c, &tl);
  if (r != 0) return r;
  ferry_zex_import_fn f = (ferry_zex_import_fn)ferry_ze_ext_(driver, "zexDriverImportExternalPointer");
  if (f == NULL) return -ENOTSUP;
  ze_driver_handle_t d = (ze_driver_handle_t)ferry_ze_native_(ZEL_HANDLE_DRIVER, driver);
  return f(d, tl.segment, (size_t)tl.segment_bytes) == ZE_RESULT_SUCCESS ? 0 : -EIO;
}

static inline int ferry_ze_release(ferry_client *c, ze_driver_handle_t driver) {
  ferry_timeline tl;
  tl.size = sizeof tl;
  int r = ferry_get_timeline(c, &tl);
  if (r != 0) return r;
  ferry_zex_release_fn f = (ferry_zex_release_fn)ferry_ze_ext_(driver, "zexDriverReleaseImportedPointer");
  if (f == NULL) return -ENOTSUP;
  ze_driver_handle_t d = (ze_driver_handle_t)ferry_ze_native_(ZEL_HANDLE_DRIVER, driver);
  return f(d, tl.segment) == ZE_RESULT_SUCCESS ? 0 : -EIO;
}

/* Appends a wait for *word >= value, or a write of value into *word: words
 * of this client's segment, imported with ferry_ze_import. */
static inline int ferry_ze_wait_word_(ze_driver_handle_t driver, ze_command_list_handle_t list,
                                      volatile uint64_t *word, uint64_t value) {
  ferry_zex_wait64_fn f = (ferry_zex_wait64_fn)ferry_ze_ext_(driver, "zexCommandListAppendWaitOnMemory64");
  if (f == NULL) return -ENOTSUP;
  ferry_zex_wait_desc desc = {1u << 3, 0};
  ze_command_list_handle_t l = (ze_command_list_handle_t)ferry_ze_native_(ZEL_HANDLE_COMMAND_LIST, list);
  return f(l, &desc, (void *)word, value, NULL) == ZE_RESULT_SUCCESS ? 0 : -EIO;
}

static inline int ferry_ze_write_word_(ze_driver_handle_t driver, ze_command_list_handle_t list,
                                       volatile uint64_t *word, uint64_t value) {
  ferry_zex_write_fn f = (ferry_zex_write_fn)ferry_ze_ext_(driver, "zexCommandListAppendWriteToMemory");
  if (f == NULL) return -ENOTSUP;
  ferry_zex_write_desc desc = {1u << 2};
  ze_command_list_handle_t l = (ze_command_list_handle_t)ferry_ze_native_(ZEL_HANDLE_COMMAND_LIST, list);
  return f(l, &desc, (void *)word, value) == ZE_RESULT_SUCCESS ? 0 : -EIO;
}

/* Read after upload: commands appended to `list` after this start only once
 * ticket t's bytes are on the device (a direct upload's ticket too). Holds
 * only that list's queue. */
static inline int ferry_ze_append_wait(ferry_client *c, ze_driver_handle_t driver, ze_command_list_handle_t list,
                                       ferry_ticket t) {
  ferry_timeline tl;
  tl.size = sizeof tl;
  int r = ferry_get_timeline(c, &tl);
  if (r != 0) return r;
  if (t & FERRY_DIRECT_TICKET)
    return ferry_ze_wait_word_(driver, list, tl.direct_completed, t & ~FERRY_DIRECT_TICKET);
  return ferry_ze_wait_word_(driver, list, tl.device_completed, t);
}

/* ---------------------------------------------------------------- direct uploads
 * ferry_upload_direct on a command list: ferry_ze_upload stages `bytes` of
 * `src` into this client's staging memory and appends to `list` the copy
 * into `dst` (device memory of the list's context), a barrier, and the
 * device's write of the client's direct timeline word. Returns once src may
 * be reused; never waits for the list. Use an immediate command list (or
 * one executed exactly once, soon: until it runs, the staging bytes stay
 * held): a list executed again would copy staging bytes recycled since.
 * Call ferry_ze_import first. Large uploads append from libferry's staging
 * threads too, one call at a time. Besides ferry_upload_direct's errors:
 * -ENOTSUP without the memory-sync extension, -EIO when the driver refuses. */
typedef struct ferry_ze_direct_ {
  ze_command_list_handle_t list;
  ze_command_list_handle_t native_list; /* for the extension */
  char *dst;
  ferry_zex_write_fn write;
} ferry_ze_direct_;

static inline int ferry_ze_direct_copy_(void *p, uint64_t dst_offset, const void *staging, uint64_t bytes) {
  ferry_ze_direct_ *d = (ferry_ze_direct_ *)p;
  ze_result_t r = zeCommandListAppendMemoryCopy(d->list, d->dst + dst_offset, staging, (size_t)bytes, NULL, 0, NULL);
  return r == ZE_RESULT_SUCCESS ? 0 : -EIO;
}

static inline int ferry_ze_direct_write_(void *p, volatile uint64_t *word, uint64_t value) {
  ferry_ze_direct_ *d = (ferry_ze_direct_ *)p;
  ferry_zex_write_desc desc = {1u << 2};
  /* Commands of a list may overlap: the write comes after the copy's last byte. */
  if (zeCommandListAppendBarrier(d->list, NULL, 0, NULL) != ZE_RESULT_SUCCESS) return -EIO;
  return d->write(d->native_list, &desc, (void *)word, value) == ZE_RESULT_SUCCESS ? 0 : -EIO;
}

static inline int ferry_ze_upload(ferry_client *c, ze_driver_handle_t driver, ze_command_list_handle_t list, void *dst,
                                  const void *src, uint64_t bytes, ferry_ticket *t) {
  ferry_ze_direct_ d;
  ferry_direct_ops ops;
  d.list = list;
  d.native_list = (ze_command_list_handle_t)ferry_ze_native_(ZEL_HANDLE_COMMAND_LIST, list);
  d.dst = (char *)dst;
  d.write = (ferry_zex_write_fn)ferry_ze_ext_(driver, "zexCommandListAppendWriteToMemory");
  if (d.write == NULL) return -ENOTSUP;
  ops.size = sizeof ops;
  ops.flags = 0;
  ops.ctx = &d;
  ops.queue = (uint64_t)(uintptr_t)list;
  ops.queue_context = 0; /* a list's handle names it in the whole process */
  ops.copy = ferry_ze_direct_copy_;
  ops.write = ferry_ze_direct_write_;
  return ferry_upload_direct(c, src, bytes, &ops, t);
}

/* Write after read: once `list` gets here, the device raises the client's
 * *app_value to `value`, releasing ferry_upload_after(..., value, ...). Values
 * should grow; ferryd compares with >=. */
static inline int ferry_ze_append_signal(ferry_client *c, ze_driver_handle_t driver, ze_command_list_handle_t list,
                                         uint64_t value) {
  ferry_timeline tl;
  tl.size = sizeof tl;
  int r = ferry_get_timeline(c, &tl);
  return r != 0 ? r : ferry_ze_write_word_(driver, list, tl.app_value, value);
}

/* The same for a buffer this client allocated and granted (ferry_buffer_fence):
 * commands after ferry_ze_append_fence_wait start once an upload by any
 * producer published `value` into buf's fence; once `list` gets to
 * ferry_ze_append_fence_release, uploads into buf made with after_release
 * <= value may start. */
static inline int ferry_ze_append_fence_wait(ferry_client *c, ze_driver_handle_t driver,
                                             ze_command_list_handle_t list, ferry_buffer buf, uint64_t value) {
  ferry_fence f;
  int r = ferry_buffer_fence(c, buf, &f);
  return r != 0 ? r : ferry_ze_wait_word_(driver, list, f.ready, value);
}

static inline int ferry_ze_append_fence_release(ferry_client *c, ze_driver_handle_t driver,
                                                ze_command_list_handle_t list, ferry_buffer buf, uint64_t value) {
  ferry_fence f;
  int r = ferry_buffer_fence(c, buf, &f);
  return r != 0 ? r : ferry_ze_write_word_(driver, list, f.released, value);
}

#ifdef __cplusplus
}
#endif

#endif /* FERRY_LEVEL_ZERO_H */
