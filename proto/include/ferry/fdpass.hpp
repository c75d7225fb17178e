// Sending a message with one file descriptor over a Unix socket (SCM_RIGHTS),
// and collecting the descriptors that arrive with received bytes. Used by
// ferryd, libferry and the tests alike.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstring>

namespace ferry::proto {

// One sendmsg of `n` bytes carrying `fd`. Returns what sendmsg returns.
inline ssize_t send_fd(int sock, const void* data, size_t n, int fd, int flags) {
  iovec iov{const_cast<void*>(data), n};
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctrl;
  mh.msg_controllen = sizeof ctrl;
  cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  return ::sendmsg(sock, &mh, flags);
}

// One recvmsg into [data, data+n); every descriptor that came with the bytes
// is passed to on_fd (which takes ownership). Returns what recvmsg returns.
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
  for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
      on_fd(fd);
    }
  }
  return got;
}

}  // namespace ferry::proto
