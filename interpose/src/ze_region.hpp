// SPDX-License-Identifier: MIT
// Level Zero region copies (zeCommandListAppendMemoryCopyRegion) with a
// pageable source, staged as one span: the bytes from the first one the
// copy reads to the last, gaps between rows included, laid out in staging
// as in the source. The device then copies the same rows from staging,
// with the source's own pitches: one region copy from a block of its own
// (a regular list), or, from pieces of the direct-upload staging (an
// immediate list), the part of each row a piece holds: a region copy for
// the whole rows of a slice, a plain copy for a row cut by a piece's edge.
#pragma once

#include <level_zero/ze_api.h>

#include <cstdint>

namespace ferry::run {

struct RegionCopy {
  // The rows: width bytes, height rows a slice, depth slices (at least 1).
  uint64_t width = 0, height = 0, depth = 1;
  uint32_t depth_given = 0;  // the regions' depth as the program gave it (0: a 2-D copy)
  // The source's pitches, and where its first row starts from its pointer.
  uint64_t pitch = 0, slice = 0, start = 0;
  // Bytes from the first byte read to the last, inclusive.
  uint64_t span = 0;
  // The destination: pointer, origin and pitches, as the program gave them.
  char* dst = nullptr;
  uint64_t dst_x = 0, dst_y = 0, dst_z = 0, dst_pitch = 0, dst_slice = 0;

  // Where row (z, y) starts in the span, and where it lands.
  uint64_t row(uint64_t z, uint64_t y) const { return z * slice + y * pitch; }
  char* dst_row(uint64_t z, uint64_t y) const {
    return dst + (dst_z + z) * dst_slice + (dst_y + y) * dst_pitch + dst_x;
  }
};

// The program's region copy as a span of rows, or false when ferry leaves
// it to the driver: no region, regions of different shapes, nothing to copy,
// a row past its pitch or (3-D) a slice past its slice pitch on either side
// (so slices never overlap), sizes past 2^48.
bool region_copy(void* dst, const ze_copy_region_t* dr, uint32_t dst_pitch, uint32_t dst_slice,
                 const ze_copy_region_t* sr, uint32_t src_pitch, uint32_t src_slice, RegionCopy* out);

// Appends to `list` the copies of the rows that bytes [off, off + n) of the
// span hold, from `staging` (those bytes): 0, or the driver's refusal.
ze_result_t append_rows(ze_command_list_handle_t list, const RegionCopy& r, uint64_t off, const char* staging,
                        uint64_t n);

// Appends one region copy of every row from `staging` (the whole span).
ze_result_t append_region(ze_command_list_handle_t list, const RegionCopy& r, const char* staging,
                          ze_event_handle_t signal, uint32_t waits, ze_event_handle_t* wait_events);

}  // namespace ferry::run
