// Logging: one spdlog logger named "tessera", level from TESSERA_LOG_LEVEL, output on stderr.
#pragma once

#include <spdlog/spdlog.h>

namespace tessera {

// The shared logger; plugins log through it too. Thread-safe.
spdlog::logger& log();

}  // namespace tessera
