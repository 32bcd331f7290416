// Fuzz target: the checkpoint loader (fuzz_targets.h states the contract).
#include <exception>
#include <vector>

#include <fmt/format.h>

#include "fuzz_targets.h"
#include "tessera/errors.h"
#include "tessera/runtime.h"
#include "tessera/train/autograd.h"
#include "tessera/train/checkpoint.h"
#include "tessera/train/optim.h"

namespace tessera::fuzz {

namespace {

// Loads the checkpoint at |path| into a fresh model and optimizer; when accepted, checks the
// progress and the optimizer state's dtype, and takes one training step.
template <typename Opt, typename Options>
bool load_into(const std::filesystem::path& path, Options options) {
  static Device& cpu = device("cpu");
  auto model = checkpoint_model(1);
  Opt optimizer(model->named_parameters(), options);
  train::TrainingProgress progress;
  try {
    progress = train::load_checkpoint(path, *model, optimizer);
  } catch (const Error&) {
    return false;
  }
  if (progress.epoch < 0)
    finding("checkpoint",
            fmt::format("{} accepted a checkpoint of epoch {}", optimizer.name(), progress.epoch));
  for (const auto& [name, t] : optimizer.state().tensors)
    if (t.dtype() != DType::f32)
      finding("checkpoint", fmt::format("{} accepted state '{}' as {}; the parameters are f32",
                                        optimizer.name(), name, dtype_name(t.dtype())));
  try {
    DeviceGuard guard(cpu);
    const Tensor x = Tensor::from(std::vector<float>{0.5f, -1, 2, 0, 1, 1, -0.5f, 3}, {2, 4}, &cpu);
    const std::vector<std::int32_t> y{0, 1};
    const Tensor labels = Tensor::from<std::int32_t>(y, {2}, &cpu);
    train::cross_entropy((*model)(train::Variable(x)), labels).backward();
    optimizer.step();
    for (const train::NamedParameter& p : model->named_parameters())
      (void)p.variable->value().to_vector<float>();
  } catch (const std::exception& e) {
    finding("checkpoint", fmt::format("{} accepted a checkpoint that can not train: {}",
                                      optimizer.name(), e.what()));
  }
  return true;
}

}  // namespace

bool checkpoint(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = as_file(data, size);
  const bool sgd = load_into<train::SGD>(path, train::SgdOptions{0.1f, 0.9f});
  const bool adam = load_into<train::Adam>(path, train::AdamOptions{});
  return sgd || adam;
}

}  // namespace tessera::fuzz
