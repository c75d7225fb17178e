/* SPDX-License-Identifier: MIT */
/* direct_uploads: COUNT back-to-back direct uploads of BYTES from one client,
 * as ferry-run makes them (FERRY_DIRECT_NO_WAIT | FERRY_DIRECT_CALLER_THREAD),
 * into a "queue" that runs each command as it is appended: the copy lands in
 * a host buffer, the number is written at once. What is left is libferry's
 * own work per call (and the staging copy): bench/profile.sh counts its
 * instructions under callgrind, and the program prints the calls' median
 * and p99 in ns. Every upload's bytes are checked where they landed; a call
 * that found no room (-EAGAIN) is counted, not retried. */
#include <ferry/ferry.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct queue {
  unsigned char *dst;
};

static int copy(void *ctx, uint64_t dst_offset, const void *staging, uint64_t bytes) {
  memcpy(((struct queue *)ctx)->dst + dst_offset, staging, bytes);
  return 0;
}

static int write_word(void *ctx, volatile uint64_t *word, uint64_t value) {
  (void)ctx;
  __atomic_store_n(word, value, __ATOMIC_RELEASE);
  return 0;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s SOCKET COUNT BYTES\n", argv[0]);
    return 2;
  }
  const long n = atol(argv[2]);
  const uint64_t bytes = strtoull(argv[3], NULL, 10);
  if (n <= 0 || bytes == 0) {
    fprintf(stderr, "direct_uploads: COUNT and BYTES must be positive\n");
    return 2;
  }
  unsigned char *src = malloc(bytes), *dst = malloc(bytes);
  uint64_t *took = malloc(sizeof *took * (size_t)n);
  if (src == NULL || dst == NULL || took == NULL) return 1;
  ferry_client *c = NULL;
  int r = ferry_connect(argv[1], &c);
  struct queue q = {dst};
  ferry_direct_ops ops = {sizeof ops, FERRY_DIRECT_NO_WAIT | FERRY_DIRECT_CALLER_THREAD, &q, 1, 0, copy, write_word};
  long wrong = 0, no_room = 0;
  for (long i = 0; r == 0 && i < n; ++i) {
    memset(src, (int)(i & 0xff), bytes);
    const uint64_t t0 = now_ns();
    r = ferry_upload_direct(c, src, bytes, &ops, NULL);
    took[i] = now_ns() - t0;
    if (r == -EAGAIN) {
      ++no_room;
      r = 0;
      continue;
    }
    if (r == 0 && (dst[0] != (unsigned char)(i & 0xff) || dst[bytes - 1] != (unsigned char)(i & 0xff))) ++wrong;
  }
  if (r == 0) r = ferry_flush(c, -1);
  if (r != 0) {
    fprintf(stderr, "direct_uploads: %s\n", ferry_strerror(r));
  } else {
    qsort(took, (size_t)n, sizeof *took, by_value);
    printf("direct_uploads: %ld calls of %llu B: median %llu ns, p99 %llu ns, %ld without room, %ld wrong\n", n,
           (unsigned long long)bytes, (unsigned long long)took[n / 2], (unsigned long long)took[n * 99 / 100], no_room,
           wrong);
  }
  ferry_disconnect(c);
  free(src);
  free(dst);
  free(took);
  return r != 0 || wrong != 0;
}
