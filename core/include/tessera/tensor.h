// Tensor: a strided view of device memory with a shape and a dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <type_traits>
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
  // A bool tensor (a mask) from one byte per element, each 0 or 1 (any non-zero byte reads as
  // true in the ops, but prints and compares as its own value: pass 0 or 1). For bool data held
  // in an array of bool, from<bool>(span) does the same.
  static Tensor from_mask(std::span<const std::uint8_t> data, const Shape& shape,
                          Device* device = nullptr) {
    return from_bytes(data.data(), data.size(), shape, DType::boolean, device);
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

  // Values on the host, in row-major order; waits for pending work. T must match dtype(), except
  // that a bool tensor reads as std::uint8_t (0 or 1 per element): std::vector<bool> has no
  // data() to copy into. Throws InvalidArgument naming both dtypes otherwise.
  template <typename T>
  std::vector<T> to_vector() const {
    static_assert(!std::is_same_v<T, bool>, "read a bool tensor with to_vector<std::uint8_t>()");
    std::vector<T> v(static_cast<std::size_t>(numel()));
    const DType want =
        dtype_ == DType::boolean && dtype_of_v<T> == DType::u8 ? DType::boolean : dtype_of_v<T>;
    copy_to_host(v.data(), v.size() * sizeof(T), want);
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
  // This tensor converted to |dtype| (torch's x.to(dtype)): itself when it already has that
  // dtype, else a new contiguous tensor on the same device (the cast op). Between f32, f64, i32,
  // i64, u8 and bool (f64 and u8 on the CPU only): float to integer truncates toward zero
  // (saturating at the integer's range, NaN gives 0: torch leaves both undefined), anything to
  // bool is x != 0, bool to anything is 0 or 1, integer to integer wraps as C++ and torch do.
  // Throws InvalidArgument for another dtype.
  Tensor to(DType dtype) const;

  // Views (no copy), with torch's names and semantics. A dimension may be negative (-1 is the
  // last); a bad argument throws InvalidArgument naming the call, the shape and what was expected.
  Tensor transpose(int dim0, int dim1) const;  // any two dimensions of any rank
  Tensor t() const { return transpose(0, 1); }
  Tensor expand(const Shape& shape) const;  // broadcast view, stride 0 on expanded dims
  // Elements [start, start + length) of |dim|; start may be negative (counted from the end).
  Tensor narrow(int dim, std::int64_t start, std::int64_t length) const;
  // x[..., start:end:step, ...] along |dim|, as Python slicing: start and end may be negative and
  // are clamped to [0, size]; step > 0.
  Tensor slice(int dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  // x[..., index, ...]: |dim| removed; index in [-size, size).
  Tensor select(int dim, std::int64_t index) const;
  // Dimensions reordered: dimension i of the result is dimension dims[i] of this tensor.
  Tensor permute(std::span<const int> dims) const;
  Tensor permute(std::initializer_list<int> dims) const {
    return permute(std::span<const int>(dims.begin(), dims.size()));
  }
  // A dimension of size 1 inserted at |dim| in [-(rank+1), rank].
  Tensor unsqueeze(int dim) const;
  // Every dimension of size 1 removed; or |dim| removed when its size is 1 (else unchanged).
  Tensor squeeze() const;
  Tensor squeeze(int dim) const;
  // Dimensions start..end (inclusive) merged into one: a view when they are laid out as one,
  // else a copy (torch.flatten). A rank-0 tensor becomes [1].
  Tensor flatten(int start_dim = 0, int end_dim = -1) const;
  // Another shape of the same elements, always a view (torch's view): throws InvalidArgument when
  // the strides do not allow it (call reshape, or contiguous() first). One extent may be -1.
  Tensor view(const Shape& shape) const;
  // The same bytes read as |dtype| (torch's x.view(dtype)): same-size dtypes keep shape and
  // strides; otherwise the last dimension (stride 1) is scaled by the size ratio (an i64 [N, 1]
  // is an i32 [N, 2]). Throws InvalidArgument when the layout does not divide.
  Tensor view(DType dtype) const;
  // A view when the strides allow it (as view), otherwise a contiguous copy. One extent may be -1.
  Tensor reshape(const Shape& shape) const;
  // Views of consecutive pieces of |size| elements along |dim| (the last may be smaller);
  // torch.split with an int. size > 0, or 0 for an empty dimension.
  std::vector<Tensor> split(std::int64_t size, int dim = 0) const;
  // |chunks| views along |dim| of ceil(size / chunks) elements each (fewer when they run out),
  // as torch.chunk.
  std::vector<Tensor> chunk(std::int64_t chunks, int dim = 0) const;
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

// Prints |t| as torch does: tensor([[ 0.1234, -1.0000], ...], device='vulkan:0', dtype=i32).
// Floats take 4 decimals (or scientific notation when the magnitudes span a wide range), whole
// floats print as "1.", bools as True/False; more than 1000 elements print the first and last
// three along every dimension with "..." between. The device is named unless it is cpu:0, the
// dtype unless it is f32, i64 or bool (torch's defaults). Waits for pending work.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace tessera
