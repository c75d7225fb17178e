/* SPDX-License-Identifier: MIT */
/* consumer: the smallest program built against an installed ferry, through
 * pkg-config or CMake's find_package. Uploads 1 MiB, downloads it, compares.
 * usage: consumer [SOCKET] */
#include <ferry/ferry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  ferry_client *c = NULL;
  ferry_buffer b = {0};
  ferry_ticket t = 0;
  enum { N = 1 << 20 };
  unsigned char *src = malloc(N), *back = malloc(N);
  for (int i = 0; i < N; ++i) src[i] = (unsigned char)(i * 13);
  int r = ferry_connect(argc > 1 ? argv[1] : NULL, &c);
  if (r == 0) r = ferry_buffer_alloc(c, N, &b);
  if (r == 0) r = ferry_upload(c, b, 0, src, N, &t);
  if (r == 0) r = ferry_wait(c, t, -1);
  if (r == 0) r = ferry_download(c, b, 0, back, N);
  if (r != 0) {
    const char *detail = ferry_last_error(); /* the socket, the argument or the bound, if it says more */
    fprintf(stderr, "consumer: %s\n", detail[0] != '\0' ? detail : ferry_strerror(r));
    return 1;
  }
  int same = memcmp(src, back, N) == 0;
  printf("consumer (libferry %s, headers %s): 1 MiB %s\n", ferry_version(), FERRY_VERSION_STRING,
         same ? "verified" : "MISMATCH");
  ferry_disconnect(c);
  free(src);
  free(back);
  return !same;
}
