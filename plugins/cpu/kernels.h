// The CPU plugin's kernels: every op of the core's op table, on host memory.
#pragma once

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "blas.h"
#include "tessera/host.h"
#include "tessera/kernel.h"
#include "thread_pool.h"

namespace tessera::cpu {

// Scratch buffers kept between calls and lent to whichever thread needs one (no thread_local:
// see thread_pool.h). Thread-safe.
class ScratchBuffers {
 public:
  // A buffer of at least |floats| floats, handed back when the lease ends.
  class Lease {
   public:
    Lease(ScratchBuffers& owner, std::int64_t floats) : owner_(owner) {
      {
        std::lock_guard lock(owner_.mu_);
        if (!owner_.free_.empty()) {
          buffer_ = std::move(owner_.free_.back());
          owner_.free_.pop_back();
        }
      }
      if (static_cast<std::int64_t>(buffer_.size()) < floats)
        buffer_.resize(static_cast<std::size_t>(floats));
    }
    ~Lease() {
      std::lock_guard lock(owner_.mu_);
      owner_.free_.push_back(std::move(buffer_));
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    float* data() { return buffer_.data(); }

   private:
    ScratchBuffers& owner_;
    std::vector<float> buffer_;
  };

 private:
  std::mutex mu_;
  std::vector<std::vector<float>> free_;
};

// What every CPU kernel may use. Owned by the device.
struct Context {
  ThreadPool& pool;
  const Blas& blas;
  ScratchBuffers& scratch;
  HostQueue& queue;  // the device's: kernels report their time to it while it profiles
};

// CPU kernels run synchronously on the calling thread (and the pool): the CPU queue has nothing
// to wait for, so launch() returns with the outputs written. While the queue profiles, each
// launch's wall time is recorded under the op's name.
class CpuKernel final : public Kernel {
 public:
  using LaunchFn = void (*)(const OpCall& call, Context& ctx);
  using SupportFn = Support (*)(const OpCall& call);
  CpuKernel(Context& ctx, LaunchFn run, SupportFn rule) : ctx_(ctx), launch_(run), rule_(rule) {}
  Support supports(const OpCall& call) const override { return rule_(call); }
  void launch(const OpCall& call, Queue&) const override;

 private:
  Context& ctx_;
  LaunchFn launch_;
  SupportFn rule_;
};
using KernelFn = CpuKernel::LaunchFn;
using SupportFn = CpuKernel::SupportFn;

using KernelTable = std::array<std::unique_ptr<Kernel>, kNumOps>;

// Accepts calls whose first input (or, without inputs, first output) is f32 and whose outputs are
// f32 or i32: the dtype rule of every CPU kernel but copy and fill.
Support f32_only(const OpCall& call);

// Each fills its part of the table.
void register_elementwise(KernelTable& table, Context& ctx);
void register_reductions(KernelTable& table, Context& ctx);
void register_nn(KernelTable& table, Context& ctx);
void register_optim(KernelTable& table, Context& ctx);

// --- tensor API: casts, factories, indexing ---
void register_tensor(KernelTable& table, Context& ctx);

// --- element-wise math, comparisons, selection ---
void register_pointwise(KernelTable& table, Context& ctx);

// --- reductions, normalisation, losses, optimizers ---
void register_reduce(KernelTable& table, Context& ctx);  // kernels_reduce.cpp
void register_norms(KernelTable& table, Context& ctx);   // kernels_norms.cpp
void register_losses(KernelTable& table, Context& ctx);  // kernels_losses.cpp

// --- nn: batched matmul, embedding, pooling, attention ---

// attention
void register_attention(KernelTable& table, Context& ctx);
void register_bmm(KernelTable& table, Context& ctx);
void register_embedding(KernelTable& table, Context& ctx);
void register_avg_pool(KernelTable& table, Context& ctx);
// Row-major C[m,n] = op(A) op(B) + beta * C with A and B stored as given (kernels_nn.cpp): on the
// calling thread (gemm_serial), or cut into blocks over the pool (gemm, serial inside a worker).
// Any extent may be 0 (k == 0 scales C by beta).
void gemm_serial(const Blas& blas, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                 float* c, std::int64_t ldc);
void gemm(Context& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
          const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
          std::int64_t ldc);
// The same with A and B of 16-bit float type |t| (f16 or bf16, as bits) and C in f32: bf16 by
// oneDNN's bf16 GEMM where it loaded (AVX-512 BF16 or AMX where the CPU has them), otherwise A
// and B widened to f32 first (widen) and multiplied by gemm.
void gemm_half(Context& ctx, DType t, bool ta, bool tb, std::int64_t m, std::int64_t n,
               std::int64_t k, const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b,
               std::int64_t ldb, float beta, float* c, std::int64_t ldc);
// |n| elements of f16 or bf16 |t| as f32, and back (rounding to nearest even), on the pool.
std::vector<float> widen(Context& ctx, DType t, const std::uint16_t* v, std::int64_t n);
void narrow(Context& ctx, DType t, const float* v, std::uint16_t* out, std::int64_t n);

// Host pointers of a call's tensors (CPU buffers are host memory).
template <typename T = float>
inline const T* in_ptr(const OpCall& call, int i) {
  return call.in(i).host_data<T>();
}
template <typename T = float>
inline T* out_ptr(const OpCall& call, int i) {
  return call.out(i).host_data<T>();
}

// Grain sizes: below these a loop runs on the calling thread alone.
inline constexpr std::int64_t kElementGrain = 1 << 15;

// Rows per chunk for loops over rows of |row_length| elements: about kElementGrain elements.
inline std::int64_t row_grain(std::int64_t row_length) {
  return std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(row_length, 1));
}

// Element offset of row |row| of a view: rows index every dimension but the last, row-major.
inline std::int64_t row_offset(const Shape& shape, const Strides& strides, std::int64_t row) {
  std::int64_t offset = 0;
  for (int d = shape.rank() - 2; d >= 0; --d) {
    offset += (row % shape[d]) * strides[d];
    row /= shape[d];
  }
  return offset;
}

}  // namespace tessera::cpu
