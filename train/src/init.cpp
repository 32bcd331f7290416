#include "tessera/train/init.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "tessera/errors.h"

namespace tessera::train::init {

std::pair<std::int64_t, std::int64_t> fans(const Shape& shape) {
  if (shape.rank() < 2)
    throw InvalidArgument(
        fmt::format("fan in/out need a weight of rank 2 or more, got {}", shape.str()));
  std::int64_t receptive = 1;
  for (int i = 2; i < shape.rank(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

namespace {
template <typename F>
Tensor generate(const Shape& shape, Device* device, F f) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (float& x : v) x = f();
  return Tensor::from(v, shape, device);
}
}  // namespace

Tensor uniform(const Shape& shape, float lo, float hi, Generator& gen, Device* device) {
  return generate(shape, device, [&] { return gen.uniform(lo, hi); });
}

Tensor normal(const Shape& shape, float mean, float std, Generator& gen, Device* device) {
  return generate(shape, device, [&] { return mean + std * gen.normal(); });
}

Tensor kaiming_uniform(const Shape& shape, Generator& gen, float a, Device* device) {
  const float gain = std::sqrt(2.0f / (1.0f + a * a));
  const float bound = gain * std::sqrt(3.0f / static_cast<float>(fans(shape).first));
  return uniform(shape, -bound, bound, gen, device);
}

Tensor kaiming_normal(const Shape& shape, Generator& gen, float a, Device* device) {
  const float gain = std::sqrt(2.0f / (1.0f + a * a));
  return normal(shape, 0, gain / std::sqrt(static_cast<float>(fans(shape).first)), gen, device);
}

Tensor xavier_uniform(const Shape& shape, Generator& gen, float gain, Device* device) {
  const auto [in, out] = fans(shape);
  const float bound = gain * std::sqrt(6.0f / static_cast<float>(in + out));
  return uniform(shape, -bound, bound, gen, device);
}

Tensor xavier_normal(const Shape& shape, Generator& gen, float gain, Device* device) {
  const auto [in, out] = fans(shape);
  return normal(shape, 0, gain * std::sqrt(2.0f / static_cast<float>(in + out)), gen, device);
}

}  // namespace tessera::train::init
