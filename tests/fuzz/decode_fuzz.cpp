// SPDX-License-Identifier: MIT
// libFuzzer target: the wire decoder on arbitrary bytes, used the way ferryd
// and libferry use it (a stream of messages, each copied out by type).
#include <cstdint>
#include <cstring>

#include "ferry/proto.hpp"

namespace proto = ferry::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t off = 0;
  while (off < size) {
    proto::Decoded d = proto::decode(data + off, size - off);
    if (d.result != proto::Decode::good) break;
    // A good message is whole, at least a header, and of its type's size.
    if (d.consumed < sizeof(proto::Header) || d.consumed > size - off) __builtin_trap();
    const size_t fixed = proto::fixed_size(d.type);
    if (fixed == 0 || d.consumed < fixed) __builtin_trap();
    alignas(8) uint8_t msg[256];
    std::memcpy(msg, data + off, fixed);  // as the receivers copy it out
    if (d.type == proto::Type::error) {
      proto::Error e;
      std::memcpy(&e, msg, sizeof e);
      (void)proto::get_text(e.text);
    }
    off += d.consumed;
  }
  return 0;
}
