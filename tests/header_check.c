/* SPDX-License-Identifier: MIT */
/* Compiles each public header alone, as C11. */
#include <ferry/ferry.h>
#include <ferry/sim.h>
