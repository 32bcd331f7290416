#include "tessera/train/serialize.h"

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/train/safetensors.h"

namespace tessera::train {

void save_state_dict(const StateDict& state, const std::filesystem::path& path,
                     const std::map<std::string, std::string>& metadata) {
  try {
    save_safetensors(path, state, metadata);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("save_state_dict {}: {}", path.string(), e.what()));
  }
}

StateDict load_state_dict_file(const std::filesystem::path& path, Device* device) {
  return load_safetensors(path, device).tensors;
}

void save(const Module& module, const std::filesystem::path& path) {
  save_state_dict(module.state_dict(), path);
}

IncompatibleKeys load(Module& module, const std::filesystem::path& path, bool strict) {
  // Read onto the module's device (load_state_dict copies each value to the device of the tensor
  // it replaces, should they differ).
  const StateDict mine = module.state_dict();
  const StateDict state =
      load_state_dict_file(path, mine.empty() ? nullptr : &mine.front().second.device());
  try {
    return module.load_state_dict(state, strict);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", path.string(), e.what()));
  }
}

}  // namespace tessera::train
