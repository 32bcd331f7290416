// Seeded weight initialisation (torch.nn.init's formulas). Each fills a new tensor on |device|
// (the default device when null) from |gen|.
#pragma once

#include "tessera/tensor.h"
#include "tessera/train/random.h"

namespace tessera::train::init {

// fan_in and fan_out of a weight: [out, in] or [out, in, kh, kw].
std::pair<std::int64_t, std::int64_t> fans(const Shape& shape);

Tensor uniform(const Shape& shape, float lo, float hi, Generator& gen, Device* device = nullptr);
Tensor normal(const Shape& shape, float mean, float std, Generator& gen, Device* device = nullptr);
// Kaiming (He): std = gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2)) (a = 0 for ReLU).
Tensor kaiming_uniform(const Shape& shape, Generator& gen, float a = 0, Device* device = nullptr);
Tensor kaiming_normal(const Shape& shape, Generator& gen, float a = 0, Device* device = nullptr);
// Xavier (Glorot): std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_uniform(const Shape& shape, Generator& gen, float gain = 1, Device* device = nullptr);
Tensor xavier_normal(const Shape& shape, Generator& gen, float gain = 1, Device* device = nullptr);

}  // namespace tessera::train::init
