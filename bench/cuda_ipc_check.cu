// SPDX-License-Identifier: MIT
// cuda_ipc_check: on a real NVIDIA GPU, a consumer process opens a buffer that
// ferryd (--backend cuda) allocated and a producer filled, with
// cuIpcOpenMemHandle in its own context, and checks the bytes.
//   cuda_ipc_check SOCKET PRODUCER_CLIENT
#include <cuda.h>
#include <cuda_runtime.h>
#include <ferry/ferry.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const uint64_t bytes = 3 << 20;
  ferry_client* c = nullptr;
  ferry_buffer b{};
  ferry_token tok{};
  if (ferry_connect(argv[1], &c) != 0 || ferry_buffer_alloc(c, bytes, &b) != 0 ||
      ferry_buffer_grant(c, b, FERRY_RIGHT_UPLOAD, &tok) != 0)
    return 3;
  // A producer process (libferry only) fills it: bytes (i * 131 + 9) & 0xff.
  char hex[65];
  for (int i = 0; i < 32; ++i) std::snprintf(hex + 2 * i, 3, "%02x", tok.bytes[i]);
  std::string n = std::to_string(bytes);
  const char* args[] = {argv[2], argv[1], hex, "0", n.c_str(), "9", nullptr};
  pid_t pid;
  if (posix_spawn(&pid, argv[2], nullptr, nullptr, const_cast<char**>(args), environ) != 0) return 4;
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 5;
  ferry_ipc_handle h{};
  if (int r = ferry_buffer_export(c, b, &h); r != 0 || h.kind != FERRY_IPC_CUDA) {
    std::fprintf(stderr, "export: %s (kind %u)\n", ferry_strerror(r), h.kind);
    return 6;
  }
  // The consumer's own context opens the daemon's allocation.
  cudaIpcMemHandle_t ih;
  static_assert(sizeof ih == 64);
  std::memcpy(&ih, h.data, sizeof ih);
  void* p = nullptr;
  if (cudaIpcOpenMemHandle(&p, ih, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) return 7;
  std::vector<unsigned char> back(bytes);
  if (cudaMemcpy(back.data(), p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return 8;
  uint64_t bad = 0;
  for (uint64_t i = 0; i < bytes; ++i) bad += back[i] != static_cast<unsigned char>(i * 131 + 9);
  cudaIpcCloseMemHandle(p);
  ferry_disconnect(c);
  std::printf("cuda_ipc_check: %llu bytes uploaded by a producer, read through cuIpcOpenMemHandle in the consumer: %s\n",
              static_cast<unsigned long long>(bytes), bad == 0 ? "all match" : "MISMATCH");
  return bad == 0 ? 0 : 1;
}
