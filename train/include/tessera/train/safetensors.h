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

// Writes |tensors| (any device; read back to the host) and |metadata| atomically (tessera/file.h).
// Names must be unique and non-empty. Throws InvalidArgument for bad names, FileError for I/O.
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a file into tensors on |device| (the default device when null). Only a regular file is
// opened (tessera/file.h's RegularFile: a FIFO, directory or device is refused at once); the
// header's length is checked against the real file size and a 100 MiB limit, and every entry is
// checked before any tensor data is read, so no buffer is larger than the file. Throws FileError
// naming the file, and the entry where there is one, for: missing or not a regular file; shorter
// than 8 bytes; a header length past the end or over the limit; header not JSON, not an object,
// nested too deep, or with a repeated key; an entry that is not an object or lacks dtype, shape
// or data_offsets; a dtype that is not a string or not supported; a shape that is not an array of
// at most kMaxDims non-negative integers (512.5 and -1 are refused, not converted) or whose
// element or byte count overflows 64 bits; data_offsets that are not two non-negative integers,
// lie outside the data, do not match the shape's byte count, or overlap another entry's;
// metadata that is not an object of strings. Thread-safe (no shared state).
SafetensorsContents load_safetensors(const std::filesystem::path& path, Device* device = nullptr);

}  // namespace tessera::train
