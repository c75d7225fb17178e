/* SPDX-License-Identifier: MIT */
/* ferry/level_zero.h alone, as C11. */
#include <ferry/level_zero.h>
