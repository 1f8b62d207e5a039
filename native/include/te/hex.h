// An address or size as error messages show it: "0x1f00".
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace te {

inline std::string hex(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace te
