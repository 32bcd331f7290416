// Weights-only files, as torch.save(model.state_dict()) / model.load_state_dict(torch.load(...))
// (LibTorch's torch::save / torch::load of a module), in the safetensors format with PyTorch's
// names and layouts: parameters and buffers (i64 as I64, bool as BOOL), no optimizer or trainer
// state (checkpoint.h has those). A file written here loads in Python with
// safetensors.torch.load_file and model.load_state_dict; one written by
// safetensors.torch.save_file(model.state_dict(), path) loads here.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "tessera/train/modules.h"

namespace tessera::train {

// Writes |module|'s state_dict() to |path| atomically (a temporary file renamed), with the
// metadata {"format": "pt"} that Hugging Face's loaders expect. Throws FileError naming the file
// for I/O errors.
void save(const Module& module, const std::filesystem::path& path);
// Reads |path| and loads it into |module| (load_state_dict(state, strict)); returns the keys
// skipped when not strict. Throws FileError (safetensors.h's checks, naming the file and the
// entry) for a file that is not valid safetensors, and InvalidArgument starting with the path
// for entries that do not fit the module (load_state_dict's message: every missing, unexpected
// or mismatched entry); the module is unchanged on any error.
IncompatibleKeys load(Module& module, const std::filesystem::path& path, bool strict = true);

// The same for a bare state dict: |metadata| is written as the file's __metadata__.
void save_state_dict(const StateDict& state, const std::filesystem::path& path,
                     const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
// The file's tensors in file order, on |device| (the default device when null). Errors as
// load_safetensors.
StateDict load_state_dict_file(const std::filesystem::path& path, Device* device = nullptr);

}  // namespace tessera::train
