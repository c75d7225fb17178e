// SPDX-License-Identifier: MIT
// Compiles each public header alone, as C++.
#include <ferry/ferry.hpp>
#include <ferry/sim.h>
