/* SPDX-License-Identifier: MIT */
/* An unmodified Level Zero program, as the tests of ferry-run run it: it
 * knows nothing of ferry. For each size it uploads a pageable buffer into
 * device memory, reads it back and says what the device received:
 *   SIZE original     the bytes as they were when the copy was appended
 *   SIZE overwritten  the bytes the program wrote after the call returned
 *   SIZE mixed        some of each
 * Modes (--mode):
 *   hazard   the list is held on an event until after the source was
 *            overwritten (the hazard: plain, the device reads the new bytes)
 *   sync     a careful program: it waits for the copy before reusing the
 *            source (correct with or without ferry)
 *   regular  a regular command list (create, append, close, execute, wait,
 *            destroy: as oneAPI.jl copies), waited for before reuse
 *   regular-hazard  the same list held on an event until after the source
 *            was overwritten (plain: the device reads the new bytes)
 *   regular-late  the source overwritten after the append, before the
 *            execute (the driver copies what is there at execution: new bytes)
 *   regular-again  executed, the source overwritten, executed again with no
 *            wait between (the second execution copies the new bytes)
 *   region   a 3-D region copy (zeCommandListAppendMemoryCopyRegion: two
 *            slices of rows with gaps, from an origin inside the source)
 *            on the immediate list, held as in hazard
 *   region-regular  the same on a regular list, held as in regular-hazard
 *   region-bad  a region whose rows run past the source's pitch: says
 *            "refused" when the call fails as the driver says, else "accepted"
 *   pinned   the source is the driver's host memory (zeMemAllocHost)
 *   d2d      device to device (an upload into a staging buffer of its own first)
 * --dlopen reaches the loader through dlopen + dlsym, as Julia and ctypes do;
 * --devices N uploads to each of N devices in turn; --fork does the same in a
 * forked child after the parent's first upload; --threads N uploads from N
 * threads at once, each with its own immediate list; --wait-file PATH
 * stops after the first size, says "waiting" and goes on once PATH exists
 * (a test changes the world meanwhile: stops ferryd, reads ferryctl);
 * --until-file PATH uploads the sizes again and again, --every MS apart,
 * until PATH exists, one line each with the time it was made (a daemon
 * restarted meanwhile, say).
 * Exit 0 when every call succeeded (whatever was received), 2 otherwise. */
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <level_zero/ze_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The loader's functions this program calls, linked or found with dlsym. */
#define ZE_FUNCTIONS(X)                                                                                       \
  X(zeInit, (ze_init_flags_t))                                                                              \
  X(zeDriverGet, (uint32_t *, ze_driver_handle_t *))                                                        \
  X(zeDeviceGet, (ze_driver_handle_t, uint32_t *, ze_device_handle_t *))                                    \
  X(zeContextCreate, (ze_driver_handle_t, const ze_context_desc_t *, ze_context_handle_t *))                \
  X(zeCommandListCreateImmediate,                                                                           \
    (ze_context_handle_t, ze_device_handle_t, const ze_command_queue_desc_t *, ze_command_list_handle_t *)) \
  X(zeCommandListCreate,                                                                                    \
    (ze_context_handle_t, ze_device_handle_t, const ze_command_list_desc_t *, ze_command_list_handle_t *))  \
  X(zeCommandListClose, (ze_command_list_handle_t))                                                        \
  X(zeCommandListDestroy, (ze_command_list_handle_t))                                                      \
  X(zeCommandQueueDestroy, (ze_command_queue_handle_t))                                                    \
  X(zeCommandQueueCreate,                                                                                   \
    (ze_context_handle_t, ze_device_handle_t, const ze_command_queue_desc_t *, ze_command_queue_handle_t *))\
  X(zeCommandQueueExecuteCommandLists,                                                                      \
    (ze_command_queue_handle_t, uint32_t, ze_command_list_handle_t *, ze_fence_handle_t))                   \
  X(zeCommandQueueSynchronize, (ze_command_queue_handle_t, uint64_t))                                       \
  X(zeCommandListAppendMemoryCopy, (ze_command_list_handle_t, void *, const void *, size_t,                \
                                    ze_event_handle_t, uint32_t, ze_event_handle_t *))                      \
  X(zeCommandListAppendMemoryCopyRegion, (ze_command_list_handle_t, void *, const ze_copy_region_t *,     \
                                          uint32_t, uint32_t, const void *, const ze_copy_region_t *,      \
                                          uint32_t, uint32_t, ze_event_handle_t, uint32_t,                 \
                                          ze_event_handle_t *))                                            \
  X(zeCommandListAppendBarrier, (ze_command_list_handle_t, ze_event_handle_t, uint32_t, ze_event_handle_t *)) \
  X(zeMemAllocDevice, (ze_context_handle_t, const ze_device_mem_alloc_desc_t *, size_t, size_t,            \
                       ze_device_handle_t, void **))                                                        \
  X(zeMemAllocHost, (ze_context_handle_t, const ze_host_mem_alloc_desc_t *, size_t, size_t, void **))      \
  X(zeMemFree, (ze_context_handle_t, void *))                                                              \
  X(zeEventPoolCreate, (ze_context_handle_t, const ze_event_pool_desc_t *, uint32_t, ze_device_handle_t *,  \
                        ze_event_pool_handle_t *))                                                          \
  X(zeEventCreate, (ze_event_pool_handle_t, const ze_event_desc_t *, ze_event_handle_t *))                 \
  X(zeEventHostSignal, (ze_event_handle_t))                                                                \
  X(zeEventHostReset, (ze_event_handle_t))                                                                 \
  X(zeEventHostSynchronize, (ze_event_handle_t, uint64_t))

#define DECLARE(name, args) static ze_result_t(*p_##name) args;
ZE_FUNCTIONS(DECLARE)

static int failures;
#define OK(call)                                                                   \
  do {                                                                             \
    ze_result_t r_ = (call);                                                       \
    if (r_ != ZE_RESULT_SUCCESS) {                                                 \
      fprintf(stderr, "ze_upload: %s failed: 0x%x\n", #call, (unsigned)r_);        \
      failures++;                                                                  \
    }                                                                              \
  } while (0)

static void load(int via_dlopen) {
  void *lib = NULL;
  if (via_dlopen) {
    lib = dlopen("libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      fprintf(stderr, "ze_upload: %s\n", dlerror());
      exit(2);
    }
  }
#define RESOLVE(name, args)                                         \
  p_##name = via_dlopen ? (ze_result_t(*) args)dlsym(lib, #name) : name; \
  if (p_##name == NULL) {                                           \
    fprintf(stderr, "ze_upload: no %s\n", #name);                   \
    exit(2);                                                        \
  }
  ZE_FUNCTIONS(RESOLVE)
}

static const char *mode = "hazard";
static ze_driver_handle_t driver;
static ze_context_handle_t ctx;

static double call_ms; /* the last upload's append call */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint8_t pattern(uint64_t i, int second) { return (uint8_t)(i * 131 + (second ? 77 : 5) + (i >> 13)); }

static void overwrite(uint8_t *src, size_t n) {
  for (size_t i = 0; i < n; ++i) src[i] = pattern(i, 1);
}

/* The regular modes: a list of its own on a queue of its own, both destroyed after. */
static void regular_upload(ze_device_handle_t dev, void *dst, uint8_t *src, size_t n, ze_event_handle_t gate) {
  ze_command_list_desc_t ld = {ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC, NULL, 0, 0};
  ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, 0, 0, 0,
                                ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t regular = NULL;
  ze_command_queue_handle_t q = NULL;
  const int hazard = strcmp(mode, "regular-hazard") == 0;
  OK(p_zeCommandListCreate(ctx, dev, &ld, &regular));
  OK(p_zeCommandQueueCreate(ctx, dev, &qd, &q));
  if (hazard) OK(p_zeCommandListAppendBarrier(regular, NULL, 1, &gate));
  const double t0 = now_ms();
  OK(p_zeCommandListAppendMemoryCopy(regular, dst, src, n, NULL, 0, NULL));
  OK(p_zeCommandListClose(regular));
  if (strcmp(mode, "regular-late") == 0) overwrite(src, n);
  OK(p_zeCommandQueueExecuteCommandLists(q, 1, &regular, NULL));
  call_ms = now_ms() - t0;
  if (hazard) {
    overwrite(src, n);
    OK(p_zeEventHostSignal(gate));
  } else if (strcmp(mode, "regular-again") == 0) {
    overwrite(src, n);
    OK(p_zeCommandQueueExecuteCommandLists(q, 1, &regular, NULL));
  }
  OK(p_zeCommandQueueSynchronize(q, UINT64_MAX));
  OK(p_zeCommandListDestroy(regular));
  OK(p_zeCommandQueueDestroy(q));
  if (strcmp(mode, "regular") == 0) overwrite(src, n);
}

/* The region modes: about n bytes in two slices of rows 4 KiB wide, taken
 * from an origin inside a source whose rows and slices have gaps, into
 * packed device memory; the list held on `gate` until the source was
 * overwritten. What arrived, as upload() says it. */
static const char *region_upload(ze_device_handle_t dev, ze_command_list_handle_t list, size_t n,
                                 ze_event_handle_t gate, ze_event_handle_t done) {
  const uint32_t w = 4096, h = n / (2 * w) > 0 ? (uint32_t)(n / (2 * w)) : 1, d = 2;
  const uint32_t pitch = 16 + w + 48, slice = pitch * (h + 1) + 64;
  const size_t src_bytes = (size_t)slice * d, packed = (size_t)w * h * d;
  ze_device_mem_alloc_desc_t dd = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  void *dst = NULL;
  OK(p_zeMemAllocDevice(ctx, &dd, packed, 64, dev, &dst));
  uint8_t *src = malloc(src_bytes), *back = malloc(packed);
  if (dst == NULL || src == NULL || back == NULL) {
    fprintf(stderr, "ze_upload: out of memory\n");
    exit(2);
  }
  for (size_t i = 0; i < src_bytes; ++i) src[i] = pattern(i, 0);
  const ze_copy_region_t sr = {16, 1, 0, w, h, d}, dr = {0, 0, 0, w, h, d};
  if (strcmp(mode, "region-bad") == 0) {
    const ze_copy_region_t past = {pitch - 8, 1, 0, w, h, d};  /* each row 8 bytes short of room */
    const ze_result_t r = p_zeCommandListAppendMemoryCopyRegion(list, dst, &dr, w, w * h, src, &past, pitch, slice,
                                                                NULL, 0, NULL);
    free(src);
    free(back);
    OK(p_zeMemFree(ctx, dst));
    return r == ZE_RESULT_ERROR_INVALID_SIZE ? "refused" : "accepted";
  }
  ze_command_list_handle_t on = list, regular = NULL;
  ze_command_queue_handle_t q = NULL;
  const int on_regular = strcmp(mode, "region-regular") == 0;
  if (on_regular) {
    ze_command_list_desc_t ld = {ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC, NULL, 0, 0};
    ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, 0, 0, 0,
                                  ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    OK(p_zeCommandListCreate(ctx, dev, &ld, &regular));
    OK(p_zeCommandQueueCreate(ctx, dev, &qd, &q));
    on = regular;
  }
  OK(p_zeCommandListAppendBarrier(on, NULL, 1, &gate));
  const double t0 = now_ms();
  OK(p_zeCommandListAppendMemoryCopyRegion(on, dst, &dr, w, w * h, src, &sr, pitch, slice, NULL, 0, NULL));
  if (on_regular) {
    OK(p_zeCommandListClose(regular));
    OK(p_zeCommandQueueExecuteCommandLists(q, 1, &regular, NULL));
  }
  call_ms = now_ms() - t0;
  for (size_t i = 0; i < src_bytes; ++i) src[i] = pattern(i, 1);
  OK(p_zeEventHostSignal(gate));
  if (on_regular) {
    OK(p_zeCommandQueueSynchronize(q, UINT64_MAX));
    OK(p_zeCommandListDestroy(regular));
    OK(p_zeCommandQueueDestroy(q));
  }
  OK(p_zeCommandListAppendMemoryCopy(list, back, dst, packed, done, 0, NULL));
  OK(p_zeEventHostSynchronize(done, UINT64_MAX));
  size_t first = 0, second = 0;
  for (uint32_t z = 0; z < d; ++z)
    for (uint32_t y = 0; y < h; ++y)
      for (uint32_t x = 0; x < w; ++x) {
        const size_t from = (size_t)z * slice + (size_t)(1 + y) * pitch + 16 + x;
        const uint8_t got = back[((size_t)z * h + y) * w + x];
        first += got == pattern(from, 0);
        second += got == pattern(from, 1);
      }
  free(src);
  free(back);
  OK(p_zeMemFree(ctx, dst));
  return first == packed ? "original" : second == packed ? "overwritten" : "mixed";
}

/* One upload of n bytes to `dev` on `list` (immediate) and what arrived. */
static const char *upload(ze_device_handle_t dev, ze_command_list_handle_t list, size_t n) {
  ze_device_mem_alloc_desc_t dd = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  ze_host_mem_alloc_desc_t hd = {ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, NULL, 0};
  void *dst = NULL, *dev_src = NULL;
  OK(p_zeMemAllocDevice(ctx, &dd, n, 64, dev, &dst));
  uint8_t *src = NULL;
  if (strcmp(mode, "pinned") == 0) {
    OK(p_zeMemAllocHost(ctx, &hd, n, 64, (void **)&src));
  } else {
    src = malloc(n);
  }
  uint8_t *back = malloc(n);
  if (dst == NULL || src == NULL || back == NULL) {
    fprintf(stderr, "ze_upload: out of memory\n");
    exit(2);
  }
  for (size_t i = 0; i < n; ++i) src[i] = pattern(i, 0);
  ze_event_pool_desc_t pd = {ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 2};
  ze_event_pool_handle_t pool = NULL;
  ze_event_handle_t gate = NULL, done = NULL;
  OK(p_zeEventPoolCreate(ctx, &pd, 1, &dev, &pool));
  ze_event_desc_t ed = {ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, 0, ZE_EVENT_SCOPE_FLAG_HOST, ZE_EVENT_SCOPE_FLAG_HOST};
  OK(p_zeEventCreate(pool, &ed, &gate));
  ed.index = 1;
  OK(p_zeEventCreate(pool, &ed, &done));

  if (strncmp(mode, "region", 6) == 0) {
    const char *what = region_upload(dev, list, n, gate, done);
    free(src);
    free(back);
    OK(p_zeMemFree(ctx, dst));
    return what;
  }
  if (strcmp(mode, "hazard") == 0 || strcmp(mode, "pinned") == 0) {
    /* Held until the source was overwritten: what the device reads then is
     * what the driver (or ferry) kept of it. */
    OK(p_zeCommandListAppendBarrier(list, NULL, 1, &gate));
    const double t0 = now_ms();
    OK(p_zeCommandListAppendMemoryCopy(list, dst, src, n, NULL, 0, NULL));
    call_ms = now_ms() - t0;
    for (size_t i = 0; i < n; ++i) src[i] = pattern(i, 1);
    OK(p_zeEventHostSignal(gate));
  } else if (strcmp(mode, "sync") == 0) {
    OK(p_zeCommandListAppendMemoryCopy(list, dst, src, n, done, 0, NULL));
    OK(p_zeEventHostSynchronize(done, UINT64_MAX));
    OK(p_zeEventHostReset(done));
    for (size_t i = 0; i < n; ++i) src[i] = pattern(i, 1);
  } else if (strcmp(mode, "d2d") == 0) {
    /* The source first lands in device memory of the program's own. */
    OK(p_zeMemAllocDevice(ctx, &dd, n, 64, dev, &dev_src));
    OK(p_zeCommandListAppendMemoryCopy(list, dev_src, src, n, done, 0, NULL));
    OK(p_zeEventHostSynchronize(done, UINT64_MAX));
    OK(p_zeEventHostReset(done));
    OK(p_zeCommandListAppendMemoryCopy(list, dst, dev_src, n, done, 0, NULL));
    OK(p_zeEventHostSynchronize(done, UINT64_MAX));
    OK(p_zeEventHostReset(done));
    for (size_t i = 0; i < n; ++i) src[i] = pattern(i, 1);
  } else if (strncmp(mode, "regular", 7) == 0) {
    regular_upload(dev, dst, src, n, gate);
  } else {
    fprintf(stderr, "ze_upload: unknown mode %s\n", mode);
    exit(2);
  }
  /* Read back, after everything before it on the list. */
  OK(p_zeCommandListAppendMemoryCopy(list, back, dst, n, done, 0, NULL));
  OK(p_zeEventHostSynchronize(done, UINT64_MAX));
  size_t first = 0, second = 0;
  for (size_t i = 0; i < n; ++i) {
    first += back[i] == pattern(i, 0);
    second += back[i] == pattern(i, 1);
  }
  if (strcmp(mode, "pinned") != 0) free(src);
  free(back);
  /* Patterns agree now and then: a whole match of one decides. */
  return first == n ? "original" : second == n ? "overwritten" : "mixed";
}

struct job {
  ze_device_handle_t dev;
  size_t n;
  const char *what;
};

static ze_command_queue_desc_t immediate_desc = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, 0, 0, 0,
                                                 ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};

static void *thread_main(void *arg) {
  struct job *j = arg;
  ze_command_list_handle_t list = NULL;
  OK(p_zeCommandListCreateImmediate(ctx, j->dev, &immediate_desc, &list));
  j->what = upload(j->dev, list, j->n);
  return NULL;
}

int main(int argc, char **argv) {
  int via_dlopen = 0, devices = 1, do_fork = 0, threads = 1, every_ms = 0, i = 1;
  const char *wait_file = NULL, *until_file = NULL;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    if (strcmp(argv[i], "--dlopen") == 0) {
      via_dlopen = 1;
    } else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
      mode = argv[++i];
    } else if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc) {
      devices = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--wait-file") == 0 && i + 1 < argc) {
      wait_file = argv[++i];
    } else if (strcmp(argv[i], "--until-file") == 0 && i + 1 < argc) {
      until_file = argv[++i];
    } else if (strcmp(argv[i], "--every") == 0 && i + 1 < argc) {
      every_ms = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--fork") == 0) {
      do_fork = 1;
    } else {
      fprintf(stderr, "usage: ze_upload [--dlopen] [--mode M] [--devices N] [--threads N] [--fork] [--wait-file F] "
                      "[--until-file F [--every MS]] SIZE...\n");
      return 2;
    }
  }
  load(via_dlopen);
  OK(p_zeInit(0));
  uint32_t count = 1;
  OK(p_zeDriverGet(&count, &driver));
  ze_device_handle_t devs[16];
  count = 16;
  OK(p_zeDeviceGet(driver, &count, devs));
  if ((uint32_t)devices > count) {
    fprintf(stderr, "ze_upload: %d devices asked, %u there\n", devices, count);
    return 2;
  }
  ze_context_desc_t cd = {ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
  OK(p_zeContextCreate(driver, &cd, &ctx));
  ze_command_list_handle_t lists[16];
  for (int d = 0; d < devices; ++d) OK(p_zeCommandListCreateImmediate(ctx, devs[d], &immediate_desc, &lists[d]));
  if (failures != 0) return 2;
  if (until_file != NULL && i < argc) {
    /* Again and again until the file exists: one line an upload, with when. */
    for (long k = 0; access(until_file, F_OK) != 0; ++k) {
      const size_t n = strtoull(argv[i + k % (argc - i)], NULL, 10);
      const char *what = upload(devs[0], lists[0], n);
      printf("%zu %s at_ms=%.1f call_ms=%.3f\n", n, what, now_ms(), call_ms);
      fflush(stdout);
      if (every_ms > 0) usleep((useconds_t)every_ms * 1000);
    }
    return failures != 0 ? 2 : 0;
  }
  for (; i < argc; ++i) {
    const size_t n = strtoull(argv[i], NULL, 10);
    for (int d = 0; d < devices; ++d) {
      if (threads > 1) {
        pthread_t t[64];
        struct job jobs[64];
        for (int k = 0; k < threads && k < 64; ++k) {
          jobs[k] = (struct job){devs[d], n, ""};
          pthread_create(&t[k], NULL, thread_main, &jobs[k]);
        }
        for (int k = 0; k < threads && k < 64; ++k) {
          pthread_join(t[k], NULL);
          printf("%zu %s device %d thread %d\n", n, jobs[k].what, d, k);
        }
      } else {
        const char *what = upload(devs[d], lists[d], n);
        printf("%zu %s device %d call_ms=%.3f\n", n, what, d, call_ms);
      }
    }
    fflush(stdout);
    if (wait_file != NULL) {
      printf("waiting\n");
      fflush(stdout);
      while (access(wait_file, F_OK) != 0) usleep(1000);
      wait_file = NULL;
    }
    if (do_fork) {
      /* A child (a data loader's worker, say) uploads on its own: the Level
       * Zero state of a forked child is its own business; here it starts
       * afresh, as such programs do, in a new process image. */
      pid_t pid = fork();
      if (pid == 0) {
        char size[32];
        snprintf(size, sizeof size, "%zu", n);
        execl("/proc/self/exe", "ze_upload", "--mode", mode, size, (char *)NULL);
        _exit(2);
      }
      int st = 0;
      waitpid(pid, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failures++;
      do_fork = 0;
    }
  }
  return failures != 0 ? 2 : 0;
}
