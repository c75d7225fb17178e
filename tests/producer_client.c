/* SPDX-License-Identifier: MIT */
/* producer_client: a producer process with no GPU context of its own. It opens
 * a buffer granted to it, uploads a frame, waits, and exits with 0 on
 * success or with the (positive) errno of the first failure.
 *
 *   producer_client SOCKET TOKEN_HEX OFFSET BYTES SEED [POOL_FD POOL_HEX EVENT]
 *
 * The frame's bytes are (i * 131 + SEED) & 0xff. With an event pool (an fd
 * this process inherited and the pool's IPC handle in hex), the upload also
 * signals that event on the device once the whole frame is in place. */
#include <ferry/ferry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int unhex(const char *s, uint8_t *out, size_t n) {
  if (strlen(s) != 2 * n) return -1;
  for (size_t i = 0; i < n; ++i) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
    out[i] = (uint8_t)v;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 6 && argc != 9) return 100;
  ferry_token token;
  if (unhex(argv[2], token.bytes, sizeof token.bytes) != 0) return 101;
  uint64_t off = strtoull(argv[3], NULL, 0), bytes = strtoull(argv[4], NULL, 0);
  unsigned seed = (unsigned)strtoul(argv[5], NULL, 0);
  uint8_t *frame = malloc(bytes);
  for (uint64_t i = 0; i < bytes; ++i) frame[i] = (uint8_t)(i * 131 + seed);
  ferry_client *c = NULL;
  ferry_buffer b = {0};
  ferry_ticket t = 0;
  int r = ferry_connect(argv[1], &c);
  if (r == 0) r = ferry_buffer_open(c, &token, &b, NULL);
  if (r == 0 && argc == 9) {
    ferry_ipc_handle h;
    memset(&h, 0, sizeof h);
    h.kind = FERRY_IPC_LEVEL_ZERO;
    h.fd = atoi(argv[6]);
    if (unhex(argv[7], h.data, sizeof h.data) != 0) return 102;
    memcpy(h.data, &h.fd, sizeof h.fd);
    uint64_t pool = 0;
    r = ferry_event_pool_register(c, &h, 8, &pool);
    if (r == 0) r = ferry_upload_signal(c, b, off, frame, bytes, pool, (uint32_t)atoi(argv[8]), &t);
  } else if (r == 0) {
    r = ferry_upload(c, b, off, frame, bytes, &t);
  }
  if (r == 0) r = ferry_wait(c, t, -1);
  if (r != 0) fprintf(stderr, "producer_client: %s\n", ferry_strerror(r));
  ferry_disconnect(c);
  free(frame);
  return r == 0 ? 0 : (-r & 0x7f);
}
