// The two models tessera-train trains on 28x28 images with 10 classes.
#pragma once

#include <memory>
#include <string>

#include "tessera/train/layers.h"

namespace tessera::train {

// Flatten, Linear 784-512, ReLU, Linear 512-512, ReLU, Linear 512-10.
std::shared_ptr<Sequential> make_mlp(Generator& gen);
// Conv 3x3 1->32, ReLU, MaxPool 2, Conv 3x3 32->64, ReLU, MaxPool 2, Flatten, Linear 1600-128,
// ReLU, Linear 128-10 (no padding: 28 -> 26 -> 13 -> 11 -> 5).
std::shared_ptr<Sequential> make_cnn(Generator& gen);
// "mlp" or "cnn"; throws ConfigError for another name.
std::shared_ptr<Sequential> make_model(const std::string& name, Generator& gen);

}  // namespace tessera::train
