// Plugins that break the C door itself: TEST_ENTRY_THROWS makes the entry point throw (an
// exception crossing a C function), TEST_UNTERMINATED_ERROR makes create fill the whole error
// buffer without a terminating NUL.
#include <cstring>
#include <stdexcept>

#include "tessera/plugin.h"

namespace {

[[maybe_unused]] int create(void**, char* error, size_t error_size) {
  std::memset(error, 'x', error_size);  // no NUL anywhere
  return TESSERA_PLUGIN_CREATE_FAILED;
}

[[maybe_unused]] void destroy(void*) {}

}  // namespace

extern "C" __attribute__((visibility("default"))) const TesseraPluginDescriptor*
tessera_plugin_entry(void) {
#ifdef TEST_ENTRY_THROWS
  throw std::runtime_error("the entry point lost its way");
#else
  static const TesseraPluginDescriptor d = {TESSERA_PLUGIN_ABI_VERSION,
                                            sizeof(TesseraPluginDescriptor),
                                            TEST_PLUGIN_NAME,
                                            "1.0",
                                            TESSERA_TOOLCHAIN_FINGERPRINT,
                                            &create,
                                            &destroy};
  return &d;
#endif
}
