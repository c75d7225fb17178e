// SPDX-License-Identifier: MIT
// Blocking wire I/O over a Unix stream socket, shared by libferry, ferryctl,
// ferryd's tests and tools: whole sends, exact reads, one whole message at a
// time through decode(), and the default socket path.
//
// ferryd itself reads with Asio and decodes from its own buffer; it uses
// only send_fd/recv_fds (fdpass.hpp) and the path helpers from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/fdpass.hpp"
#include "ferry/proto.hpp"

namespace ferry::proto {

// /run/ferry/ferryd-<device>.sock: where ferryd@<device> listens.
std::string default_socket_path(uint32_t device = 0);
// $FERRY_SOCKET when set and not empty, else default_socket_path(device).
std::string socket_path_from_env(uint32_t device = 0);
// Where a running ferryd says so: its socket's path with ".sock" (if any)
// replaced by ".pid" (/run/ferry/ferryd-0.pid), holding its pid. ferryd
// writes it once it listens and removes it when it exits, so a monitor can
// tell a running daemon from a socket systemd holds for one (connecting to
// that would start it, or restart one an operator drained).
std::string running_marker_path(const std::string& socket);

// Sends all n bytes (MSG_NOSIGNAL; EINTR retried). 0 or -errno.
int send_all(int fd, const void* data, size_t n);
// Reads exactly n bytes. 0, -ECONNRESET at end of stream, or -errno
// (-EAGAIN when SO_RCVTIMEO ran out). Descriptors that arrive are passed to
// fds (or closed when fds is null).
int read_exact(int fd, void* data, size_t n, std::vector<int>* fds = nullptr);

// Reads one whole message: its header, then the rest, checked by decode().
// 0 with the message in `msg`, -EPROTO for bytes that are no message, or
// what read_exact returns.
int read_message(int fd, std::vector<uint8_t>& msg, std::vector<int>* fds = nullptr);

// The type of a message read by read_message.
inline Type type_of(const std::vector<uint8_t>& msg) {
  Header h{};
  if (msg.size() >= sizeof h) std::memcpy(&h, msg.data(), sizeof h);
  return static_cast<Type>(h.type);
}

// Copies a message read by read_message into T, if it is one of that size.
template <class T>
bool as(const std::vector<uint8_t>& msg, T* out) {
  if (msg.size() < sizeof(T)) return false;
  std::memcpy(out, msg.data(), sizeof(T));
  return true;
}

}  // namespace ferry::proto
