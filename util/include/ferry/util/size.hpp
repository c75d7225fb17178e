// SPDX-License-Identifier: MIT
// Sizes as people write them, the way systemd and ulimit users do: a number
// of bytes, or one with a unit to the base of 1024 (K, M, G, T, with or
// without "iB", lower or upper case, a space before it or not, a fraction
// allowed: "256M", "256 MiB", "1.5G"), and printed so that what is printed
// reads back (format_size: "256 MiB", "1.5 GiB", "4096 B").
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ferry::util {

// *out = the bytes `text` names. False for anything else (a negative
// number, an unknown unit, past 2^64, a fraction of a byte).
inline bool parse_size(const std::string& text, uint64_t* out) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const size_t start = i;
  while (i < n && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number = text.substr(start, i - start);
  if (number.empty() || number.find('.') != number.rfind('.') || number == ".") return false;
  while (i < n && text[i] == ' ') ++i;
  std::string unit = text.substr(i);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
  int shift = 0;
  if (!unit.empty()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    const std::string rest = unit.substr(1);
    shift = u == 'B' && rest.empty() ? 0 : u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : u == 'T' ? 40 : -1;
    // "GB" is refused: a reader cannot tell whether 10^9 or 2^30 was meant.
    if (shift < 0 || (u != 'B' && !(rest.empty() || rest == "iB" || rest == "ib"))) return false;
  }
  const bool fraction = number.find('.') != std::string::npos;
  if (!fraction) {
    uint64_t v = 0;
    for (char c : number) {
      if (v > (UINT64_MAX - 9) / 10) return false;
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (shift != 0 && v > (UINT64_MAX >> shift)) return false;
    *out = v << shift;
    return true;
  }
  const long double v = std::strtold(number.c_str(), nullptr) * std::ldexp(1.0L, shift);
  if (!(v >= 0) || v >= 18446744073709551616.0L || v != std::floor(v)) return false;
  *out = static_cast<uint64_t>(v);
  return true;
}

// `bytes` in the largest unit that leaves at most one decimal, exactly when
// it can be ("256 MiB", "1.5 GiB"), else rounded to one decimal ("1.3 GiB").
inline std::string format_size(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (u < 6 && bytes >= (uint64_t{1} << (10 * (u + 1)))) ++u;
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    return buf;
  }
  const uint64_t unit = uint64_t{1} << (10 * u);
  if (bytes % unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(bytes / unit), kUnits[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", static_cast<double>(bytes) / static_cast<double>(unit), kUnits[u]);
  }
  return buf;
}

}  // namespace ferry::util
