// SPDX-License-Identifier: MIT
// Writes the seed corpus: one file per message type, and a few streams.
#include <cstdio>
#include <string>
#include <vector>

#include "ferry/proto.hpp"

using namespace ferry::proto;

template <class T>
void put(std::vector<uint8_t>& v, const T& m) {
  const auto* p = reinterpret_cast<const uint8_t*>(&m);
  v.insert(v.end(), p, p + sizeof m);
}

void write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& v) {
  FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
  std::fwrite(v.data(), 1, v.size(), f);
  std::fclose(f);
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  auto hello = make<Hello>(Type::hello);
  hello.magic = kMagic;
  hello.version = kVersion;
  auto welcome = make<Welcome>(Type::welcome);
  welcome.magic = kMagic;
  welcome.version = kVersion;
  welcome.slot_count = 16;
  welcome.slot_bytes = 1 << 20;
  auto err = make<Error>(Type::error);
  err.h.flags = kErrorFatal;
  err.code = -71;
  set_text(err.text, "message type a client may not send");
  std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds;
  auto one = [&](const std::string& n, auto m) {
    std::vector<uint8_t> v;
    put(v, m);
    seeds.emplace_back(n, v);
  };
  one("hello", hello);
  one("welcome", welcome);
  one("error", err);
  one("alloc", make<Alloc>(Type::alloc));
  one("free", make<Free>(Type::free));
  one("reply", make<Reply>(Type::reply));
  one("status_request", make<StatusRequest>(Type::status_request));
  one("shutdown", make<Shutdown>(Type::shutdown));
  auto grant = make<Grant>(Type::grant);
  grant.rights = kRightUpload;
  one("grant", grant);
  one("revoke", make<Revoke>(Type::revoke));
  one("open", make<Open>(Type::open));
  one("token_reply", make<TokenReply>(Type::token_reply));
  one("buffer_reply", make<BufferReply>(Type::buffer_reply));
  one("export", make<Export>(Type::export_buffer));
  auto er = make<ExportReply>(Type::export_reply);
  er.kind = kIpcLevelZero;
  one("export_reply", er);
  auto im = make<Import>(Type::import_buffer);
  im.kind = kIpcLevelZero;
  im.bytes = 4096;
  one("import", im);
  auto ep = make<EventPool>(Type::event_pool);
  ep.count = 8;
  ep.kind = kIpcLevelZero;
  one("event_pool", ep);
  auto sr = make<StatusReply>(Type::status_reply);
  const std::string json = "{\"clients\":[]}";
  sr.json_bytes = static_cast<uint32_t>(json.size());
  sr.h.size = static_cast<uint32_t>(sizeof sr + json.size());
  std::vector<uint8_t> v;
  put(v, sr);
  v.insert(v.end(), json.begin(), json.end());
  seeds.emplace_back("status_reply", v);
  std::vector<uint8_t> stream;
  put(stream, hello);
  put(stream, make<Alloc>(Type::alloc));
  put(stream, up);
  put(stream, down);
  put(stream, make<Free>(Type::free));
  seeds.emplace_back("session_stream", stream);
  for (auto& [n, s] : seeds) write(dir, n, s);
  return 0;
}
