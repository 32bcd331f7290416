// A plugin built for another ABI version: only abi_version may be read.
#include "tessera/plugin.h"

extern "C" __attribute__((visibility("default"))) const TesseraPluginDescriptor*
tessera_plugin_entry(void) {
  static const TesseraPluginDescriptor d = {
      TESSERA_PLUGIN_ABI_VERSION + 1, 0, nullptr, nullptr, nullptr, nullptr, nullptr};
  return &d;
}
