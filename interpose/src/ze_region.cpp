// SPDX-License-Identifier: MIT
#include "ze_region.hpp"

#include <algorithm>

#include "ze_shim.hpp"

namespace ferry::run {

namespace {
constexpr unsigned __int128 kLimit = uint64_t{1} << 48;

// A 2-D region (depth 0: the slice pitches are not read).
ze_copy_region_t rows_of(uint64_t width, uint64_t rows) {
  return ze_copy_region_t{0, 0, 0, static_cast<uint32_t>(width), static_cast<uint32_t>(rows), 0};
}

// Rows y0 .. y0 + k - 1 of slice z, whole, from `from`.
ze_result_t whole_rows(ze_command_list_handle_t list, const RegionCopy& r, uint64_t z, uint64_t y0, uint64_t k,
                       const char* from) {
  if (k == 1) return real().list.pfnAppendMemoryCopy(list, r.dst_row(z, y0), from, r.width, nullptr, 0, nullptr);
  const ze_copy_region_t d = rows_of(r.width, k), s = rows_of(r.width, k);
  return real().list.pfnAppendMemoryCopyRegion(list, r.dst_row(z, y0), &d, static_cast<uint32_t>(r.dst_pitch), 0, from,
                                               &s, static_cast<uint32_t>(r.pitch), 0, nullptr, 0, nullptr);
}
}  // namespace

bool region_copy(void* dst, const ze_copy_region_t* dr, uint32_t dst_pitch, uint32_t dst_slice,
                 const ze_copy_region_t* sr, uint32_t src_pitch, uint32_t src_slice, RegionCopy* out) {
  if (dst == nullptr || dr == nullptr || sr == nullptr) return false;
  const uint64_t depth = std::max(1u, sr->depth);
  if (dr->width != sr->width || dr->height != sr->height || std::max(1u, dr->depth) != depth) return false;
  if (sr->width == 0 || sr->height == 0) return false;
  // A row runs past its pitch, or (3-D) a slice past its slice pitch: the
  // driver's to refuse, so that ferry accepts nothing it would not.
  if (uint64_t{sr->originX} + sr->width > src_pitch || uint64_t{dr->originX} + dr->width > dst_pitch) return false;
  if (depth > 1 && (uint64_t{src_pitch} * (uint64_t{sr->originY} + sr->height) > src_slice ||
                    uint64_t{dst_pitch} * (uint64_t{dr->originY} + dr->height) > dst_slice))
    return false;
  RegionCopy r;
  r.width = sr->width;
  r.height = sr->height;
  r.depth = depth;
  r.depth_given = sr->depth;
  r.pitch = src_pitch;
  r.slice = src_slice;
  const unsigned __int128 start = static_cast<unsigned __int128>(sr->originZ) * src_slice +
                                  static_cast<unsigned __int128>(sr->originY) * src_pitch + sr->originX;
  const unsigned __int128 span = static_cast<unsigned __int128>(depth - 1) * src_slice +
                                 static_cast<unsigned __int128>(r.height - 1) * src_pitch + r.width;
  if (start >= kLimit || span >= kLimit) return false;
  r.start = static_cast<uint64_t>(start);
  r.span = static_cast<uint64_t>(span);
  r.dst = static_cast<char*>(dst);
  r.dst_x = dr->originX;
  r.dst_y = dr->originY;
  r.dst_z = dr->originZ;
  r.dst_pitch = dst_pitch;
  r.dst_slice = dst_slice;
  *out = r;
  return true;
}

ze_result_t append_rows(ze_command_list_handle_t list, const RegionCopy& r, uint64_t off, const char* staging,
                        uint64_t n) {
  const uint64_t end = off + n;
  const uint64_t first_z = r.depth > 1 ? std::min(off / r.slice, r.depth - 1) : 0;
  for (uint64_t z = first_z; z < r.depth && r.row(z, 0) < end; ++z) {
    const uint64_t base = r.row(z, 0);
    uint64_t y = off > base ? (off - base) / r.pitch : 0;
    uint64_t run = 0, run_from = 0;  // whole rows waiting to go as one copy
    auto flush = [&]() -> ze_result_t {
      if (run == 0) return ZE_RESULT_SUCCESS;
      const ze_result_t e = whole_rows(list, r, z, run_from, run, staging + (r.row(z, run_from) - off));
      run = 0;
      return e;
    };
    for (; y < r.height && r.row(z, y) < end; ++y) {
      const uint64_t from = r.row(z, y), to = from + r.width;
      if (to <= off) continue;  // in the gap before off
      const uint64_t a = std::max(from, off), b = std::min(to, end);
      if (a == from && b == to) {
        if (run == 0) run_from = y;
        ++run;
        continue;
      }
      // A row a piece's edge cuts: its part, on its own.
      if (ze_result_t e = flush(); e != ZE_RESULT_SUCCESS) return e;
      if (ze_result_t e = real().list.pfnAppendMemoryCopy(list, r.dst_row(z, y) + (a - from), staging + (a - off),
                                                          b - a, nullptr, 0, nullptr);
          e != ZE_RESULT_SUCCESS)
        return e;
    }
    if (ze_result_t e = flush(); e != ZE_RESULT_SUCCESS) return e;
  }
  return ZE_RESULT_SUCCESS;
}

ze_result_t append_region(ze_command_list_handle_t list, const RegionCopy& r, const char* staging,
                          ze_event_handle_t signal, uint32_t waits, ze_event_handle_t* wait_events) {
  const ze_copy_region_t d{static_cast<uint32_t>(r.dst_x), static_cast<uint32_t>(r.dst_y),
                           static_cast<uint32_t>(r.dst_z), static_cast<uint32_t>(r.width),
                           static_cast<uint32_t>(r.height), r.depth_given};
  const ze_copy_region_t s = {0, 0, 0, static_cast<uint32_t>(r.width), static_cast<uint32_t>(r.height), r.depth_given};
  return real().list.pfnAppendMemoryCopyRegion(list, r.dst, &d, static_cast<uint32_t>(r.dst_pitch),
                                               static_cast<uint32_t>(r.dst_slice), staging, &s,
                                               static_cast<uint32_t>(r.pitch), static_cast<uint32_t>(r.slice), signal,
                                               waits, wait_events);
}

}  // namespace ferry::run
