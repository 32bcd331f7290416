// Synchronised BatchNorm (torch.nn.SyncBatchNorm): statistics over every process's batch.
#include "sync_batch_norm.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "tessera/errors.h"
#include "tessera/ops.h"
#include "tessera/train/layers.h"

namespace tessera::train {

std::int64_t convert_sync_batchnorm(Module& module, ProcessGroup* group) {
  std::int64_t n = 0;
  for (Module* m : module.modules())
    if (auto* bn = dynamic_cast<BatchNorm2d*>(m)) {
      bn->set_process_group(group);
      ++n;
    }
  return n;
}

namespace detail {

namespace {

// A per-channel host vector as a [1, C, 1, 1] tensor on |device| (broadcasts over [N, C, H, W]).
Tensor channels(const std::vector<double>& v, Device& device) {
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from(f, Shape{1, static_cast<std::int64_t>(v.size()), 1, 1}, &device);
}

}  // namespace

Variable sync_batch_norm(const Variable& x, const Variable& weight, const Variable& bias,
                         const Tensor& running_mean, const Tensor& running_var, double momentum,
                         double eps, ProcessGroup& group) {
  const Tensor xv = x.value();
  const Shape& s = xv.shape();
  const std::int64_t c = s[1];
  const auto uc = static_cast<std::size_t>(c);
  Device& device = xv.device();
  const std::vector<int> dims{0, 2, 3};
  // This process's count, mean and sum of squared deviations per channel (Chan et al.'s parallel
  // variance: the pieces sum exactly, in double, whatever the split).
  const double n_local = static_cast<double>(s[0]) * static_cast<double>(s[2] * s[3]);
  std::vector<double> local_mean(uc, 0.0), local_m2(uc, 0.0);
  if (n_local > 0) {
    const Tensor m = tessera::mean(xv, dims, true);
    const Tensor d = tessera::sub(xv, m);
    const Tensor m2 = tessera::sum(tessera::mul(d, d), dims);
    const std::vector<float> read =
        tessera::cat({m.reshape(Shape{c}), m2.reshape(Shape{c})}, 0).to_vector<float>();
    for (std::size_t i = 0; i < uc; ++i) {
      local_mean[i] = read[i];
      local_m2[i] = read[uc + i];
    }
  }
  std::vector<double> sums(2 * uc + 1);
  for (std::size_t i = 0; i < uc; ++i) {
    sums[i] = n_local * local_mean[i];
    sums[uc + i] = local_m2[i] + n_local * local_mean[i] * local_mean[i];
  }
  sums[2 * uc] = n_local;
  group.all_reduce_sum(std::span<double>(sums));
  const double n = sums[2 * uc];
  if (n <= 1)
    throw InvalidArgument(fmt::format(
        "BatchNorm2d (synchronised over {} processes): expected more than 1 value per channel "
        "when training, got a job's batch of {} for input {} on this process",
        group.size(), n, s.str()));
  std::vector<double> mean(uc), var(uc), invstd(uc), unbiased(uc);
  for (std::size_t i = 0; i < uc; ++i) {
    mean[i] = sums[i] / n;
    const double m2 = std::max(0.0, sums[uc + i] - n * mean[i] * mean[i]);
    var[i] = m2 / n;
    unbiased[i] = m2 / (n - 1);
    invstd[i] = 1.0 / std::sqrt(var[i] + eps);
  }
  const Tensor mean_t = channels(mean, device).reshape(Shape{c});
  const Tensor var_t = channels(var, device).reshape(Shape{c});
  const Tensor w = weight.defined() ? weight.value() : Tensor();
  const Tensor b = bias.defined() ? bias.value() : Tensor();
  // Normalising by given statistics is batch_norm in evaluation mode with them as its running
  // statistics.
  BatchNormResult r = tessera::batch_norm(xv, w, b, mean_t, var_t, false, momentum, eps);
  if (running_mean.defined()) {
    tessera::copy_(running_mean, tessera::add(tessera::mul_scalar(running_mean, 1.0 - momentum),
                                              tessera::mul_scalar(mean_t, momentum)));
    const Tensor unbiased_t = channels(unbiased, device).reshape(Shape{c});
    tessera::copy_(running_var, tessera::add(tessera::mul_scalar(running_var, 1.0 - momentum),
                                             tessera::mul_scalar(unbiased_t, momentum)));
  }
  ProcessGroup* pg = &group;
  return make_result(
      r.y, {x, weight, bias},
      [xv, w, eps, n, pg, uc, dev = &device, mean4 = channels(mean, device), mean_t,
       invstd_t = r.save_invstd, invstd, dims](const Tensor& g) -> std::vector<Tensor> {
        const Tensor xmu = tessera::sub(xv, mean4);
        const std::vector<float> local =
            tessera::cat({tessera::sum(g, dims), tessera::sum(tessera::mul(g, xmu), dims)}, 0)
                .to_vector<float>();
        std::vector<double> global(local.begin(), local.end());
        pg->all_reduce_sum(std::span<double>(global));
        // dx = w * invstd * (dy - sum(dy) / n - (x - mean) * invstd^2 * sum(dy * (x - mean)) / n),
        // with the sums over every process: the evaluation-mode gradient of that bracket.
        std::vector<double> a(uc), k(uc);
        for (std::size_t i = 0; i < uc; ++i) {
          a[i] = global[i] / n;
          k[i] = global[uc + i] / n * invstd[i] * invstd[i];
        }
        const Tensor bracket =
            tessera::sub(tessera::sub(g, channels(a, *dev)), tessera::mul(xmu, channels(k, *dev)));
        const NormGrads dx =
            tessera::batch_norm_backward(bracket, xv, w, mean_t, invstd_t, false, eps);
        // The weight's and bias's gradients are this process's: sum(dy * xhat), sum(dy).
        const NormGrads local_wb =
            tessera::batch_norm_backward(g, xv, w, mean_t, invstd_t, false, eps);
        return {dx.x, local_wb.weight, local_wb.bias};
      });
}

}  // namespace detail
}  // namespace tessera::train
