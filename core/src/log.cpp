#include "tessera/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace tessera {

spdlog::logger& log() {
  // Created on first use and never destroyed, so plugins may log until the process exits.
  static spdlog::logger* logger = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto* l = new spdlog::logger("tessera", sink);
    l->set_pattern("[tessera %^%l%$] %v");
    l->set_level(spdlog::level::warn);
    return l;
  }();
  return *logger;
}

}  // namespace tessera
