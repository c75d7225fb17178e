/* SPDX-License-Identifier: MIT */
/* producer_consumer: N producer processes, none with a GPU context, upload
 * frames into a ring of device buffers owned by one consumer, which computes
 * on them with the device's kernels and checks every frame.
 *
 * usage: producer_consumer [-s SOCKET] [-p PRODUCERS] [-n FRAMES] [-b BYTES]
 *
 * The consumer (this process) allocates one device buffer per producer
 * through ferryd, grants the producer upload rights on it, and opens it in
 * its own Level Zero context (ferry_buffer_export + zeMemOpenIpcHandle). It
 * also creates an IPC event pool and hands it to the producers. For every
 * frame it queues, before the frame exists, "wait for the frame's event,
 * then checksum the buffer" on its own command list; the producer's upload
 * signals that event on the device once the last byte is in place, so the
 * kernel never sees a partial frame and no host thread waits for the upload.
 * A pipe per producer says when a buffer may be refilled.
 *
 * On the simulated device: ferryd --sim, and ZE_ENABLE_ALT_DRIVERS pointing
 * at libze_ferry_sim.so.1 for this program (it uses the built-in "checksum"
 * kernel; see ferry/sim.h).
 */
#define _GNU_SOURCE
#include <ferry/ferry.h>
#include <ferry/sim.h>
#include <level_zero/ze_api.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define CHECK_ZE(call)                                                       \
  do {                                                                       \
    ze_result_t r_ = (call);                                                 \
    if (r_ != ZE_RESULT_SUCCESS) {                                           \
      fprintf(stderr, "producer_consumer: %s: 0x%x\n", #call, (unsigned)r_); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)
#define CHECK_FERRY(call)                                                            \
  do {                                                                               \
    int r_ = (call);                                                                 \
    if (r_ != 0) {                                                                   \
      const char *d_ = ferry_last_error(); /* libferry's own words, if any */         \
      fprintf(stderr, "producer_consumer: %s: %s\n", #call, d_[0] ? d_ : ferry_strerror(r_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static unsigned char frame_byte(int producer, int frame, uint64_t i) {
  return (unsigned char)(i * 7 + (uint64_t)producer * 31 + (uint64_t)frame * 101);
}

static void to_hex(const uint8_t *p, size_t n, char *out) {
  for (size_t i = 0; i < n; ++i) sprintf(out + 2 * i, "%02x", p[i]);
}

static int from_hex(const char *s, uint8_t *out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
    out[i] = (uint8_t)v;
  }
  return 0;
}

/* The producer: no Level Zero at all, only libferry. */
static int producer_main(char **argv) {
  const char *sock = argv[2];
  int id = atoi(argv[3]), frames = atoi(argv[4]), credits = atoi(argv[8]);
  uint64_t bytes = strtoull(argv[5], NULL, 0);
  ferry_token tok;
  ferry_ipc_handle pool_handle;
  memset(&pool_handle, 0, sizeof pool_handle);
  if (from_hex(argv[6], tok.bytes, sizeof tok.bytes) != 0 || from_hex(argv[7], pool_handle.data, 64) != 0) return 2;
  pool_handle.kind = FERRY_IPC_LEVEL_ZERO;
  memcpy(&pool_handle.fd, pool_handle.data, sizeof pool_handle.fd); /* inherited under the same number */
  ferry_client *c = NULL;
  ferry_buffer b = {0};
  uint64_t pool = 0;
  CHECK_FERRY(ferry_connect(sock, &c));
  CHECK_FERRY(ferry_buffer_open(c, &tok, &b, NULL));
  CHECK_FERRY(ferry_event_pool_register(c, &pool_handle, 2 * 64, &pool));
  unsigned char *src = malloc(bytes);
  for (int f = 0; f < frames; ++f) {
    char credit;
    if (read(credits, &credit, 1) != 1) return 3; /* the consumer is done with the buffer */
    for (uint64_t i = 0; i < bytes; ++i) src[i] = frame_byte(id, f, i);
    /* Returns once staged; the device signals event `id` after the last byte. */
    CHECK_FERRY(ferry_upload_signal(c, b, 0, src, bytes, pool, (uint32_t)id, NULL));
  }
  CHECK_FERRY(ferry_flush(c, -1));
  ferry_disconnect(c);
  free(src);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--producer") == 0) return producer_main(argv);
  const char *sock = NULL;
  int producers = 3, frames = 20, opt;
  uint64_t bytes = 1 << 20;
  while ((opt = getopt(argc, argv, "s:p:n:b:h")) != -1) {
    switch (opt) {
      case 's': sock = optarg; break;
      case 'p': producers = atoi(optarg); break;
      case 'n': frames = atoi(optarg); break;
      case 'b': bytes = strtoull(optarg, NULL, 0); break;
      default:
        fprintf(stderr, "usage: %s [-s SOCKET] [-p PRODUCERS] [-n FRAMES] [-b BYTES]\n", argv[0]);
        return opt == 'h' ? 0 : 2;
    }
  }
  if (producers < 1 || producers > 64 || frames < 1 || bytes == 0) {
    fprintf(stderr, "producer_consumer: -p 1..64, -n and -b positive\n");
    return 2;
  }
  if (sock == NULL) sock = getenv("FERRY_SOCKET");
  if (sock == NULL) sock = "/run/ferry/ferryd-0.sock";

  /* The consumer's own context on the device. */
  CHECK_ZE(zeInit(0));
  uint32_t n = 1;
  ze_driver_handle_t drv;
  ze_device_handle_t dev;
  CHECK_ZE(zeDriverGet(&n, &drv));
  n = 1;
  CHECK_ZE(zeDeviceGet(drv, &n, &dev));
  ze_context_desc_t cd = {ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
  ze_context_handle_t ctx;
  CHECK_ZE(zeContextCreate(drv, &cd, &ctx));
  ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, 0, 0, 0,
                                ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t list;
  CHECK_ZE(zeCommandListCreateImmediate(ctx, dev, &qd, &list));
  ze_module_desc_t md = {ZE_STRUCTURE_TYPE_MODULE_DESC, NULL, ZE_MODULE_FORMAT_NATIVE,
                         strlen(FERRY_SIM_BUILTIN_MODULE), (const uint8_t *)FERRY_SIM_BUILTIN_MODULE, NULL, NULL};
  ze_module_handle_t mod;
  CHECK_ZE(zeModuleCreate(ctx, dev, &md, &mod, NULL));
  ze_kernel_desc_t kd = {ZE_STRUCTURE_TYPE_KERNEL_DESC, NULL, 0, FERRY_SIM_KERNEL_CHECKSUM};
  ze_kernel_handle_t checksum;
  CHECK_ZE(zeKernelCreate(mod, &kd, &checksum));

  /* Events: [0, 64) "frame of producer p uploaded", [64, 128) "checksum p done". */
  ze_event_pool_desc_t pd = {ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, NULL,
                             ZE_EVENT_POOL_FLAG_HOST_VISIBLE | ZE_EVENT_POOL_FLAG_IPC, 128};
  ze_event_pool_handle_t pool;
  CHECK_ZE(zeEventPoolCreate(ctx, &pd, 1, &dev, &pool));
  ze_event_handle_t uploaded[64], done[64];
  for (int p = 0; p < producers; ++p) {
    ze_event_desc_t ed = {ZE_STRUCTURE_TYPE_EVENT_DESC, NULL, (uint32_t)p, 0, ZE_EVENT_SCOPE_FLAG_HOST};
    CHECK_ZE(zeEventCreate(pool, &ed, &uploaded[p]));
    ed.index = 64 + (uint32_t)p;
    CHECK_ZE(zeEventCreate(pool, &ed, &done[p]));
  }
  ze_ipc_event_pool_handle_t ph;
  CHECK_ZE(zeEventPoolGetIpcHandle(pool, &ph));
  char pool_hex[129];
  to_hex((const uint8_t *)ph.data, 64, pool_hex);
  int pool_fd;
  memcpy(&pool_fd, ph.data, sizeof pool_fd);

  /* The ring: one device buffer per producer, allocated by ferryd. */
  ferry_client *c = NULL;
  CHECK_FERRY(ferry_connect(sock, &c));
  void *ring[64];
  ze_device_mem_alloc_desc_t dd = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  void *sums;
  CHECK_ZE(zeMemAllocDevice(ctx, &dd, 8 * (size_t)producers, 8, dev, &sums));
  int credit_fd[64];
  pid_t pids[64];
  for (int p = 0; p < producers; ++p) {
    ferry_buffer b;
    ferry_token tok;
    ferry_ipc_handle h;
    CHECK_FERRY(ferry_buffer_alloc(c, bytes, &b));
    CHECK_FERRY(ferry_buffer_grant(c, b, FERRY_RIGHT_UPLOAD, &tok));
    CHECK_FERRY(ferry_buffer_export(c, b, &h));
    ze_ipc_mem_handle_t zh;
    memcpy(zh.data, h.data, sizeof zh.data);
    CHECK_ZE(zeMemOpenIpcHandle(ctx, dev, zh, 0, &ring[p]));
    close(h.fd);

    int pipefd[2];
    if (pipe(pipefd) != 0) return 1;
    char tok_hex[65], id[16], nf[16], nb[32], rfd[16];
    to_hex(tok.bytes, 32, tok_hex);
    snprintf(id, sizeof id, "%d", p);
    snprintf(nf, sizeof nf, "%d", frames);
    snprintf(nb, sizeof nb, "%llu", (unsigned long long)bytes);
    snprintf(rfd, sizeof rfd, "%d", pipefd[0]);
    char *args[] = {argv[0], "--producer", (char *)sock, id, nf, nb, tok_hex, pool_hex, rfd, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pool_fd, pool_fd);     /* the event pool, same number */
    posix_spawn_file_actions_adddup2(&fa, pipefd[0], pipefd[0]); /* credits */
    if (posix_spawn(&pids[p], "/proc/self/exe", &fa, NULL, args, environ) != 0) return 1;
    posix_spawn_file_actions_destroy(&fa);
    close(pipefd[0]);
    credit_fd[p] = pipefd[1];
  }
  printf("producer_consumer: %d producers x %d frames of %llu bytes into a ring of %d device buffers\n", producers,
         frames, (unsigned long long)bytes, producers);

  /* For each round: queue every producer's "wait, then checksum" before its
   * frame exists, give it its credit, then check the results. */
  unsigned char *expect = malloc(bytes);
  int bad = 0;
  ze_group_count_t one = {1, 1, 1};
  for (int f = 0; f < frames; ++f) {
    for (int p = 0; p < producers; ++p) {
      void *buf = ring[p], *out = (char *)sums + 8 * p;
      CHECK_ZE(zeKernelSetArgumentValue(checksum, 0, sizeof buf, &buf));
      CHECK_ZE(zeKernelSetArgumentValue(checksum, 1, sizeof bytes, &bytes));
      CHECK_ZE(zeKernelSetArgumentValue(checksum, 2, sizeof out, &out));
      CHECK_ZE(zeCommandListAppendLaunchKernel(list, checksum, &one, done[p], 1, &uploaded[p]));
      if (write(credit_fd[p], "c", 1) != 1) return 1;
    }
    for (int p = 0; p < producers; ++p) {
      CHECK_ZE(zeEventHostSynchronize(done[p], UINT64_MAX));
      uint64_t got = 0;
      CHECK_ZE(zeEventHostReset(done[p]));
      CHECK_ZE(zeCommandListAppendMemoryCopy(list, &got, (char *)sums + 8 * p, 8, done[p], 0, NULL));
      CHECK_ZE(zeEventHostSynchronize(done[p], UINT64_MAX));
      for (uint64_t i = 0; i < bytes; ++i) expect[i] = frame_byte(p, f, i);
      if (got != ferry_sim_checksum(expect, bytes)) {
        ++bad;
        fprintf(stderr, "frame %d of producer %d: checksum mismatch\n", f, p);
      }
      CHECK_ZE(zeEventHostReset(done[p]));
      CHECK_ZE(zeEventHostReset(uploaded[p])); /* the producer may signal it again */
    }
  }
  int failed = 0;
  for (int p = 0; p < producers; ++p) {
    int st = 0;
    close(credit_fd[p]);
    waitpid(pids[p], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++failed;
  }
  printf("producer_consumer: %d frames checked on the device, %d bad; %d producers failed\n", frames * producers,
         bad, failed);
  for (int p = 0; p < producers; ++p) zeMemCloseIpcHandle(ctx, ring[p]);
  ferry_disconnect(c);
  free(expect);
  return bad != 0 || failed != 0;
}
