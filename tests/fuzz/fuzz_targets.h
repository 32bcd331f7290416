// The fuzz targets (tests/fuzz/README.md). Each target feeds one input to one reader or parser of
// Tessera and returns whether it was accepted. The same sources build two ways: with clang's
// libFuzzer (TESSERA_FUZZ=ON, libfuzzer_main.cpp: one binary per target) and with any compiler into
// tessera_fuzz_replay (replay_main.cpp), which the normal test suites run over the seed corpus and
// the regression cases.
//
// The contract of every target, for every input:
//   - it returns (true: accepted, false: refused);
//   - a tessera::Error (a clear error naming what is wrong) is the only acceptable refusal; the
//     target catches it and returns false;
//   - anything else is a finding: a crash, a hang, a runaway allocation, a sanitizer report, an
//     exception of another type escaping (std::bad_alloc, std::out_of_range, ...), or an accepted
//     input that breaks what the reader promises (finding() names the broken promise and aborts).
// Not thread-safe: one input at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>

#include "tessera/train/layers.h"

namespace tessera::fuzz {

using Target = bool (*)(const std::uint8_t* data, std::size_t size);

// tessera::train::read_idx on the input as a file (plain or gzip). Accepted arrays must hold as
// many bytes as their dimensions say.
bool idx(const std::uint8_t* data, std::size_t size);
// tessera::train::load_safetensors on the input as a file, onto cpu:0. Accepted tensors must be
// within the input and of the size their shape and dtype say.
bool safetensors(const std::uint8_t* data, std::size_t size);
// tessera::train::load_checkpoint on the input as a file, into checkpoint_model() with SGD
// (momentum) and with Adam, on cpu:0. An accepted checkpoint must say a non-negative epoch, give
// the optimizer f32 state (as its parameters) and train: one forward, backward and optimizer step
// afterwards may not throw.
bool checkpoint(const std::uint8_t* data, std::size_t size);
// The environment parsers of tessera/config.h. The input is NAME=VALUE for one of TESSERA_DEVICE,
// TESSERA_FALLBACK, TESSERA_LOG_LEVEL, TESSERA_DISABLE_PLUGINS, TESSERA_PLUGIN_PATH (that parser,
// then Config::from_env with the variable set); any other input goes whole to every parser.
// Accepted lists must parse back to themselves from their printed form.
bool env(const std::uint8_t* data, std::size_t size);

// The model whose checkpoints the checkpoint target loads: Linear 4-3, ReLU, Linear 3-2, created
// on cpu:0 from |seed|. make_corpus.cpp writes the seed checkpoints from it.
std::unique_ptr<train::Sequential> checkpoint_model(std::uint64_t seed);

// A path that reads back as exactly |size| bytes of |data|: an in-memory file (memfd_create), or
// a file in the temporary directory where memfd is unavailable. Valid until the next call.
std::filesystem::path as_file(const std::uint8_t* data, std::size_t size);

// Reports an accepted input that breaks what the code under test promises, and aborts (libFuzzer
// then keeps the input as a crash).
[[noreturn]] void finding(std::string_view target, std::string_view what);

}  // namespace tessera::fuzz
