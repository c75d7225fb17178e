// SPDX-License-Identifier: MIT
// Unix-socket helpers shared by ferryd, libferry, ferryctl and the tests:
// connecting to a path, sending a message with one file descriptor
// (SCM_RIGHTS), and collecting the descriptors that arrive with bytes.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <cstddef>
#include <cstring>

namespace ferry::proto {

// What to tell a user refused by the socket file's permissions (EACCES):
// its mode and group, and whether this process is in the group, with what
// to do about it (libferry's ferry_last_error, ferryctl).
std::string access_refusal(const std::string& path);

// A connected stream socket to `path` in *out, or -errno (-ENAMETOOLONG for a
// path that does not fit). A listener whose backlog is full makes a blocking
// connect wait for ever: with timeout_ms >= 0 it is retried until then, and
// -ETIMEDOUT returned.
inline int connect_unix(const std::string& path, int* out, int timeout_ms = -1) {
  sockaddr_un a{};
  if (path.size() >= sizeof a.sun_path) return -ENAMETOOLONG;
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  const int flags = SOCK_STREAM | SOCK_CLOEXEC | (timeout_ms >= 0 ? SOCK_NONBLOCK : 0);
  int fd = ::socket(AF_UNIX, flags, 0);
  if (fd < 0) return -errno;
  for (int waited_ms = 0;; ++waited_ms) {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    const int e = errno;
    // A Unix socket's non-blocking connect says EAGAIN while the backlog is full.
    if (e == EAGAIN && timeout_ms >= 0 && waited_ms < timeout_ms) {
      ::usleep(1000);
      continue;
    }
    ::close(fd);
    return e == EAGAIN ? -ETIMEDOUT : -e;
  }
  if (timeout_ms >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *out = fd;
  return 0;
}

// One sendmsg of `n` bytes carrying `count` descriptors (at most 16).
// Returns what sendmsg returns.
inline ssize_t send_fds(int sock, const void* data, size_t n, const int* fds, size_t count, int flags) {
  constexpr size_t kMax = 16;
  if (count > kMax) {
    errno = EINVAL;
    return -1;
  }
  iovec iov{const_cast<void*>(data), n};
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int) * kMax)] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctrl;
  mh.msg_controllen = CMSG_SPACE(sizeof(int) * count);
  cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int) * count);
  std::memcpy(CMSG_DATA(cm), fds, sizeof(int) * count);
  return ::sendmsg(sock, &mh, flags);
}

// One sendmsg of `n` bytes carrying `fd`. Returns what sendmsg returns.
inline ssize_t send_fd(int sock, const void* data, size_t n, int fd, int flags) {
  return send_fds(sock, data, n, &fd, 1, flags);
}

// One recvmsg into [data, data+n); every descriptor that came with the bytes
// is passed to on_fd (which takes ownership). Returns what recvmsg returns,
// or -1 with errno EPROTO when the kernel cut descriptors off (MSG_CTRUNC:
// more than fit here were sent); those that did arrive are closed then, and
// the stream is no longer in step with its sender.
template <class OnFd>
ssize_t recv_fds(int sock, void* data, size_t n, int flags, OnFd on_fd) {
  iovec iov{data, n};
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int) * 4)];
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctrl;
  mh.msg_controllen = sizeof ctrl;
  ssize_t got = ::recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
  if (got < 0) return got;
  const bool cut = (mh.msg_flags & MSG_CTRUNC) != 0;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
      if (cut) {
        ::close(fd);
      } else {
        on_fd(fd);
      }
    }
  }
  if (cut) {
    errno = EPROTO;
    return -1;
  }
  return got;
}

}  // namespace ferry::proto
