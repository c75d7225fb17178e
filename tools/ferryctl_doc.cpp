// SPDX-License-Identifier: MIT
// Asking a ferryd, and reading its status document (ferryctl.hpp).
#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ferry/util/files.hpp"
#include "ferry/proto.hpp"
#include "ferry/util/size.hpp"
#include "ferry/wire.hpp"

#include "ferryctl.hpp"

namespace proto = ferry::proto;
namespace util = ferry::util;
namespace json = boost::json;

namespace ferry::ctl {

// ---------------------------------------------------------------- the wire
static std::string cause(int err, const std::string& path) {
  switch (err) {
    case -ENOENT: return "no socket there: is ferryd running, and with this --socket or --device?";
    case -ETIMEDOUT: return "it accepts no connection (its backlog is full): ferryd is stuck or overloaded";
    case -ECONNREFUSED: return "nothing accepts on it: ferryd is not running (stale socket file)";
    case -EACCES:
    case -EPERM: return proto::access_refusal(path);
    default: return std::strerror(-err);
  }
}

// One request, one reply. Returns an Exit code; quiet: no message on stderr.
int ask(const std::string& path, const void* req, size_t n, proto::Type want, std::vector<uint8_t>* reply,
        double* rtt_us, bool quiet) {
  int fd = -1;
  // A daemon whose backlog is full must not hang ferryctl (nor the metrics timer).
  if (int r = proto::connect_unix(path, &fd, 5000); r != 0) {
    if (!quiet) std::fprintf(stderr, "ferryctl: cannot connect to %s: %s\n", path.c_str(), cause(r, path).c_str());
    return kNoConnect;
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const auto t0 = std::chrono::steady_clock::now();
  const bool ok = proto::send_all(fd, req, n) == 0 && proto::read_message(fd, *reply) == 0;
  const auto t1 = std::chrono::steady_clock::now();
  ::close(fd);
  proto::Error e{};
  if (ok && proto::type_of(*reply) == proto::Type::error && proto::as(*reply, &e)) {
    if (!quiet) std::fprintf(stderr, "ferryctl: %s refused: %s\n", path.c_str(), proto::get_text(e.text).c_str());
    return kDaemonError;
  }
  if (!ok || proto::type_of(*reply) != want) {
    if (!quiet) std::fprintf(stderr, "ferryctl: no valid answer from %s\n", path.c_str());
    return kDaemonError;
  }
  if (rtt_us != nullptr) *rtt_us = std::chrono::duration<double, std::micro>(t1 - t0).count();
  return kOk;
}

// The status document of the daemon at path, parsed.
int fetch_status(const std::string& path, json::object* doc, double* rtt_us, bool quiet) {
  auto req = proto::make<proto::StatusRequest>(proto::Type::status_request);
  req.request = 1;
  std::vector<uint8_t> msg;
  if (int r = ask(path, &req, sizeof req, proto::Type::status_reply, &msg, rtt_us, quiet); r != kOk) return r;
  boost::system::error_code ec;
  json::value v = json::parse(std::string(msg.begin() + sizeof(proto::StatusReply), msg.end()), ec);
  if (ec || !v.is_object()) {
    if (!quiet) std::fprintf(stderr, "ferryctl: unreadable status from %s: %s\n", path.c_str(), ec.message().c_str());
    return kDaemonError;
  }
  *doc = std::move(v.as_object());
  return kOk;
}

// ---------------------------------------------------------------- the document
const json::value* at(const json::object& o, const char* path) {
  const json::object* cur = &o;
  std::string p = path;
  for (size_t start = 0;;) {
    const size_t dot = p.find('.', start);
    const auto* v = cur->if_contains(p.substr(start, dot - start));
    if (v == nullptr) return nullptr;
    if (dot == std::string::npos) return v;
    if (!v->is_object()) return nullptr;
    cur = &v->as_object();
    start = dot + 1;
  }
}

// A count in the document: a non-negative integer, 0 for anything else.
unsigned long long count(const json::value& v) {
  if (v.is_uint64()) return v.as_uint64();
  if (v.is_int64()) return static_cast<unsigned long long>(std::max<int64_t>(0, v.as_int64()));
  return 0;
}

unsigned long long num(const json::object& o, const char* path) {
  const json::value* v = at(o, path);
  return v == nullptr ? 0 : count(*v);
}

std::string str(const json::object& o, const char* path, const char* dflt) {
  const json::value* v = at(o, path);
  if (v == nullptr || v->is_null()) return dflt;
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_bool()) return v->as_bool() ? "yes" : "no";
  return json::serialize(*v);
}

bool flag(const json::object& o, const char* path) {
  const json::value* v = at(o, path);
  return v != nullptr && v->is_bool() && v->as_bool();
}

const json::array& array_at(const json::object& o, const char* path) {
  static const json::array kNone;
  const json::value* v = at(o, path);
  return v != nullptr && v->is_array() ? v->as_array() : kNone;
}

const json::array& clients(const json::object& o) { return array_at(o, "clients"); }

}  // namespace ferry::ctl
