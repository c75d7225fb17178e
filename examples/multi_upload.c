/* SPDX-License-Identifier: MIT */
/* multi_upload: several processes upload into device buffers through ferryd
 * at once, then each verifies its buffer by downloading it.
 *
 * usage: multi_upload [-s SOCKET] [-p PROCESSES] [-n UPLOADS] [-b BYTES]
 *
 * Uses only <ferry/ferry.h> and -lferry. Each worker fills one source buffer,
 * uploads it again and again with a different pattern into successive
 * regions of a device buffer (overwriting the source right after each call
 * returns, which ferry makes safe), waits, downloads and compares.
 */
#define _POSIX_C_SOURCE 200809L
#include <ferry/ferry.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Why a call failed: libferry's own words (the socket, the argument, the
 * bound and the flag that sets it), or what its errno means. */
static const char *why(int r) {
  const char *detail = ferry_last_error();
  return detail[0] != '\0' ? detail : ferry_strerror(r);
}

static unsigned char pattern(int worker, uint64_t i, uint64_t j) {
  return (unsigned char)(worker * 31 + i * 7 + j * 13);
}

static int worker(const char *sock, int id, int uploads, uint64_t bytes) {
  ferry_client *c = NULL;
  int r = ferry_connect(sock, &c);
  if (r != 0) {
    fprintf(stderr, "worker %d: ferry_connect: %s\n", id, why(r));
    return 1;
  }
  ferry_buffer buf = {0};
  uint64_t total = bytes * (uint64_t)uploads;
  if ((r = ferry_buffer_alloc(c, total, &buf)) != 0) {
    fprintf(stderr, "worker %d: ferry_buffer_alloc: %s\n", id, why(r));
    ferry_disconnect(c);
    return 1;
  }
  unsigned char *src = malloc(bytes), *back = malloc(total);
  ferry_ticket last = 0;
  for (int i = 0; i < uploads; ++i) {
    for (uint64_t j = 0; j < bytes; ++j) src[j] = pattern(id, (uint64_t)i, j);
    if ((r = ferry_upload(c, buf, (uint64_t)i * bytes, src, bytes, &last)) != 0) {
      fprintf(stderr, "worker %d: ferry_upload: %s\n", id, why(r));
      break;
    }
    memset(src, 0xEE, bytes); /* the source is ours again at once */
  }
  if (r == 0 && (r = ferry_wait(c, last, -1)) != 0) fprintf(stderr, "worker %d: ferry_wait: %s\n", id, why(r));
  if (r == 0 && (r = ferry_download(c, buf, 0, back, total)) != 0)
    fprintf(stderr, "worker %d: ferry_download: %s\n", id, why(r));
  uint64_t bad = 0;
  for (int i = 0; r == 0 && i < uploads; ++i)
    for (uint64_t j = 0; j < bytes; ++j)
      if (back[(uint64_t)i * bytes + j] != pattern(id, (uint64_t)i, j)) ++bad;
  if (r == 0) printf("worker %d (pid %d): %d uploads of %llu bytes, %s\n", id, (int)getpid(), uploads,
                     (unsigned long long)bytes, bad == 0 ? "all verified" : "MISMATCH");
  ferry_buffer_free(c, buf);
  ferry_disconnect(c);
  free(src);
  free(back);
  return r != 0 || bad != 0;
}

int main(int argc, char **argv) {
  const char *sock = NULL;
  int procs = 4, uploads = 200, opt;
  uint64_t bytes = 64 * 1024;
  while ((opt = getopt(argc, argv, "s:p:n:b:h")) != -1) {
    switch (opt) {
      case 's': sock = optarg; break;
      case 'p': procs = atoi(optarg); break;
      case 'n': uploads = atoi(optarg); break;
      case 'b': bytes = strtoull(optarg, NULL, 0); break;
      default:
        fprintf(stderr, "usage: %s [-s SOCKET] [-p PROCESSES] [-n UPLOADS] [-b BYTES]\n", argv[0]);
        return opt == 'h' ? 0 : 2;
    }
  }
  if (procs < 1 || uploads < 1 || bytes == 0) {
    fprintf(stderr, "%s: -p, -n and -b must be positive\n", argv[0]);
    return 2;
  }
  printf("multi_upload: %d processes x %d uploads of %llu bytes (libferry %s)\n", procs, uploads,
         (unsigned long long)bytes, ferry_version());
  fflush(stdout);
  for (int i = 0; i < procs; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = worker(sock, i, uploads, bytes);
      fflush(stdout);
      _exit(rc);
    }
    if (pid < 0) return 1;
  }
  int failed = 0, status = 0;
  while (wait(&status) > 0)
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  printf("multi_upload: %d of %d processes verified their bytes\n", procs - failed, procs);
  return failed != 0;
}
