// SPDX-License-Identifier: MIT
// ferryctl's parts (tools/ferryctl.cpp: the commands): asking a ferryd and
// reading its status document (ferryctl_doc.cpp), the status and watch
// screens (ferryctl_text.cpp), the Prometheus exposition
// (ferryctl_metrics.cpp).
#pragma once

#include <boost/json.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ferry/proto.hpp"

namespace ferry::ctl {

enum Exit { kOk = 0, kDaemonError = 1, kUsage = 2, kNoConnect = 3, kOutput = 4 };

// ---- asking a daemon (ferryctl_doc.cpp)
// One request, one reply. Returns an Exit code; quiet: no message on stderr.
int ask(const std::string& path, const void* req, size_t n, proto::Type want, std::vector<uint8_t>* reply,
        double* rtt_us = nullptr, bool quiet = false);
// The status document of the daemon at path, parsed.
int fetch_status(const std::string& path, boost::json::object* doc, double* rtt_us = nullptr, bool quiet = false);

// ---- reading the document by dotted path ("totals.uploads"); absent: 0, "?" or empty
const boost::json::value* at(const boost::json::object& o, const char* path);
unsigned long long count(const boost::json::value& v);
unsigned long long num(const boost::json::object& o, const char* path);
std::string str(const boost::json::object& o, const char* path, const char* dflt = "?");
bool flag(const boost::json::object& o, const char* path);
const boost::json::array& array_at(const boost::json::object& o, const char* path);
const boost::json::array& clients(const boost::json::object& o);

// ---- the screens (ferryctl_text.cpp)
void print_status(const boost::json::object& d);
// What watch saw of a daemon last time, for rates over the interval.
struct Seen {
  std::chrono::steady_clock::time_point at;
  unsigned long long pid = 0, uploads = 0, bytes = 0;
  std::map<unsigned long long, std::pair<unsigned long long, unsigned long long>> clients;  // id: uploads, bytes
};
// The watch screen: at most 80 columns; at most `rows` lines (0: no limit),
// the header first, then as many client rows as fit. Returns the lines used.
int print_watch(const std::string& socket, const boost::json::object& d, Seen* seen, int rows);

// ---- metrics (ferryctl_metrics.cpp)
// Families by name, samples of every daemon asked: one HELP/TYPE per family,
// so the exposition of several daemons is one valid document.
struct Family {
  std::string type, help;
  std::vector<std::string> samples;  // "name{labels} value"
};
using Families = std::map<std::string, Family>;
void add_metrics(Families& f, const boost::json::object& d, bool per_client);
void add_up(Families& f, const std::string& sock, const boost::json::object* d, const char* reason);
bool running(const std::string& sock);
std::string exposition(const Families& f);
int write_atomically(const std::string& path, const std::string& text);

}  // namespace ferry::ctl
