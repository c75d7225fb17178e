// The decoder: every message, truncated, oversized and wrong-version input.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "ferry/proto.hpp"

using namespace ferry::proto;

namespace {
template <class T>
std::vector<uint8_t> bytes_of(const T& m) {
  std::vector<uint8_t> v(sizeof m);
  std::memcpy(v.data(), &m, sizeof m);
  return v;
}
Hello hello() {
  auto h = make<Hello>(Type::hello);
  h.magic = kMagic;
  h.version = kVersion;
  return h;
}
}  // namespace

TEST_CASE("every message type decodes whole, and need-more for each prefix", "[proto]") {
  std::vector<std::vector<uint8_t>> all = {
      bytes_of(hello()),
      [] {
        auto w = make<Welcome>(Type::welcome);
        w.magic = kMagic;
        w.version = kVersion;
        return bytes_of(w);
      }(),
      bytes_of(make<Error>(Type::error)),
      bytes_of(make<Alloc>(Type::alloc)),
      bytes_of(make<Free>(Type::free)),
      bytes_of(make<Reply>(Type::reply)),
      bytes_of(make<Transfer>(Type::upload)),
      bytes_of(make<Transfer>(Type::download)),
      bytes_of(make<Completion>(Type::completion)),
      bytes_of(make<TicketFailed>(Type::ticket_failed)),
      bytes_of(make<StatusRequest>(Type::status_request)),
      bytes_of(make<StatusReply>(Type::status_reply)),
      bytes_of(make<Shutdown>(Type::shutdown)),
  };
  for (const auto& m : all) {
    Decoded d = decode(m.data(), m.size());
    CHECK(d.result == Decode::good);
    CHECK(d.consumed == m.size());
    for (size_t cut = 0; cut < m.size(); ++cut) {
      Decoded p = decode(m.data(), cut);
      CHECK(p.result == Decode::need_more);
      CHECK(p.consumed == 0);
    }
  }
}

TEST_CASE("two messages back to back: the decoder consumes exactly the first", "[proto]") {
  auto a = bytes_of(make<Completion>(Type::completion));
  auto b = bytes_of(make<Transfer>(Type::upload));
  a.insert(a.end(), b.begin(), b.end());
  Decoded d = decode(a.data(), a.size());
  REQUIRE(d.result == Decode::good);
  CHECK(d.type == Type::completion);
  CHECK(d.consumed == sizeof(Completion));
  Decoded e = decode(a.data() + d.consumed, a.size() - d.consumed);
  CHECK(e.result == Decode::good);
  CHECK(e.type == Type::upload);
}

TEST_CASE("bad input: unknown type, wrong size, wrong magic or version", "[proto]") {
  Header h{99, 0, 8};
  CHECK(decode(&h, sizeof h).result == Decode::bad);
  h = Header{0, 0, 8};
  CHECK(decode(&h, sizeof h).result == Decode::bad);

  auto up = make<Transfer>(Type::upload);
  up.h.size = sizeof up + 8;  // oversized
  CHECK(decode(&up, sizeof up).result == Decode::bad);
  up.h.size = 4;  // smaller than a header
  CHECK(decode(&up, sizeof up).result == Decode::bad);
  up.h.size = 0xffffffff;  // huge
  CHECK(decode(&up, sizeof up).result == Decode::bad);
  // A bad size is judged from the header alone, before the body arrives.
  CHECK(decode(&up, sizeof(Header)).result == Decode::bad);

  auto m = hello();
  m.magic = 0x12345678;
  CHECK(decode(&m, sizeof m).result == Decode::bad);
  m = hello();
  m.version = kVersion + 1;
  Decoded d = decode(&m, sizeof m);
  CHECK(d.result == Decode::bad);
  CHECK(std::string(d.why).find("version") != std::string::npos);

  std::vector<uint8_t> sr(sizeof(StatusReply) + 10);
  auto r = make<StatusReply>(Type::status_reply);
  r.json_bytes = 9;  // disagrees with the header's size
  r.h.size = static_cast<uint32_t>(sr.size());
  std::memcpy(sr.data(), &r, sizeof r);
  CHECK(decode(sr.data(), sr.size()).result == Decode::bad);
  r.json_bytes = 10;
  std::memcpy(sr.data(), &r, sizeof r);
  CHECK(decode(sr.data(), sr.size()).result == Decode::good);
  r.h.size = static_cast<uint32_t>(sizeof r + kMaxStatusJson + 1);
  CHECK(decode(&r, sizeof r).result == Decode::bad);
}

TEST_CASE("fixed text fields are always terminated", "[proto]") {
  char buf[8];
  set_text(buf, "a very long name");
  CHECK(std::string(buf) == "a very ");
  char raw[4] = {'a', 'b', 'c', 'd'};
  CHECK(get_text(raw) == "abcd");
}
