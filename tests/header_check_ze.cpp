// SPDX-License-Identifier: MIT
// ferry/level_zero.h alone, as C++.
#include <ferry/level_zero.h>
