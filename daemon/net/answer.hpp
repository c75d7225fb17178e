// SPDX-License-Identifier: MIT
// What a request handler returns, for its session to carry out.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace ferry::ferryd {

// A handler's answer, which the session carries out once the handler
// returned: a message to send, an Error that ends the session, a quiet
// close, or nothing (no reply, or one that comes later: Peer::defer).
struct Answer {
  enum class Kind : uint8_t { none, message, end, close };
  Kind kind = Kind::none;
  std::string bytes;     // message and end: the whole message
  int fd = -1, fd2 = -1;  // message: descriptors sent with it, the session's from here
  std::string why;       // end: for the log
  // message with a descriptor: called once if the descriptor never leaves
  // ferryd (refused, or dropped unsent: its session failed or closed first,
  // or sendmsg refused it, ETOOMANYREFS); its descriptors are closed then.
  std::function<void()> unsent;

  template <class Msg>
  static Answer message(const Msg& m, int fd = -1, int fd2 = -1) {
    Answer a;
    a.kind = Kind::message;
    a.bytes.assign(reinterpret_cast<const char*>(&m), sizeof m);
    a.fd = fd;
    a.fd2 = fd2;
    return a;
  }
  static Answer message(std::string bytes);
  // The one way a request is refused with words: an Error for `request`
  // carrying `why`. fatal: the session ends once it is written (its ring is
  // not read again); else only the request failed.
  static Answer error(uint64_t request, int code, const std::string& why, bool fatal);
  static Answer close() {
    Answer a;
    a.kind = Kind::close;
    return a;
  }
};

}  // namespace ferry::ferryd
