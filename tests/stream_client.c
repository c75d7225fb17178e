/* stream_client: connects to ferryd, takes a buffer, says "r" on stdout once
 * it holds them, then uploads without end until it is killed. The fault
 * tests start it as a real client process and kill it mid-stream. */
#include <ferry/ferry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  ferry_client *c = NULL;
  ferry_buffer b = 0;
  if (ferry_connect(argv[1], &c) != 0 || ferry_buffer_alloc(c, 1 << 20, &b) != 0) return 1;
  static unsigned char src[300000];
  memset(src, 1, sizeof src);
  if (write(1, "r", 1) != 1) return 1;
  for (;;) ferry_upload(c, b, 0, src, sizeof src, NULL);
}
