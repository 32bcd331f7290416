#include "tessera/tensor.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "tessera/checked.h"
#include "tessera/device.h"
#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/runtime.h"
#include "transfer.h"

namespace tessera {

Tensor::Tensor(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
               std::int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      shape_(shape),
      strides_(strides),
      offset_(offset),
      dtype_(dtype) {}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device* device) {
  for (std::int64_t d : shape)
    if (d < 0) throw InvalidArgument(fmt::format("negative extent in shape {}", shape.str()));
  Device& dev = device ? *device : default_device();
  auto storage = std::make_shared<Storage>();
  storage->device = &dev;
  storage->block = dev.memory().allocate(bytes_or_throw(
      shape.numel(), dtype_size(dtype), fmt::format("the size of tensor {}", shape.str())));
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::from_bytes(const void* data, std::size_t bytes, const Shape& shape, DType dtype,
                          Device* device) {
  Tensor t = empty(shape, dtype, device);
  t.copy_from_host(data, bytes);
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device* device) {
  Tensor t = empty(shape, dtype, device);
  fill_(t, value);
  return t;
}

bool Tensor::is_contiguous() const {
  std::int64_t step = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != step) return false;
    step *= shape_[i];
  }
  return true;
}

void Tensor::copy_to_host(void* dst, std::size_t bytes, DType expect) const {
  if (expect != dtype_)
    throw InvalidArgument(
        fmt::format("reading a {} tensor as {}", dtype_name(dtype_), dtype_name(expect)));
  if (bytes != nbytes())
    throw InvalidArgument(
        fmt::format("tensor {} has {} bytes, the destination {}", shape_.str(), nbytes(), bytes));
  if (bytes == 0) return;
  const Tensor src = contiguous();
  src.device().queue().read(src.buffer(), src.byte_offset(), dst, bytes);
}

float Tensor::item() const {
  if (numel() != 1)
    throw InvalidArgument(fmt::format("item() needs a one-element tensor, got {}", shape_.str()));
  float v = 0;
  copy_to_host(&v, sizeof v, DType::f32);
  return v;
}

void Tensor::copy_from_host(const void* src, std::size_t bytes) {
  if (!is_contiguous()) throw InvalidArgument("copy_from_host needs a contiguous tensor");
  if (bytes != nbytes())
    throw InvalidArgument(fmt::format("tensor {} of {} needs {} bytes, got {}", shape_.str(),
                                      dtype_name(dtype_), nbytes(), bytes));
  if (bytes) device().queue().write(buffer(), byte_offset(), src, bytes);
}

Tensor Tensor::to(Device& target) const {
  if (&target == &device()) return *this;
  const Tensor src = contiguous();
  Tensor dst = empty(shape_, dtype_, &target);
  transfer(src.device(), src.buffer(), src.byte_offset(), target, dst.buffer(), 0, nbytes());
  return dst;
}

Tensor Tensor::expand(const Shape& shape) const {
  if (shape.rank() < rank())
    throw InvalidArgument(
        fmt::format("expand: can not expand {} to fewer dimensions {}", shape_.str(), shape.str()));
  Shape target = shape;
  Strides s = shape;
  const int lead = shape.rank() - rank();
  for (int i = 0; i < shape.rank(); ++i) {
    const int src = i - lead;
    if (src >= 0 && shape[i] == -1) target[i] = shape_[src];  // -1 keeps the extent, as in torch
    if (target[i] < 0)
      throw InvalidArgument(fmt::format("expand: can not expand {} to {} (dimension {})",
                                        shape_.str(), shape.str(), i));
    if (src < 0) {
      s[i] = 0;
    } else if (shape_[src] == target[i]) {
      s[i] = strides_[src];
    } else if (shape_[src] == 1) {
      s[i] = 0;
    } else {
      throw InvalidArgument(fmt::format("expand: can not expand {} to {} (dimension {})",
                                        shape_.str(), shape.str(), i));
    }
  }
  return Tensor(storage_, target, s, offset_, dtype_);
}

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : copy(*this);
}

}  // namespace tessera
