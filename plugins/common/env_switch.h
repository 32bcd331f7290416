// A GPU plugin's on/off environment switch (TESSERA_OPENCL_WGMMA, TESSERA_VULKAN_PTX).
#pragma once

#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "tessera/errors.h"

namespace tessera::common {

// The switch |variable|: unset, empty or 1 is on, 0 off. Any other value throws ConfigError
// naming the variable, the value and what 0 does (|zero_means|), so that a typo never silently
// runs the other path.
inline bool env_switch(const char* variable, std::string_view zero_means) {
  const char* env = std::getenv(variable);
  const std::string_view v = env ? env : "";
  if (v.empty() || v == "1") return true;
  if (v == "0") return false;
  throw ConfigError(
      fmt::format("{}='{}' is not 0 or 1 (0: {}); unset it for 1", variable, v, zero_means));
}

}  // namespace tessera::common
