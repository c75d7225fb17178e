// SPDX-License-Identifier: MIT
// The decoder: every message, truncated, oversized and wrong-version input.
#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <vector>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ferry/proto.hpp"
#include "ferry/wire.hpp"

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
      bytes_of(make<StatusRequest>(Type::status_request)),
      bytes_of(make<StatusReply>(Type::status_reply)),
      bytes_of(make<Shutdown>(Type::shutdown)),
      bytes_of(make<Grant>(Type::grant)),
      bytes_of(make<Revoke>(Type::revoke)),
      bytes_of(make<Open>(Type::open)),
      bytes_of(make<TokenReply>(Type::token_reply)),
      bytes_of(make<BufferReply>(Type::buffer_reply)),
      bytes_of(make<Export>(Type::export_buffer)),
      bytes_of(make<ExportReply>(Type::export_reply)),
      bytes_of(make<Import>(Type::import_buffer)),
      bytes_of(make<EventPool>(Type::event_pool)),
      bytes_of(make<AdminRequest>(Type::admin_request)),
      bytes_of(make<StagingGrow>(Type::staging_grow)),
      bytes_of(make<StagingReply>(Type::staging_reply)),
      bytes_of(make<StagingRelease>(Type::staging_release)),
  };
  // The list names every message type there is, each once; the numbers
  // between are the ring entry kinds and protocol 2's timeline messages.
  const std::set<uint16_t> not_messages = {
      static_cast<uint16_t>(Type::upload),        static_cast<uint16_t>(Type::download),
      static_cast<uint16_t>(Type::completion),    static_cast<uint16_t>(Type::ticket_failed),
      static_cast<uint16_t>(Type::upload_signal), static_cast<uint16_t>(Type::upload_after),
      static_cast<uint16_t>(Type::upload_fenced), static_cast<uint16_t>(Type::doorbell)};
  std::set<uint16_t> seen;
  for (const auto& m : all) {
    Header h;
    std::memcpy(&h, m.data(), sizeof h);
    seen.insert(h.type);
  }
  CHECK(seen.size() == all.size());
  CHECK(seen.size() + not_messages.size() == static_cast<size_t>(kLastType));
  for (uint16_t t = 1; t <= static_cast<uint16_t>(kLastType); ++t) {
    CHECK((seen.count(t) + not_messages.count(t)) == 1);
    // A transfer as a message is refused as no message of protocol 3 at all.
    if (not_messages.count(t) != 0) {
      CHECK(fixed_size(static_cast<Type>(t)) == 0);
      Header h{t, 0, 48};
      CHECK(decode(&h, sizeof h).result == Decode::bad);
    }
  }
  CHECK(fixed_size(static_cast<Type>(static_cast<uint16_t>(kLastType) + 1)) == 0);
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
  auto a = bytes_of(make<Free>(Type::free));
  auto b = bytes_of(make<Alloc>(Type::alloc));
  a.insert(a.end(), b.begin(), b.end());
  Decoded d = decode(a.data(), a.size());
  REQUIRE(d.result == Decode::good);
  CHECK(d.type == Type::free);
  CHECK(d.consumed == sizeof(Free));
  Decoded e = decode(a.data() + d.consumed, a.size() - d.consumed);
  CHECK(e.result == Decode::good);
  CHECK(e.type == Type::alloc);
}

TEST_CASE("bad input: unknown type, wrong size, wrong magic or version", "[proto]") {
  Header h{99, 0, 8};
  CHECK(decode(&h, sizeof h).result == Decode::bad);
  h = Header{0, 0, 8};
  CHECK(decode(&h, sizeof h).result == Decode::bad);

  auto up = make<Alloc>(Type::alloc);
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
  // A Hello of another version decodes (the daemon answers it with the
  // rule); a Welcome of another version does not.
  m = hello();
  m.version = kVersion - 1;
  CHECK(decode(&m, sizeof m).result == Decode::good);
  auto w = make<Welcome>(Type::welcome);
  w.magic = kMagic;
  w.version = kVersion + 1;
  Decoded d = decode(&w, sizeof w);
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

namespace {
// A connected pair of Unix stream sockets, closed at scope exit.
struct Pair {
  int fd[2] = {-1, -1};
  Pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) == 0); }
  ~Pair() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
};

// Descriptors this process has open.
int open_fds() {
  int n = 0;
  for (int f = 0; f < 1024; ++f)
    if (::fcntl(f, F_GETFD) >= 0) ++n;
  return n;
}
}  // namespace

TEST_CASE("wire: whole messages, with their descriptors, through read_message", "[proto][wire]") {
  Pair p;
  auto w = make<Welcome>(Type::welcome);
  w.magic = kMagic;
  w.version = kVersion;
  w.slot_count = 5;
  int dn = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(dn >= 0);
  REQUIRE(send_fd(p.fd[0], &w, sizeof w, dn, 0) == static_cast<ssize_t>(sizeof w));
  ::close(dn);
  auto c = make<Reply>(Type::reply);
  c.value = 42;
  // Byte by byte: the reader must assemble it.
  for (size_t i = 0; i < sizeof c; ++i) REQUIRE(send_all(p.fd[0], reinterpret_cast<char*>(&c) + i, 1) == 0);

  std::vector<uint8_t> msg;
  std::vector<int> fds;
  REQUIRE(read_message(p.fd[1], msg, &fds) == 0);
  CHECK(type_of(msg) == Type::welcome);
  Welcome got{};
  REQUIRE(as(msg, &got));
  CHECK(got.slot_count == 5);
  REQUIRE(fds.size() == 1);
  CHECK(::fcntl(fds[0], F_GETFD) >= 0);
  ::close(fds[0]);
  REQUIRE(read_message(p.fd[1], msg) == 0);
  Reply k{};
  REQUIRE(as(msg, &k));
  CHECK(k.value == 42);
  CHECK_FALSE(as(msg, &got));  // too short to be a Welcome
}

TEST_CASE("wire: bad bytes, a cut-off stream and too many descriptors are errors", "[proto][wire]") {
  std::vector<uint8_t> msg;
  SECTION("a header no message has") {
    Pair p;
    Header h{99, 0, 8};
    REQUIRE(send_all(p.fd[0], &h, sizeof h) == 0);
    CHECK(read_message(p.fd[1], msg) == -EPROTO);
  }
  SECTION("the stream ends inside a message") {
    Pair p;
    auto t = make<Alloc>(Type::alloc);
    REQUIRE(send_all(p.fd[0], &t, sizeof t - 1) == 0);
    ::shutdown(p.fd[0], SHUT_WR);
    CHECK(read_message(p.fd[1], msg) == -ECONNRESET);
  }
  SECTION("more descriptors than a message can carry: cut off (MSG_CTRUNC), none leaked") {
    Pair p;
    const int before = open_fds();
    int many[8];
    for (int& f : many) f = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    auto s = make<StatusRequest>(Type::status_request);
    REQUIRE(send_fds(p.fd[0], &s, sizeof s, many, 8, 0) == static_cast<ssize_t>(sizeof s));
    for (int f : many) ::close(f);
    std::vector<int> fds;
    CHECK(read_message(p.fd[1], msg, &fds) == -EPROTO);
    CHECK(fds.empty());
    CHECK(open_fds() == before);
  }
}

TEST_CASE("wire: the default socket path, and $FERRY_SOCKET over it", "[proto][wire]") {
  CHECK(default_socket_path(3) == "/run/ferry/ferryd-3.sock");
  ::unsetenv("FERRY_SOCKET");
  CHECK(socket_path_from_env(1) == "/run/ferry/ferryd-1.sock");
  ::setenv("FERRY_SOCKET", "", 1);
  CHECK(socket_path_from_env() == "/run/ferry/ferryd-0.sock");
  ::setenv("FERRY_SOCKET", "/tmp/x.sock", 1);
  CHECK(socket_path_from_env(1) == "/tmp/x.sock");
  ::unsetenv("FERRY_SOCKET");
}

TEST_CASE("ring entries: write_entry packs what read_entry unpacks, in the layout proto.hpp gives", "[proto][ring]") {
  SubmitEntry e{};
  Transfer t;
  t.kind = Type::upload_fenced;
  t.flags = kTransferLastPiece;
  t.staging = uint64_t{UINT32_MAX} * kStagingAlign;  // the farthest a ring entry can say
  t.length = 4096;
  t.buffer = 7;
  t.offset = 1ull << 40;
  t.after = 3;
  t.pool = 5;
  t.event = 9;
  write_entry(e, 42, t);
  CHECK(e.ticket.load() == 42);
  // kind | flags << 16 | staging / kStagingAlign << 32, as a raw client writes it.
  CHECK(e.type.load() == (static_cast<uint64_t>(Type::upload_fenced) | uint64_t{kTransferLastPiece} << 16 |
                          uint64_t{UINT32_MAX} << 32));
  const Transfer r = read_entry(e);
  CHECK(r.kind == t.kind);
  CHECK(r.flags == t.flags);
  CHECK(r.staging == t.staging);
  CHECK(r.length == t.length);
  CHECK(r.buffer == t.buffer);
  CHECK(r.offset == t.offset);
  CHECK(r.after == t.after);
  CHECK(r.pool == t.pool);
  CHECK(r.event == t.event);
  // A word a hostile client wrote: every bit reaches the checks, none is lost.
  e.type.store(0xffffffffffffffffull);
  const Transfer h = read_entry(e);
  CHECK(static_cast<uint64_t>(h.kind) == 0xffff);
  CHECK(h.flags == 0xffff);
  CHECK(h.staging == uint64_t{UINT32_MAX} * kStagingAlign);
}
