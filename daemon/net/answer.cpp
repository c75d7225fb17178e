// SPDX-License-Identifier: MIT
#include "net/answer.hpp"

#include "ferry/proto.hpp"

namespace ferry::ferryd {

Answer Answer::message(std::string bytes) {
  Answer a;
  a.kind = Kind::message;
  a.bytes = std::move(bytes);
  return a;
}

Answer Answer::error(uint64_t request, int code, const std::string& why, bool fatal) {
  auto e = proto::make<proto::Error>(proto::Type::error);
  e.h.flags = fatal ? proto::kErrorFatal : 0;
  e.request = request;
  e.code = code;
  proto::set_text(e.text, why);
  Answer a = message(e);
  if (fatal) {
    a.kind = Kind::end;
    a.why = why;
  }
  return a;
}

}  // namespace ferry::ferryd
