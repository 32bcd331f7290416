#include "tessera/train/models.h"

#include <fmt/format.h>

#include "tessera/errors.h"

namespace tessera::train {

std::shared_ptr<Sequential> make_mlp(Generator& gen) {
  auto m = std::make_shared<Sequential>();
  m->emplace<Flatten>()
      .emplace<Linear>(784, 512, gen)
      .emplace<ReLU>()
      .emplace<Linear>(512, 512, gen)
      .emplace<ReLU>()
      .emplace<Linear>(512, 10, gen);
  return m;
}

std::shared_ptr<Sequential> make_cnn(Generator& gen) {
  auto m = std::make_shared<Sequential>();
  m->emplace<Conv2d>(1, 32, 3, gen)
      .emplace<ReLU>()
      .emplace<MaxPool2d>(2)
      .emplace<Conv2d>(32, 64, 3, gen)
      .emplace<ReLU>()
      .emplace<MaxPool2d>(2)
      .emplace<Flatten>()
      .emplace<Linear>(64 * 5 * 5, 128, gen)
      .emplace<ReLU>()
      .emplace<Linear>(128, 10, gen);
  return m;
}

std::shared_ptr<Sequential> make_model(const std::string& name, Generator& gen) {
  if (name == "mlp") return make_mlp(gen);
  if (name == "cnn") return make_cnn(gen);
  throw ConfigError(fmt::format("unknown model '{}'; use mlp or cnn", name));
}

}  // namespace tessera::train
