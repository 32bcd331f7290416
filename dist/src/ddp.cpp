// DDPStrategy's gradient synchronisation: buckets, hooks, the overlapped all-reduce.
#include "tessera/dist/ddp.h"

#include <chrono>
#include <cmath>
#include <mutex>

#include <fmt/format.h>

#include "dist_internal.h"
#include "tessera/checked.h"
#include "tessera/dist/dist.h"
#include "tessera/log.h"
#include "tessera/ops.h"
#include "tessera/runtime.h"
#include "tessera/train/modules.h"

namespace tessera::dist {

using Clock = std::chrono::steady_clock;

struct DDPStrategy::Stats {
  std::mutex mutex;
  DDPCounters counters;
};

// Parameters (indices into params_) whose gradients are all-reduced together as one flat f32
// tensor, |offsets| their element offsets in it.
struct DDPStrategy::Bucket {
  std::vector<std::size_t> params;
  std::vector<std::int64_t> offsets;
  std::int64_t numel = 0;
  DType dtype = DType::f32;
  std::vector<bool> got;  // per parameter of the bucket: its hook fired in this pass
  std::size_t ready = 0;
  bool launched = false;
  Tensor flat;  // f32, on the parameters' device: averaged once |done| is ready
  std::future<void> done;
};

DDPStrategy::DDPStrategy(DDPOptions options)
    : options_(options), stats_(std::make_shared<Stats>()) {
  if (!(options_.bucket_cap_mb > 0) || !std::isfinite(options_.bucket_cap_mb))
    throw ConfigError(fmt::format("DDPOptions: bucket_cap_mb={} is not valid: pass a positive size",
                                  options_.bucket_cap_mb));
  if (options_.num_nodes < 0)
    throw ConfigError(fmt::format(
        "DDPOptions: num_nodes={} is not valid: pass the number of machines (0: not checked)",
        options_.num_nodes));
  register_strategies();
  group_ = &MpiProcessGroup::world();
}

DDPStrategy::~DDPStrategy() {
  for (auto& h : hooks_) h.remove();
  for (auto& b : buckets_)
    if (b->done.valid()) b->done.wait();
}

train::ProcessGroup* DDPStrategy::process_group() {
  return group_;
}

DDPCounters DDPStrategy::counters() const {
  std::lock_guard lock(stats_->mutex);
  return stats_->counters;
}

void DDPStrategy::clear_buckets() {
  for (auto& h : hooks_) h.remove();
  hooks_.clear();
  for (auto& b : buckets_)
    if (b->done.valid()) b->done.wait();
  buckets_.clear();
  params_.clear();
  slot_.clear();
  buffers_.clear();
  next_launch_ = 0;
  syncing_ = false;
}

void DDPStrategy::setup_module(train::Module& module) {
  clear_buckets();
  std::vector<train::NamedParameter> named = module.named_parameters();
  const Device* device = nullptr;
  if (!named.empty())
    device = &named.front().variable->value().device();
  else if (auto b = module.named_buffers(); !b.empty())
    device = &b.front().tensor->device();
  std::vector<std::string> mine =
      device ? fingerprint(module, *device) : fingerprint(module, tessera::default_device());
  check_fingerprints(*group_, mine);

  // Rank 0's parameters and buffers everywhere.
  std::vector<Tensor> values;
  std::vector<Tensor*> targets;
  values.reserve(named.size());
  for (const auto& p : named) values.push_back(p.variable->value());
  for (Tensor& v : values) targets.push_back(&v);
  for (const auto& b : module.named_buffers()) {
    targets.push_back(b.tensor);
    buffers_.push_back(b.tensor);
  }
  broadcast_tensors(*group_, targets);
  for (std::size_t i = 0; i < named.size(); ++i)
    if (!values[i].shares_storage(named[i].variable->value()))
      named[i].variable->set_value(values[i]);

  // Buckets over the trainable parameters in reverse registration order.
  for (auto it = named.rbegin(); it != named.rend(); ++it)
    if (it->variable->requires_grad()) params_.push_back(*it->variable);
  const double cap = options_.bucket_cap_mb * 1024 * 1024;
  slot_.resize(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& v = params_[i].value();
    const double bytes = static_cast<double>(v.nbytes());
    Bucket* b = buckets_.empty() ? nullptr : buckets_.back().get();
    if (!b || b->dtype != v.dtype() ||
        (b->numel > 0 && static_cast<double>(b->numel * dtype_size(b->dtype)) + bytes > cap)) {
      buckets_.push_back(std::make_unique<Bucket>());
      b = buckets_.back().get();
      b->dtype = v.dtype();
    }
    slot_[i] = {buckets_.size() - 1, b->params.size()};
    b->params.push_back(i);
    b->offsets.push_back(b->numel);
    const auto numel = checked_add(b->numel, v.numel());
    if (!numel) throw InvalidArgument("DDPStrategy: a gradient bucket's size overflows");
    b->numel = *numel;
    b->got.push_back(false);
  }
  for (std::size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(
        params_[i].register_post_accumulate_grad_hook([this, i](train::Variable&) { on_grad(i); }));
  log().debug("ddp: {} parameter(s) in {} bucket(s) of at most {} MiB, {} buffer(s)",
              params_.size(), buckets_.size(), options_.bucket_cap_mb, buffers_.size());
}

void DDPStrategy::before_backward(bool sync) {
  syncing_ = sync;
}

void DDPStrategy::on_grad(std::size_t param) {
  if (!syncing_) return;
  auto [b, j] = slot_[param];
  Bucket& bucket = *buckets_[b];
  if (bucket.got[j] || bucket.launched) return;
  bucket.got[j] = true;
  ++bucket.ready;
  launch_ready();
}

void DDPStrategy::launch_ready() {
  // In index order on every rank, so that the all-reduces of the ranks match.
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_]->ready == buckets_[next_launch_]->params.size())
    launch(*buckets_[next_launch_++]);
}

void DDPStrategy::launch(Bucket& bucket) {
  std::vector<Tensor> pieces;
  pieces.reserve(bucket.params.size());
  for (std::size_t p : bucket.params) {
    const Tensor& value = params_[p].value();
    const Tensor& g = params_[p].grad();
    // A parameter that got no gradient in this pass counts as zeros.
    pieces.push_back(g.defined()
                         ? g.reshape(Shape({value.numel()}))
                         : Tensor::full(Shape({value.numel()}), 0, value.dtype(), &value.device()));
  }
  // A new tensor: a gradient may be the very tensor another leaf holds, so none is written into.
  Tensor flat = pieces.size() == 1 ? copy(pieces[0]) : cat(pieces, 0);
  if (flat.dtype() != DType::f32) flat = flat.to(DType::f32);
  bucket.flat = flat;
  bucket.launched = true;
  const float scale = 1.0f / static_cast<float>(group_->size());
  bucket.done = group_->post([flat, scale, group = group_, stats = stats_]() mutable {
    const auto t0 = Clock::now();
    std::vector<float> host(static_cast<std::size_t>(flat.numel()));
    flat.copy_to_host(host.data(), host.size() * sizeof(float), DType::f32);
    group->all_reduce_sum(std::span<float>(host));
    for (float& v : host) v *= scale;
    flat.copy_from_host(host.data(), host.size() * sizeof(float));
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    std::lock_guard lock(stats->mutex);
    stats->counters.bytes_all_reduced += static_cast<std::int64_t>(host.size() * sizeof(float));
    stats->counters.buckets += 1;
    stats->counters.all_reduce_seconds += seconds;
  });
}

void DDPStrategy::wait_all() {
  for (auto& b : buckets_)
    if (b->done.valid()) b->done.wait();
}

void DDPStrategy::after_backward(bool sync) {
  syncing_ = false;
  if (!sync) return;
  // Buckets whose hooks did not all fire (parameters without a gradient, or no before_backward).
  for (auto& b : buckets_) b->ready = b->params.size();
  launch_ready();
  const auto t0 = Clock::now();
  std::exception_ptr failed;
  for (auto& b : buckets_) {
    try {
      b->done.get();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  {
    std::lock_guard lock(stats_->mutex);
    stats_->counters.wait_seconds += waited;
    stats_->counters.syncs += 1;
  }
  for (auto& b : buckets_) {
    std::fill(b->got.begin(), b->got.end(), false);
    b->ready = 0;
    b->launched = false;
  }
  next_launch_ = 0;
  if (failed) std::rethrow_exception(failed);
  for (auto& b : buckets_) {
    const Tensor flat = b->dtype == DType::f32 ? b->flat : b->flat.to(b->dtype);
    for (std::size_t k = 0; k < b->params.size(); ++k) {
      train::Variable& p = params_[b->params[k]];
      p.set_grad(flat.narrow(0, b->offsets[k], p.value().numel()).reshape(p.shape()));
    }
    b->flat = Tensor();
  }
  if (options_.broadcast_buffers && !buffers_.empty() && group_->size() > 1)
    broadcast_tensors(*group_, buffers_);
}

void DDPStrategy::on_exception(const std::exception& error) {
  if (group_->size() > 1) group_->abort(failure_message(*group_, error));
}

void DDPStrategy::teardown() {
  const DDPCounters c = counters();
  clear_buckets();
  log().info(
      "ddp: rank {} of {}: {} all-reduced in {} bucket(s) over {} synchronised step(s), {:.3f} s "
      "in all-reduce, {:.3f} s waited after backward",
      group_->rank(), group_->size(), format_bytes(static_cast<std::uint64_t>(c.bytes_all_reduced)),
      c.buckets, c.syncs, c.all_reduce_seconds, c.wait_seconds);
}

}  // namespace tessera::dist
