// SPDX-License-Identifier: MIT
// ferryd's settings, read once at start: the command line, then the
// configuration file for what the flags left unset (INI, `name = value`),
// each setting checked against its range. A bad one is said with where it
// was set (file:line, or the command line): the first in the file's order,
// unknown keys included.
#pragma once

#include "options.hpp"

namespace ferry::ferryd {

// Fills *o (and the log's threshold). Returns -1 to go on serving, else the
// exit status: 0 after --help, --version or a good --check-config, 2 for a
// bad setting (said on stderr).
int read_settings(int argc, char** argv, Options* o);

}  // namespace ferry::ferryd
