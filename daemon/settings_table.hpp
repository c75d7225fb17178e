// SPDX-License-Identifier: MIT
// ferryd's settings as a user writes them: each flag (and line of the
// configuration file) with its name, default and help text. Reading and
// checking them is settings.cpp's.
#pragma once

#include <boost/program_options/options_description.hpp>
#include <string>

#include "options.hpp"

namespace ferry::ferryd {

// The settings read as text before they are checked (sizes with units,
// octal modes, shares, levels), each starting from its default.
struct SettingTexts {
  std::string socket_mode, log_level = "info", user_memory, client_memory, user_staging = "auto";
  std::string slot_size, sim_memory, config;
};

// The two tables `ferryd --help` prints: the program's own flags (help,
// version, the configuration file), and the settings, which the
// configuration file may set too. Values go to *o and *t; every default is
// *o's own.
struct SettingsTable {
  SettingsTable(Options* o, SettingTexts* t);
  boost::program_options::options_description program;
  boost::program_options::options_description settings;
};

// What `ferryd --help` prints after the tables: the environment, the exit status.
extern const char* const kSettingsEpilogue;

}  // namespace ferry::ferryd
