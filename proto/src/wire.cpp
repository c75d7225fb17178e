// SPDX-License-Identifier: MIT
#include "ferry/wire.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace ferry::proto {

std::string default_socket_path(uint32_t device) { return "/run/ferry/ferryd-" + std::to_string(device) + ".sock"; }

std::string running_marker_path(const std::string& socket) {
  const bool sock = socket.size() > 5 && socket.compare(socket.size() - 5, 5, ".sock") == 0;
  return (sock ? socket.substr(0, socket.size() - 5) : socket) + ".pid";
}

std::string socket_path_from_env(uint32_t device) {
  const char* env = std::getenv("FERRY_SOCKET");
  return env != nullptr && *env != '\0' ? env : default_socket_path(device);
}

int send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return 0;
}

int read_exact(int fd, void* data, size_t n, std::vector<int>* fds) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = recv_fds(fd, p, n, 0, [&](int f) {
      if (fds != nullptr) {
        fds->push_back(f);
      } else {
        ::close(f);
      }
    });
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
    if (k == 0) return -ECONNRESET;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return 0;
}

int read_message(int fd, std::vector<uint8_t>& msg, std::vector<int>* fds) {
  msg.resize(sizeof(Header));
  if (int r = read_exact(fd, msg.data(), msg.size(), fds); r != 0) return r;
  // The header alone tells whether the size can be right for the type.
  Decoded d = decode(msg.data(), msg.size());
  if (d.result == Decode::bad) return -EPROTO;
  Header h;
  std::memcpy(&h, msg.data(), sizeof h);
  msg.resize(h.size);
  if (h.size > sizeof h) {
    if (int r = read_exact(fd, msg.data() + sizeof h, h.size - sizeof h, fds); r != 0) return r;
  }
  d = decode(msg.data(), msg.size());
  return d.result == Decode::good && d.consumed == msg.size() ? 0 : -EPROTO;
}

}  // namespace ferry::proto
