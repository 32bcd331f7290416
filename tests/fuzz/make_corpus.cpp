// tessera_fuzz_make_corpus DIR: writes the seed corpus of every fuzz target into DIR/TARGET/
// (tests/fuzz/corpus in the repository; README.md). Seeds are small valid inputs, written by
// Tessera's own writers where it has them (save_safetensors, save_checkpoint), and near-valid ones
// that each break one rule. Files named valid-* must be accepted (replay --valid-accepted).
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_targets.h"
#include "tessera/errors.h"
#include "tessera/runtime.h"
#include "tessera/train/checkpoint.h"
#include "tessera/train/optim.h"
#include "tessera/train/safetensors.h"

using namespace tessera;
using namespace tessera::train;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
}

void write_gzip(const fs::path& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb9");
  if (!f || gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) < 0 || gzclose(f) != Z_OK)
    throw FileError(path.string() + ": can not write");
  std::printf("%s (gzip of %zu bytes)\n", path.c_str(), bytes.size());
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// An IDX header of unsigned bytes with |dims|, then |data|.
std::string idx_file(const std::vector<std::uint32_t>& dims, const std::string& data,
                     unsigned char type = 0x08) {
  std::string s{0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xff);
  return s + data;
}

void idx_seeds(const fs::path& dir) {
  std::string pixels;
  for (int i = 0; i < 18; ++i) pixels += static_cast<char>(i * 14);
  const std::string images = idx_file({2, 3, 3}, pixels), labels = idx_file({2}, {3, 7});
  write(dir / "valid-images.idx", images);
  write(dir / "valid-labels.idx", labels);
  write(dir / "valid-empty.idx", idx_file({0}, ""));
  fs::create_directories(dir);
  write_gzip(dir / "valid-images.idx.gz", images);
  write_gzip(dir / "valid-labels.idx.gz", labels);
  write(dir / "truncated.idx", images.substr(0, images.size() - 1));
  write(dir / "trailing-byte.idx", images + "x");
  write(dir / "element-type-i32.idx", idx_file({2}, std::string(8, '\1'), 0x0c));
  write(dir / "five-dims.idx", idx_file({1, 1, 1, 1, 1}, "z"));
  write_gzip(dir / "truncated.idx.gz", images.substr(0, images.size() - 1));
  const std::string gz = read(dir / "valid-images.idx.gz");
  write(dir / "gzip-cut.idx.gz", gz.substr(0, gz.size() / 2));
}

// A safetensors file with the header |json| as it is and |data| after it.
std::string raw_safetensors(std::string json, const std::string& data) {
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return s + json + data;
}

void safetensors_seeds(const fs::path& dir, Device& cpu) {
  fs::create_directories(dir);
  auto bytes = [&](const std::string& b, const Shape& shape, DType t) {
    return Tensor::from_bytes(b.data(), b.size(), shape, t, &cpu);
  };
  save_safetensors(dir / "valid-every-dtype.safetensors",
                   {{"w", Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}, &cpu)},
                    {"scalar", Tensor::from({0.5f}, {}, &cpu)},
                    {"i", bytes(std::string(8, '\2'), {2}, DType::i32)},
                    {"u", bytes("abc", {3}, DType::u8)},
                    {"h", bytes(std::string("\x00\x3c\x00\xc0", 4), {2}, DType::f16)},
                    {"bf", bytes(std::string("\x80\x3f\x00\x40", 4), {2}, DType::bf16)},
                    {"d", bytes(std::string(8, '\0'), {1}, DType::f64)}},
                   {{"format", "pt"}, {"note", "seed"}});
  save_safetensors(dir / "valid-no-tensors.safetensors", {}, {});
  save_safetensors(dir / "valid-zero-extent.safetensors",
                   {{"e", bytes("", {0, 3}, DType::f32)}, {"x", Tensor::from({7}, {1}, &cpu)}});
  const std::string good = read(dir / "valid-every-dtype.safetensors");
  write(dir / "truncated.safetensors", good.substr(0, good.size() - 1));
  std::string longer = good;
  longer[0] = static_cast<char>(longer[0] + 8);  // the header runs into the data
  write(dir / "header-too-long.safetensors", longer);
  const std::string f32 = R"("dtype":"F32","shape":[2],"data_offsets":)";
  write(dir / "overlap.safetensors",
        raw_safetensors(R"({"a":{)" + f32 + R"([0,8]},"b":{)" + f32 + "[4,12]}}",
                        std::string(12, '\0')));
  write(dir / "offsets-outside.safetensors",
        raw_safetensors(R"({"a":{)" + f32 + "[0,16]}}", std::string(8, '\0')));
  write(dir / "extent-fraction.safetensors",
        raw_safetensors(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})",
                        std::string(8, '\0')));
  write(dir / "negative-extent.safetensors",
        raw_safetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
                        std::string(8, '\0')));
  write(dir / "unknown-dtype.safetensors",
        raw_safetensors(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})",
                        std::string(8, '\0')));
  write(dir / "metadata-not-string.safetensors",
        raw_safetensors(R"({"__metadata__":{"k":1}})", ""));
  write(dir / "not-json.safetensors", raw_safetensors("{\"a\":", ""));
}

// Rewrites the checkpoint |from| with its metadata and tensors changed by |edit|.
template <typename Edit>
void variant(const fs::path& from, const fs::path& to, Device& cpu, Edit edit) {
  SafetensorsContents c = load_safetensors(from, &cpu);
  edit(c);
  save_safetensors(to, c.tensors, c.metadata);
  std::printf("%s\n", to.c_str());
}

void checkpoint_seeds(const fs::path& dir, Device& cpu) {
  fs::create_directories(dir);
  DeviceGuard guard(cpu);
  TrainingProgress progress;
  progress.epoch = 1;
  progress.global_step = 1;
  progress.batches_seen = 1;
  progress.seed = 7;
  progress.history.push_back({1, 1, 0.1, {{"train_loss", 0.7}, {"val_acc", 0.5}}, 0.01, 200});
  auto one_step = [&](Optimizer& opt, Module& model) {
    const Tensor x = Tensor::from({1, 2, 3, 4, -1, -2, -3, -4}, {2, 4}, &cpu);
    const std::vector<std::int32_t> y{1, 0};
    cross_entropy(model(Variable(x)), Tensor::from<std::int32_t>(y, {2}, &cpu)).backward();
    opt.step();
  };
  {
    auto model = fuzz::checkpoint_model(3);
    SGD sgd(model->named_parameters(), SgdOptions{0.1f, 0.9f});
    one_step(sgd, *model);
    save_checkpoint(dir / "valid-sgd.safetensors", *model, sgd, progress);
  }
  {
    auto model = fuzz::checkpoint_model(4);
    Adam adam(model->named_parameters(), AdamOptions{});
    save_checkpoint(dir / "adam-step-0.safetensors", *model, adam, {});
    one_step(adam, *model);
    save_checkpoint(dir / "valid-adam.safetensors", *model, adam, progress);
  }
  const fs::path sgd = dir / "valid-sgd.safetensors", adam = dir / "valid-adam.safetensors";
  variant(sgd, dir / "format-1.safetensors", cpu,
          [](auto& c) { c.metadata["format"] = "tessera-checkpoint-1"; });
  variant(sgd, dir / "callback-not-json.safetensors", cpu,
          [](auto& c) { c.metadata["callback.EarlyStopping{monitor=val_loss,mode=min}"] = "{"; });
  variant(sgd, dir / "scheduler-state-without-scheduler.safetensors", cpu,
          [](auto& c) { c.metadata["scheduler.last_epoch"] = "1"; });
  variant(sgd, dir / "epoch-not-a-number.safetensors", cpu,
          [](auto& c) { c.metadata["epoch"] = "one"; });
  variant(sgd, dir / "history-not-json.safetensors", cpu,
          [](auto& c) { c.metadata["history"] = "[{\"epoch\":"; });
  variant(sgd, dir / "missing-parameter.safetensors", cpu, [](auto& c) { c.tensors.pop_back(); });
  variant(sgd, dir / "extra-parameter.safetensors", cpu,
          [&](auto& c) { c.tensors.emplace_back("9.weight", Tensor::from({1}, {1}, &cpu)); });
  variant(sgd, dir / "parameter-shape.safetensors", cpu, [](auto& c) {
    c.tensors.front().second = c.tensors.front().second.reshape({4, 3}).contiguous();
  });
  variant(adam, dir / "missing-adam-state.safetensors", cpu, [](auto& c) {
    std::erase_if(c.tensors, [](const auto& t) { return t.first.ends_with(".exp_avg_sq"); });
  });
  variant(adam, dir / "adam-step-not-a-number.safetensors", cpu,
          [](auto& c) { c.metadata["optimizer.step"] = "1x"; });
}

void env_seeds(const fs::path& dir) {
  const std::pair<const char*, const char*> seeds[] = {
      {"valid-device-auto", "TESSERA_DEVICE=auto"},
      {"valid-device-list", "TESSERA_DEVICE=vulkan:1, opencl,cpu"},
      {"device-bad-index", "TESSERA_DEVICE=vulkan:x"},
      {"device-index-overflow", "TESSERA_DEVICE=vulkan:99999999999"},
      {"device-twice", "TESSERA_DEVICE=cpu,cpu:0,cpu"},
      {"device-auto-in-list", "TESSERA_DEVICE=auto,cpu"},
      {"device-empty-item", "TESSERA_DEVICE=cpu,,vulkan"},
      {"valid-fallback-on", "TESSERA_FALLBACK=1"},
      {"valid-fallback-list", "TESSERA_FALLBACK=opencl,cpu"},
      {"fallback-auto", "TESSERA_FALLBACK=auto"},
      {"fallback-garbage", "TESSERA_FALLBACK=garbage"},
      {"valid-log-level", "TESSERA_LOG_LEVEL=Debug"},
      {"log-level-unknown", "TESSERA_LOG_LEVEL=verbose"},
      {"valid-disable-plugins", "TESSERA_DISABLE_PLUGINS=vulkan,opencl"},
      {"disable-plugins-path", "TESSERA_DISABLE_PLUGINS=../evil"},
      {"valid-plugin-path", "TESSERA_PLUGIN_PATH=/usr/lib/tessera/plugins::relative/dir"},
      {"bare-value", "vulkan:1,cpu"}};
  for (const auto& [name, value] : seeds) write(dir / name, value);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tessera_fuzz_make_corpus DIR (tests/fuzz/corpus)\n");
    return 2;
  }
  const fs::path root = argv[1];
  Device& cpu = device("cpu");
  idx_seeds(root / "idx");
  safetensors_seeds(root / "safetensors", cpu);
  checkpoint_seeds(root / "checkpoint", cpu);
  env_seeds(root / "env");
  return 0;
}
