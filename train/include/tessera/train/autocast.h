// Mixed precision as torch.autocast and torch.cuda.amp.GradScaler (Lightning's precision
// "16-mixed" and "bf16-mixed": TrainerOptions::precision, tessera-train --precision).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tessera/dtype.h"
#include "tessera/train/autograd.h"

namespace tessera::train {

class Optimizer;

// Inside an AutocastGuard(DType::f16 or DType::bf16) on this thread, matmul, linear, bmm and
// scaled dot-product attention of f32 Variables compute in that dtype: their inputs are cast to
// it once (the attention's from the views of its heads, in place of their copy), the products
// sum in f32 and give their f32 sums (MatmulAttrs::out_dtype, AttentionAttrs::out_dtype), a
// linear's f32 bias added in the same kernel where the device can. Their backward casts the
// incoming gradient once and takes f32 gradients from its products. Every other op stays f32:
// unlike torch.autocast, whose products give the low dtype for the ops that follow, because
// every op after them here takes f32 (docs/user-guide.md). Guards nest, the innermost winning;
// AutocastGuard(DType::f32) turns autocast off inside one. Throws InvalidArgument for a dtype
// other than f32, f16, bf16.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

// The dtype autocast multiplies in on this thread; nullopt outside a guard (or under f32).
std::optional<DType> autocast_dtype();

// Dynamic loss scaling for f16 training, as torch.cuda.amp.GradScaler: the loss is multiplied by
// a scale (65536 at first) before backward(), so that small gradients survive f16; before the
// optimizer steps, the gradients are divided by it and checked. A step whose gradients hold an
// infinity or NaN is skipped (counted by skipped_steps()) and the scale halved; after
// growth_interval steps in a row without one, the scale doubles. bf16 has f32's range and needs
// none. Thread use: one training loop.
class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    std::int64_t growth_interval = 2000;
  };
  // Throws InvalidArgument for a scale or factor that is not positive and finite, a growth
  // factor not above 1, a backoff factor not in (0, 1), or a growth interval below 1.
  GradScaler();
  explicit GradScaler(Options options);

  // loss * scale, to call backward() on.
  Variable scale(const Variable& loss) const;
  // Divides every gradient of |optimizer|'s parameters by the scale (each replaced, as
  // clip_grad_norm_ does) and notes whether any is not finite, through their total norm (one
  // value read back, so it waits for the device; a norm past f32's range, gradients beyond about
  // 1e19, counts as not finite too). Call at most once per step, after backward() and before
  // clipping; step() calls it when it was not called.
  void unscale_(Optimizer& optimizer);
  // optimizer.step() unless a gradient was not finite; returns whether it stepped.
  bool step(Optimizer& optimizer);
  // After step(): halves the scale after a skipped step, grows it after growth_interval steps in
  // a row without one, and readies the next step.
  void update();

  double get_scale() const { return scale_; }
  std::int64_t skipped_steps() const { return skipped_; }

  // What a checkpoint keeps, as torch's GradScaler.state_dict(): "scale", "growth_factor",
  // "backoff_factor", "growth_interval", "growth_tracker" (steps in a row without a non-finite
  // gradient) and "skipped_steps", each a decimal number that reads back to the same value. Call
  // between steps (after update()).
  std::map<std::string, std::string> state_dict() const;
  // Takes |state| (every key of state_dict(), no other) after checking all of it; throws
  // InvalidArgument naming the key otherwise (a value not a number, or not one the options
  // accept; growth_tracker and skipped_steps must be integers of 0 or more) and changes nothing.
  void load_state_dict(const std::map<std::string, std::string>& state);
  // The reason load_state_dict() would refuse |state|, or "" when it would take it.
  static std::string check_state(const std::map<std::string, std::string>& state);

 private:
  Options options_;
  double scale_;
  std::int64_t good_steps_ = 0;  // steps in a row without a non-finite gradient
  std::int64_t skipped_ = 0;
  bool unscaled_ = false;   // unscale_ ran for this step
  bool found_inf_ = false;  // ... and found a non-finite gradient
};

}  // namespace tessera::train
