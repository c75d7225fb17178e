/* SPDX-License-Identifier: MIT */
/* ferry/cuda.h alone, as C11. */
#include <ferry/cuda.h>
