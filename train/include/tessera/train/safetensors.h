// The safetensors format (Hugging Face's): an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the raw little-endian data. Files written here load with the Python `safetensors` library.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::train {

struct SafetensorsContents {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order
  std::map<std::string, std::string> metadata;
};

// Writes |tensors| (any device; read back to the host) and |metadata| atomically (tessera/file.h). Names
// must be unique and non-empty. Throws InvalidArgument for bad names, FileError for I/O.
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a file into tensors on |device| (the default device when null). Throws FileError naming
// the file and what is wrong: missing, truncated, bad header JSON, unknown dtype, offsets that
// overlap or leave the data.
SafetensorsContents load_safetensors(const std::filesystem::path& path, Device* device = nullptr);

}  // namespace tessera::train
