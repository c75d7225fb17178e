/* SPDX-License-Identifier: MIT */
/* stream_client: connects to ferryd, takes a buffer, says "r" on stdout once
 * it holds them, then uploads without end until it is killed. The fault
 * tests start it as a real client process and kill it mid-stream.
 *   stream_client SOCKET          as above
 *   stream_client SOCKET grant    also grants upload rights on its buffer and
 *                                 writes the token (64 hex digits) after the "r"
 *   stream_client SOCKET tick     also writes "u" after each upload call returns,
 *                                 so that a test kills it at a count of uploads
 *                                 (once the pipe is full it waits there, uploads
 *                                 still in flight)
 */
#include <ferry/ferry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) return 2;
  ferry_client *c = NULL;
  ferry_buffer b = {0};
  if (ferry_connect(argv[1], &c) != 0 || ferry_buffer_alloc(c, 1 << 20, &b) != 0) return 1;
  char msg[1 + 64 + 1] = "r";
  if (argc == 3 && strcmp(argv[2], "grant") == 0) {
    ferry_token t;
    if (ferry_buffer_grant(c, b, FERRY_RIGHT_UPLOAD, &t) != 0) return 1;
    for (int i = 0; i < 32; ++i) snprintf(msg + 1 + 2 * i, 3, "%02x", t.bytes[i]);
  }
  static unsigned char src[300000];
  memset(src, 1, sizeof src);
  if (write(1, msg, strlen(msg)) != (ssize_t)strlen(msg)) return 1;
  const int tick = argc == 3 && strcmp(argv[2], "tick") == 0;
  for (;;) {
    ferry_upload(c, b, 0, src, sizeof src, NULL);
    if (tick && write(1, "u", 1) != 1) return 1;
  }
}
