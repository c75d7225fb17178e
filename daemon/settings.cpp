// SPDX-License-Identifier: MIT
// ferryd's settings: the command line and the configuration file, each
// checked, with the file and line of the first bad one (settings.hpp).
#include "settings.hpp"

#include <grp.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry/proto.hpp"
#include "ferry/wire.hpp"
#include "ferry/util/size.hpp"
#include "log.hpp"
#include "options.hpp"
#include "settings_table.hpp"
#include "startup.hpp"

namespace po = boost::program_options;

namespace {

// Where a refusal goes: stderr, as an error line journald files at priority
// err when ferryd runs under systemd.
std::ostream& err() {
  if (ferry::ferryd::log::priority_prefix()) std::cerr << "<3>";
  return std::cerr;
}

// A user or group a setting names, checked now (the daemon would fail to
// start, or start without the admins it was given, much later).
bool group_exists(const std::string& g) { return g.empty() || ::getgrnam(g.c_str()) != nullptr; }

}  // namespace

namespace ferry::ferryd {

namespace {

// Counts and sizes are unsigned: "-1" would wrap to 4294967295 unnoticed.
struct Negative : std::runtime_error {
  Negative(const std::string& k, const std::string& v)
      : std::runtime_error(k + " must not be negative (got " + v + ")"), key(k) {}
  std::string key;
};

void refuse_negative(const po::parsed_options& p) {
  for (const auto& opt : p.options)
    for (const auto& v : opt.value)
      if (!v.empty() && v[0] == '-' && opt.string_key != "log-level" && opt.string_key != "socket" &&
          opt.string_key != "config" && opt.string_key != "backend")
        throw Negative(opt.string_key, v);
}

int line_number(const std::string& at) {
  return at.rfind(':') == std::string::npos ? 0 : std::atoi(at.substr(at.rfind(':') + 1).c_str());
}

// One reading of the settings: the flags, then the file for what they left
// unset, then each value against its range. Settings that are not plain
// numbers (sizes, modes, levels) are read as text first and checked here.
class Reader {
 public:
  explicit Reader(Options* o);
  // -1 to go on serving, else the exit status (read_settings).
  int read(int argc, char** argv);

 private:
  int parse(int argc, char** argv);
  int refuse_parse(const std::exception& e);
  std::string line_of(const std::string& name) const;
  bool say_unknown(int before) const;
  int bad(const std::string& name, const std::string& rule) const;
  int check_staging();
  int check_shares();
  int check_user_memory();
  int check_service();
  int check_socket_mode();
  int check_logging();
  int check_backend();
  int check_groups();

  Options& o_;
  Limits& l_;
  SettingTexts t_;
  SettingsTable table_;
  po::variables_map vm_;
  std::string where_ = "command line";     // the configuration file, once one was read
  std::set<std::string> from_cmdline_;     // settings given as flags (they win over the file)
  std::vector<std::string> unknown_;       // keys of the file that name no setting
};

Reader::Reader(Options* o) : o_(*o), l_(o->limits), table_(o, &t_) {}

int Reader::read(int argc, char** argv) {
  if (int r = parse(argc, argv); r >= 0) return r;
  if (vm_.count("help")) {
    std::cout << table_.program << "\n" << table_.settings << kSettingsEpilogue;
    return 0;
  }
  if (vm_.count("version")) {
    std::cout << "ferryd " << FERRY_VERSION << "\n";
    return 0;
  }
  // In this order: with several bad settings, the first of it is said.
  for (int (Reader::*check)() : {&Reader::check_staging, &Reader::check_shares, &Reader::check_service,
                                 &Reader::check_socket_mode, &Reader::check_logging, &Reader::check_backend,
                                 &Reader::check_groups})
    if (int r = (this->*check)(); r >= 0) return r;
  if (say_unknown(0)) return 2;
  if (vm_.count("check-config")) {
    std::cout << "ferryd: settings valid (configuration file: " << (where_ == "command line" ? "none read" : where_)
              << "; device " << o_.device << ", backend " << (o_.sim ? "simulated level-zero" : o_.backend)
              << ", socket " << o_.socket << ")\n";
    return 0;
  }
  return -1;
}

// The flags, then the file for what they left unset: -1, or 2 after saying
// the first bad setting.
int Reader::parse(int argc, char** argv) {
  po::options_description all;
  all.add(table_.program).add(table_.settings);
  try {
    auto cmdline = po::parse_command_line(argc, argv, all);
    for (const auto& opt : cmdline.options) from_cmdline_.insert(opt.string_key);
    refuse_negative(cmdline);
    po::store(cmdline, vm_);
    const std::string path = vm_["config"].as<std::string>();
    std::ifstream in(path);
    if (in) {
      where_ = path;
      // Unknown keys are kept aside with their lines: a bad value on an
      // earlier line is said first (the first bad setting, in file order).
      auto file = po::parse_config_file(in, table_.settings, true);
      for (const auto& opt : file.options)
        if (opt.unregistered) unknown_.push_back(opt.string_key);
      refuse_negative(file);
      po::store(file, vm_);
    } else if (!vm_["config"].defaulted()) {
      err() << "ferryd: cannot read the configuration file " << path << "\n";
      return 2;
    }
    po::notify(vm_);
  } catch (const std::exception& e) {
    return refuse_parse(e);
  }
  return -1;
}

// A value the parser refused: said with the file and line that set it.
int Reader::refuse_parse(const std::exception& e) {
  std::string at = where_;
  if (where_ != "command line") {
    std::string name = e.what();
    if (auto* pe = dynamic_cast<const po::error_with_option_name*>(&e)) name = pe->get_option_name();
    if (auto* ne = dynamic_cast<const Negative*>(&e)) name = ne->key;
    while (!name.empty() && name[0] == '-') name.erase(0, 1);
    if (from_cmdline_.count(name) == 0) at = line_of(name);
  }
  if (at != "command line") say_unknown(line_number(at));
  err() << "ferryd: " << at << ": " << e.what() << "\n(try ferryd --help)\n";
  return 2;
}

// The line of the configuration file that sets `name`, as "file:line", or the file.
// The last one: a key given twice is refused at its second line.
std::string Reader::line_of(const std::string& name) const {
  std::ifstream again(where_);
  int n = 0, at = 0;
  for (std::string line; std::getline(again, line);) {
    ++n;
    const auto k = line.find_first_not_of(" \t");
    const auto eq = line.find('=', k == std::string::npos ? 0 : k);
    if (k == std::string::npos || name.empty() || eq == std::string::npos) continue;
    std::string key = line.substr(k, eq - k);
    key.erase(key.find_last_not_of(" \t") + 1);
    if (key == name) at = n;
  }
  return at != 0 ? where_ + ":" + std::to_string(at) : where_;
}

// The unknown keys of the file set before line `before` of it (all: 0),
// said as the refusal of a bad setting would be; whether there was one.
bool Reader::say_unknown(int before) const {
  bool any = false;
  for (const std::string& key : unknown_) {
    const std::string at = line_of(key);
    if (before != 0 && line_number(at) >= before) continue;
    err() << "ferryd: " << at << ": unknown setting \"" << key << "\" (ferryd --help lists them)\n";
    any = true;
  }
  return any;
}

// A setting out of its range: said with where it was set (file:line, or the command line).
int Reader::bad(const std::string& name, const std::string& rule) const {
  const bool in_file = where_ != "command line" && from_cmdline_.count(name) == 0 && !vm_[name].defaulted();
  const std::string at = in_file ? line_of(name) : std::string("command line");
  say_unknown(in_file ? line_number(at) : 0);  // those above it in the file, or all (a flag's is said first)
  err() << "ferryd: " << at << ": " << name << " " << rule << "\n";
  return 2;
}

// Each check: -1 when its settings are good, else the exit status.
int Reader::check_staging() {
  if (!ferry::util::parse_size(t_.slot_size, &o_.slot_bytes) || o_.slot_bytes < 4096 || o_.slot_bytes > (1ull << 30) ||
      o_.slot_bytes % 64 != 0) {
    return bad("slot-size", "must be a multiple of 64 between 4 KiB and 1 GiB, in bytes or with a unit such as 256K "
                            "or 1M (got \"" + t_.slot_size + "\")");
  }
  if (!ferry::util::parse_size(t_.sim_memory, &o_.sim_memory))
    return bad("sim-memory", "must be a size, in bytes or with a unit such as 4G (got \"" + t_.sim_memory + "\")");
  if (o_.slots < 1 || o_.slots > 4096) return bad("slots", "must be between 1 and 4096");
  if (uint64_t{o_.slots} * o_.slot_bytes > ferry::proto::kStagingAlign << 32)
    return bad("slots", "times slot-size must be at most 256 GiB (a client's staging area)");
  return -1;
}

// What one user may take: of the clients, the device's memory, the host's staging.
int Reader::check_shares() {
  if (l_.max_connections == 0) l_.max_connections = l_.max_clients + 64;
  if (l_.user_share < 1 || l_.user_share > 100) return bad("user-share", "must be a percentage from 1 to 100");
  if (int r = check_user_memory(); r >= 0) return r;
  if (!ferry::ferryd::parse_staging_bound(t_.user_staging, &l_.user_staging))
    return bad("user-staging", "must be a size (bytes, or with a unit: 512M, 2 GiB) or auto (got \"" + t_.user_staging +
                                   "\")");
  return -1;
}

int Reader::check_service() {
  if (o_.segment_pool > 64) return bad("segment-pool", "must be between 0 and 64");
  if (o_.poll_nap_us > 50) return bad("poll-nap-us", "must be between 0 and 50");
  if (o_.poll_idle_us > 1'000'000) return bad("poll-idle-us", "must be between 0 and 1000000");
  if (o_.hello_seconds <= 0 || o_.hello_seconds > 3600)
    return bad("hello-timeout", "must be above 0 and at most 3600 seconds");
  if (l_.max_clients < 1) return bad("max-clients", "must be at least 1");
  return -1;
}

// Bytes, or a share of the device's memory ("50%"), resolved once the device is open.
int Reader::check_user_memory() {
  char* end = nullptr;
  const bool old_name = !t_.client_memory.empty() && vm_["user-memory"].defaulted();
  const std::string& cm = old_name ? t_.client_memory : t_.user_memory;
  const char* const name = old_name ? "client-memory" : "user-memory";
  errno = 0;
  const unsigned long long v = std::strtoull(cm.c_str(), &end, 10);
  const bool percent = end != nullptr && end != cm.c_str() && std::string(end) == "%" && cm[0] != '-' && errno == 0;
  uint64_t bytes = 0;
  if (percent ? v > 100 : !ferry::util::parse_size(cm, &bytes)) {
    return bad(name, "must be a size (bytes, or with a unit: 256M, 8 GiB) or a share from 0% to 100%, such as 50% "
                     "(got \"" + cm + "\")");
  }
  l_.user_memory = percent ? 0 : bytes;
  l_.user_memory_percent = percent ? static_cast<uint32_t>(v) : 0;
  return -1;
}

int Reader::check_socket_mode() {
  char* end = nullptr;
  o_.socket_mode = static_cast<unsigned>(std::strtoul(t_.socket_mode.c_str(), &end, 8));
  if (*end != '\0' || o_.socket_mode > 0777)
    return bad("socket-mode", "must be octal permissions from 0000 to 0777, e.g. 0660");
  // Given (on the command line or in the file): applied to a socket handed
  // over by activation too, not only to one ferryd makes.
  o_.socket_perms_given = !vm_["socket-mode"].defaulted() || vm_.count("socket-group") != 0;
  return -1;
}

int Reader::check_groups() {
  if (o_.socket.empty()) o_.socket = ferry::proto::socket_path_from_env(o_.device);
  for (const char* name : {"socket-group", "admin-group"}) {
    const std::string& g = std::string(name) == "socket-group" ? o_.socket_group : o_.admin_group;
    if (!group_exists(g)) return bad(name, "names a group this host does not have: \"" + g + "\" (getent group " + g + ")");
  }
  return -1;
}

int Reader::check_logging() {
  static const char* const kLevels[] = {"error", "warn", "info", "debug"};
  bool level_ok = false;
  for (int i = 0; i < 4; ++i)
    if (t_.log_level == kLevels[i]) log::threshold() = static_cast<log::Level>(i), level_ok = true;
  if (!level_ok) return bad("log-level", "must be error, warn, info or debug (got \"" + t_.log_level + "\")");
  if (vm_.count("verbose") && vm_.count("quiet")) {
    err() << "ferryd: -v and -q contradict each other\n";
    return 2;
  }
  if (vm_.count("verbose")) log::threshold() = log::Level::debug;
  if (vm_.count("quiet")) log::threshold() = log::Level::warn;
  return -1;
}

int Reader::check_backend() {
  if (o_.backend != "level-zero" && o_.backend != "ze" && o_.backend != "cuda")
    return bad("backend", "must be level-zero or cuda (got \"" + o_.backend + "\")");
  if (o_.backend == "ze") o_.backend = "level-zero";
  if (o_.sim && o_.backend != "level-zero") {
    err() << "ferryd: --sim is a Level Zero device; it cannot be combined with --backend " << o_.backend << "\n";
    return 2;
  }
  return -1;
}

}  // namespace

int read_settings(int argc, char** argv, Options* out) { return Reader(out).read(argc, argv); }

}  // namespace ferry::ferryd
