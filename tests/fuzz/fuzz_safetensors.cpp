// Fuzz target: the safetensors reader (fuzz_targets.h states the contract).
#include <string>

#include <fmt/format.h>

#include "fuzz_targets.h"
#include "tessera/errors.h"
#include "tessera/runtime.h"
#include "tessera/train/safetensors.h"

namespace tessera::fuzz {

bool safetensors(const std::uint8_t* data, std::size_t size) {
  static Device& cpu = device("cpu");
  train::SafetensorsContents c;
  try {
    c = train::load_safetensors(as_file(data, size), &cpu);
  } catch (const Error&) {
    return false;
  }
  std::size_t total = 0;
  for (const auto& [name, t] : c.tensors) {
    // Every accepted tensor's bytes came from the input, so together they fit in it.
    total += t.nbytes();
    if (t.nbytes() != static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()) || total > size)
      finding("safetensors",
              fmt::format("accepted tensor '{}' {} {} of {} bytes from a {}-byte file", name,
                          dtype_name(t.dtype()), t.shape().str(), t.nbytes(), size));
    std::string bytes(t.nbytes(), '\0');  // read it back
    if (!bytes.empty()) t.copy_to_host(bytes.data(), bytes.size(), t.dtype());
  }
  return true;
}

}  // namespace tessera::fuzz
