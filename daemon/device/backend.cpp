// SPDX-License-Identifier: MIT
#include "device/backend.hpp"

#include <cstdio>

namespace ferry::ferryd {

std::string format_uuid(const unsigned char (&id)[16], const char* prefix) {
  char out[64];
  std::snprintf(out, sizeof out, "%s%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix, id[0],
                id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11], id[12], id[13], id[14],
                id[15]);
  return out;
}

std::string format_pci_bus_id(unsigned domain, unsigned bus, unsigned device, unsigned function) {
  char out[32];
  std::snprintf(out, sizeof out, "%08X:%02X:%02X.%X", domain, bus & 0xffu, device & 0xffu, function & 0xfu);
  return out;
}

}  // namespace ferry::ferryd
