/* SPDX-License-Identifier: MIT */
/* small_uploads: N back-to-back 1 KiB uploads from one client, then a flush.
 * The workload bench/profile.sh runs under callgrind and strace. */
#include <ferry/ferry.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s SOCKET COUNT\n", argv[0]);
    return 2;
  }
  ferry_client *c = NULL;
  ferry_buffer b = {0};
  char src[1024] = {0};
  int r = ferry_connect(argv[1], &c);
  if (r == 0) r = ferry_buffer_alloc(c, sizeof src, &b);
  for (long i = 0, n = atol(argv[2]); r == 0 && i < n; ++i) r = ferry_upload(c, b, 0, src, sizeof src, NULL);
  if (r == 0) r = ferry_flush(c, -1);
  if (r != 0) fprintf(stderr, "small_uploads: %s\n", ferry_strerror(r));
  ferry_disconnect(c);
  return r != 0;
}
