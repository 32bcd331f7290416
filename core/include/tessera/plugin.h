// The plugin entry point: a small C door in front of a C++ backend (as ggml's and OpenVINO's
// plugins do). A plugin shared object exports one C symbol, tessera_plugin_entry, returning a
// descriptor that the loader checks before it calls any other plugin code.
#pragma once

#include <stddef.h>
#include <stdint.h>

// Bumped whenever the descriptor, the C++ interfaces a plugin implements, or the op table change.
// (New return codes of create, below, do not bump it: every non-zero code already means failure.)
#define TESSERA_PLUGIN_ABI_VERSION 9u
#define TESSERA_PLUGIN_ENTRY_SYMBOL "tessera_plugin_entry"

// The C++ objects behind the door (Backend, Device, Tensor) cross it, so the plugin and the core
// must agree on the C++ standard library and its ABI. This string says which one a binary uses.
#if defined(_LIBCPP_VERSION)
#define TESSERA_STDLIB_NAME "libc++"
#elif defined(__GLIBCXX__)
#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI
#define TESSERA_STDLIB_NAME "libstdc++/cxx11"
#else
#define TESSERA_STDLIB_NAME "libstdc++/old-abi"
#endif
#else
#define TESSERA_STDLIB_NAME "unknown-stdlib"
#endif
#if defined(__x86_64__)
#define TESSERA_ARCH_NAME "x86_64"
#elif defined(__aarch64__)
#define TESSERA_ARCH_NAME "aarch64"
#else
#define TESSERA_ARCH_NAME "other-arch"
#endif
#define TESSERA_TOOLCHAIN_FINGERPRINT TESSERA_STDLIB_NAME ";" TESSERA_ARCH_NAME ";c++20"

#ifdef __cplusplus
extern "C" {
#endif

// Return codes of TesseraPluginDescriptor::create. A runtime treats any other non-zero code as
// TESSERA_PLUGIN_CREATE_FAILED, so a plugin built before a code existed keeps working.
#define TESSERA_PLUGIN_CREATE_OK 0
// The backend could not be created (no driver, a library that does not load, ...); the plugin is
// reported as failed with the reason and the process goes on with the other plugins.
#define TESSERA_PLUGIN_CREATE_FAILED 1
// The plugin's configuration is malformed: a variable it reads (TESSERA_CPU_THREADS=abc) has a
// value it does not accept. The reason names the variable, the value and what is accepted. The
// runtime then refuses to choose any device (ConfigError), so that a typo never silently moves
// work to another device.
#define TESSERA_PLUGIN_CREATE_CONFIG_ERROR 2

// Returned by tessera_plugin_entry; must stay valid while the library is loaded.
typedef struct TesseraPluginDescriptor {
  uint32_t abi_version;   // TESSERA_PLUGIN_ABI_VERSION the plugin was built with
  uint32_t struct_size;   // sizeof(TesseraPluginDescriptor) the plugin was built with
  const char* name;       // plugin name; must match the file name libtessera-plugin-NAME.so
  const char* version;    // the plugin's own version, free form ("1.2.0")
  const char* toolchain;  // TESSERA_TOOLCHAIN_FINGERPRINT of the plugin's build
  // Creates the backend. On success stores a tessera::Backend* in *backend and returns
  // TESSERA_PLUGIN_CREATE_OK (0); on failure returns TESSERA_PLUGIN_CREATE_FAILED or
  // TESSERA_PLUGIN_CREATE_CONFIG_ERROR and writes a reason into error (error_size bytes, which
  // should be NUL-terminated; the loader terminates it in any case). Never throws; called at most
  // once.
  int (*create)(void** backend, char* error, size_t error_size);
  // Destroys a backend returned by create. Never throws.
  void (*destroy)(void* backend);
} TesseraPluginDescriptor;

typedef const TesseraPluginDescriptor* (*TesseraPluginEntryFn)(void);

#ifdef __cplusplus
}  // extern "C"

#include <cstdio>
#include <exception>
#include <memory>

#include "tessera/backend.h"
#include "tessera/errors.h"

namespace tessera::detail {

template <auto Factory>
int create_backend(void** out, char* error, std::size_t error_size) noexcept {
  try {
    std::unique_ptr<Backend> backend = Factory();
    if (!backend) throw std::runtime_error("the factory returned no backend");
    *out = backend.release();
    return TESSERA_PLUGIN_CREATE_OK;
  } catch (const ConfigError& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return TESSERA_PLUGIN_CREATE_CONFIG_ERROR;
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
  } catch (...) {
    std::snprintf(error, error_size, "unknown exception");
  }
  return TESSERA_PLUGIN_CREATE_FAILED;
}

inline void destroy_backend(void* backend) noexcept {
  delete static_cast<Backend*>(backend);
}

}  // namespace tessera::detail

// Defines the entry point of a plugin. FACTORY is a function `std::unique_ptr<tessera::Backend>()`;
// exceptions it throws are caught and reported as the plugin's create failure: a
// tessera::ConfigError (a malformed variable the plugin reads) as
// TESSERA_PLUGIN_CREATE_CONFIG_ERROR, anything else as TESSERA_PLUGIN_CREATE_FAILED.
//
//   TESSERA_DEFINE_PLUGIN("vulkan", "0.1.0", tessera::vulkan::create_backend)
#define TESSERA_DEFINE_PLUGIN(NAME, VERSION, FACTORY)                              \
  extern "C" __attribute__((visibility("default"))) const TesseraPluginDescriptor* \
  tessera_plugin_entry(void) {                                                     \
    static const TesseraPluginDescriptor descriptor = {                            \
        TESSERA_PLUGIN_ABI_VERSION,                                                \
        sizeof(TesseraPluginDescriptor),                                           \
        NAME,                                                                      \
        VERSION,                                                                   \
        TESSERA_TOOLCHAIN_FINGERPRINT,                                             \
        &::tessera::detail::create_backend<&FACTORY>,                              \
        &::tessera::detail::destroy_backend};                                      \
    return &descriptor;                                                            \
  }

#endif  // __cplusplus
