// SPDX-License-Identifier: MIT
#include "mps.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ferry::ferryd {

// Whether this process's CUDA contexts go through NVIDIA's MPS: the driver
// does so when an MPS control daemon answers at `control` in
// CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps). The file outlives the
// daemon (seen on the H200 after `quit`), so it must answer: a socket that
// accepts a connection, or a FIFO with a reader. ferryd may not see other
// users' processes (ProtectProc=invisible), so this is what it can check.
bool mps_control_present() {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string path = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp/nvidia-mps") + "/control";
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return false;
  if (S_ISFIFO(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // ENXIO: nobody reads it
    if (fd < 0) return false;
    ::close(fd);
    return true;
  }
  if (!S_ISSOCK(st.st_mode) || path.size() >= sizeof(sockaddr_un::sun_path)) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), path.size());
  // A SOCK_SEQPACKET socket on the H200 machine (CUDA 13); a stream socket
  // is tried too. Refused: nobody listens.
  for (int type : {SOCK_SEQPACKET, SOCK_STREAM}) {
    const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int r = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    const int err = errno;
    ::close(fd);
    if (r == 0) return true;
    if (err != EPROTOTYPE) return false;
  }
  return false;
}

}  // namespace ferry::ferryd
