// Tensor: a strided view of device memory with a shape and a dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/caching_allocator.h"
#include "tessera/dtype.h"
#include "tessera/shape.h"

namespace tessera {

class Device;

// The memory behind one or more tensors: a block of the device's caching allocator.
struct Storage {
  Device* device = nullptr;
  Block block;
};

// A tensor is a cheap handle (copying it shares the storage, as in PyTorch). Views (transpose,
// reshape of a contiguous tensor, expand) share storage too. Methods that read values
// (to_vector, item) wait for the device; everything else is asynchronous. A default-constructed
// tensor is undefined: only defined() and assignment may be called on it.
//
// Thread safety: distinct tensors may be used from different threads; writing one tensor from two
// threads at once is a data race, as for any container.
class Tensor {
 public:
  Tensor() = default;

  // An uninitialised contiguous tensor on |device| (the default device when null). Throws
  // InvalidArgument for a negative extent or a size that overflows, OutOfMemory when the device
  // can not hold it.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device* device = nullptr);
  // A contiguous tensor holding a copy of |data| (numel(shape) values).
  template <typename T>
  static Tensor from(std::span<const T> data, const Shape& shape, Device* device = nullptr) {
    return from_bytes(data.data(), data.size_bytes(), shape, dtype_of_v<T>, device);
  }
  static Tensor from(const std::vector<float>& data, const Shape& shape, Device* device = nullptr) {
    return from<float>(std::span<const float>(data), shape, device);
  }
  static Tensor from_bytes(const void* data, std::size_t bytes, const Shape& shape, DType dtype,
                           Device* device = nullptr);
  // A contiguous tensor filled with |value| (through the fill op).
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device* device = nullptr);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  DType dtype() const { return dtype_; }
  int rank() const { return shape_.rank(); }
  std::int64_t dim(int i) const { return shape_[shape_.normalize_axis(i)]; }
  std::int64_t numel() const { return shape_.numel(); }
  // numel() * element size; the product was checked when the storage was allocated.
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  Device& device() const { return *storage_->device; }
  bool is_contiguous() const;

  // Values on the host, in row-major order; waits for pending work. T must match dtype().
  template <typename T>
  std::vector<T> to_vector() const {
    std::vector<T> v(static_cast<std::size_t>(numel()));
    copy_to_host(v.data(), v.size() * sizeof(T), dtype_of_v<T>);
    return v;
  }
  // The single value of a one-element f32 tensor.
  float item() const;
  // Copies all values (row-major) into |dst| of |bytes|; throws InvalidArgument on a size or
  // dtype mismatch.
  void copy_to_host(void* dst, std::size_t bytes, DType expect) const;
  // Overwrites all values of this contiguous tensor from host memory.
  void copy_from_host(const void* src, std::size_t bytes);

  // This tensor on |device|: itself when it is already there, else a contiguous copy.
  Tensor to(Device& device) const;
  // Views (no copy).
  Tensor transpose(int dim0, int dim1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor expand(const Shape& shape) const;  // broadcast view, stride 0 on expanded dims
  // A view when contiguous, otherwise a copy. One extent may be -1.
  Tensor reshape(const Shape& shape) const;
  // Itself when contiguous, else a contiguous copy on the same device (the copy op).
  Tensor contiguous() const;

  // For kernels and plugins: the storage buffer and where this view starts in it.
  Buffer& buffer() const { return *storage_->block.buffer(); }
  std::int64_t offset() const { return offset_; }
  std::size_t byte_offset() const { return static_cast<std::size_t>(offset_) * dtype_size(dtype_); }
  // Host address of the first element when the storage is host-visible, else null.
  template <typename T>
  T* host_data() const {
    auto* base = static_cast<std::byte*>(buffer().host_ptr());
    return base ? reinterpret_cast<T*>(base + byte_offset()) : nullptr;
  }
  // True when both tensors share one storage.
  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }

  // Builds a view of |storage| (used by the core and by tests).
  Tensor(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
         std::int64_t offset, DType dtype);

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  std::int64_t offset_ = 0;
  DType dtype_ = DType::f32;
};

}  // namespace tessera
