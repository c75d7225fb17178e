// SPDX-License-Identifier: MIT
// ferry/cuda.h alone, as C++.
#include <ferry/cuda.h>
