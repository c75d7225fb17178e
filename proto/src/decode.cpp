// SPDX-License-Identifier: MIT
// The decoder: good / bad / need-more, and how much a good message consumed.
#include <cstring>

#include "ferry/proto.hpp"

namespace ferry::proto {

size_t fixed_size(Type t) {
  switch (t) {
    case Type::hello: return sizeof(Hello);
    case Type::welcome: return sizeof(Welcome);
    case Type::error: return sizeof(Error);
    case Type::alloc: return sizeof(Alloc);
    case Type::free: return sizeof(Free);
    case Type::reply: return sizeof(Reply);
    case Type::status_request: return sizeof(StatusRequest);
    case Type::status_reply: return sizeof(StatusReply);
    case Type::shutdown: return sizeof(Shutdown);
    case Type::grant: return sizeof(Grant);
    case Type::revoke: return sizeof(Revoke);
    case Type::open: return sizeof(Open);
    case Type::token_reply: return sizeof(TokenReply);
    case Type::buffer_reply: return sizeof(BufferReply);
    case Type::export_buffer: return sizeof(Export);
    case Type::export_reply: return sizeof(ExportReply);
    case Type::import_buffer: return sizeof(Import);
    case Type::event_pool: return sizeof(EventPool);
    case Type::admin_request: return sizeof(AdminRequest);
    case Type::staging_grow: return sizeof(StagingGrow);
    case Type::staging_reply: return sizeof(StagingReply);
    case Type::staging_release: return sizeof(StagingRelease);
    // Ring entry kinds, the timeline messages of protocols 1 and 2, protocol 5's Doorbell.
    case Type::upload: case Type::download: case Type::completion: case Type::ticket_failed: case Type::doorbell:
    case Type::upload_signal: case Type::upload_after: case Type::upload_fenced: return 0;
  }
  return 0;
}

Decoded decode(const void* data, size_t bytes) {
  Decoded d;
  if (bytes < sizeof(Header)) return d;  // need_more
  Header h;
  std::memcpy(&h, data, sizeof h);
  d.type = static_cast<Type>(h.type);
  const size_t want = fixed_size(d.type);
  auto bad = [&](const char* why) {
    d.result = Decode::bad;
    d.why = why;
    return d;
  };
  if (want == 0) return bad("not a message type of this protocol (transfers go through the submission ring)");
  if (d.type == Type::status_reply) {
    if (h.size < want || h.size > want + kMaxStatusJson) return bad("status reply of impossible size");
  } else if (h.size != want) {
    return bad("message size does not match its type");
  }
  if (bytes < h.size) {
    return d;
  }
  if (d.type == Type::hello || d.type == Type::welcome) {
    uint32_t magic;
    uint16_t version;
    std::memcpy(&magic, static_cast<const char*>(data) + offsetof(Hello, magic), sizeof magic);
    std::memcpy(&version, static_cast<const char*>(data) + offsetof(Hello, version), sizeof version);
    static_assert(offsetof(Hello, magic) == offsetof(Welcome, magic));
    static_assert(offsetof(Hello, version) == offsetof(Welcome, version));
    if (magic != kMagic) return bad("wrong magic: not a ferry client");
    // A Hello of another version is decoded: the daemon answers it with
    // the rule (an Error naming both versions) rather than a bare close.
    if (version != kVersion && d.type == Type::welcome) return bad("unsupported protocol version");
  }
  if (d.type == Type::status_reply) {
    uint32_t json;
    std::memcpy(&json, static_cast<const char*>(data) + offsetof(StatusReply, json_bytes), sizeof json);
    if (sizeof(StatusReply) + json != h.size) return bad("status reply length mismatch");
  }
  d.result = Decode::good;
  d.consumed = h.size;
  return d;
}

}  // namespace ferry::proto
