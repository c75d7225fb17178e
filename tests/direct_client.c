/* SPDX-License-Identifier: MIT */
/* direct_client: a process with a Level Zero context of its own (the
 * simulated device) whose command list holds direct uploads it never lets
 * run: the list first waits on a word no one writes. It writes "ready PID"
 * to stdout once COUNT uploads of BYTES are appended, then sleeps until it
 * is killed.
 *
 *   direct_client SOCKET COUNT BYTES
 *
 * Exits with the (positive) errno of the first failure, or 100+ for a
 * Level Zero call that failed. Also checks ferry/level_zero.h as C. */
#include <ferry/ferry.h>
#include <ferry/level_zero.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 4) return 100;
  const unsigned count = (unsigned)strtoul(argv[2], NULL, 0);
  const size_t bytes = (size_t)strtoull(argv[3], NULL, 0);
  ze_driver_handle_t drv;
  ze_device_handle_t dev;
  ze_context_handle_t ctx;
  ze_command_list_handle_t list;
  uint32_t n = 1;
  if (zeInit(0) != ZE_RESULT_SUCCESS || zeDriverGet(&n, &drv) != ZE_RESULT_SUCCESS) return 101;
  n = 1;
  if (zeDeviceGet(drv, &n, &dev) != ZE_RESULT_SUCCESS) return 102;
  ze_context_desc_t cd = {ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
  if (zeContextCreate(drv, &cd, &ctx) != ZE_RESULT_SUCCESS) return 103;
  ze_command_queue_desc_t qd = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, 0, 0, 0,
                                ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  if (zeCommandListCreateImmediate(ctx, dev, &qd, &list) != ZE_RESULT_SUCCESS) return 104;
  ze_device_mem_alloc_desc_t dd = {ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
  void *dst = NULL;
  if (zeMemAllocDevice(ctx, &dd, bytes * count, 64, dev, &dst) != ZE_RESULT_SUCCESS) return 105;
  ferry_client *c = NULL;
  int r = ferry_connect(argv[1], &c);
  if (r == 0) r = ferry_ze_import(c, drv);
  ferry_timeline tl;
  memset(&tl, 0, sizeof tl);
  if (r == 0) r = ferry_get_timeline(c, &tl);
  /* The list stops here for good: app_value never reaches 1. */
  if (r == 0) r = ferry_ze_wait_word_(drv, list, tl.app_value, 1);
  unsigned char *src = malloc(bytes);
  memset(src, 0x5a, bytes);
  for (unsigned i = 0; i < count && r == 0; ++i) {
    ferry_ticket t = 0;
    r = ferry_ze_upload(c, drv, list, (char *)dst + (size_t)i * bytes, src, bytes, &t);
  }
  if (r != 0) {
    fprintf(stderr, "direct_client: %s (%s)\n", ferry_strerror(r), ferry_last_error());
    return -r;
  }
  printf("ready %ld\n", (long)getpid());
  fflush(stdout);
  for (;;) pause();
}
