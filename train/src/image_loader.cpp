#include "tessera/train/image_loader.h"

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/runtime.h"

namespace tessera::train {

namespace {
const Dataset& non_empty(const Dataset& data) {
  if (data.size <= 0)
    throw InvalidArgument(
        fmt::format("ImageDataLoader: the dataset '{}' has no samples; pass a dataset with samples",
                    data.name));
  return data;
}
}  // namespace

ImageDataLoader::ImageDataLoader(const Dataset& data, LoaderOptions options)
    : loader_(non_empty(data), options) {}

bool ImageDataLoader::next(TensorBatch& out) {
  if (!loader_.next(batch_)) return false;
  const Dataset& d = loader_.dataset();
  Device& cpu = device("cpu");
  out.tensors.clear();
  out.tensors.push_back(Tensor::from(batch_.x, Shape{batch_.size, 1, d.rows, d.cols}, &cpu));
  out.tensors.push_back(Tensor::from<std::int32_t>(batch_.y, Shape{batch_.size}, &cpu));
  out.size = batch_.size;
  out.index = batch_.index;
  return true;
}

}  // namespace tessera::train
