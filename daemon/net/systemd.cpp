// SPDX-License-Identifier: MIT
#include "net/systemd.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace ferry::ferryd::systemd {

bool notify(const std::string& state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const size_t n = std::strlen(path);
  if (n >= sizeof a.sun_path) return false;
  std::memcpy(a.sun_path, path, n);
  if (a.sun_path[0] == '@') a.sun_path[0] = '\0';  // abstract namespace
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n);
  bool ok = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&a), len) ==
            static_cast<ssize_t>(state.size());
  ::close(fd);
  return ok;
}

int listen_fd() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  int fd = -1;
  if (pid != nullptr && fds != nullptr && std::atol(pid) == static_cast<long>(::getpid()) && std::atoi(fds) >= 1) {
    constexpr int kFirst = 3;  // SD_LISTEN_FDS_START
    int type = 0, listening = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(kFirst, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM &&
        ::getsockopt(kFirst, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening) {
      ::fcntl(kFirst, F_SETFD, FD_CLOEXEC);
      fd = kFirst;
    }
  }
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  return fd;
}

}  // namespace ferry::ferryd::systemd
