// Files embedded into a plugin at build time: tessera_add_plugin's EMBED files (OpenCL C sources)
// and SHADERS (GLSL compiled to SPIR-V by glslc). The build generates the definition of
// embedded_files() inside the plugin; each plugin sees only its own files.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace tessera {

struct EmbeddedFile {
  std::string_view name;  // the file name without its directory ("gemm.cl", "gemm.spv")
  std::span<const unsigned char> data;
};

// Every file embedded into the calling plugin, in the order tessera_add_plugin listed them.
std::span<const EmbeddedFile> embedded_files();

// The embedded file |name|, or an empty span when the plugin has none of that name.
inline std::span<const unsigned char> embedded_file(std::string_view name) {
  for (const EmbeddedFile& f : embedded_files())
    if (f.name == name) return f.data;
  return {};
}

}  // namespace tessera
