// Learning-rate schedules: the rate for each update, as a function of the
// update's index (0 for the first), so a resumed run needs only the step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace qkv::optim {

class Schedule {
 public:
  virtual ~Schedule() = default;
  /// The learning rate for update number `step` (counting from 0).
  virtual double lr(int64_t step) const = 0;
};

/// The same rate throughout.
class ConstantLR : public Schedule {
 public:
  explicit ConstantLR(double lr);
  double lr(int64_t) const override { return lr_; }

 private:
  double lr_;
};

/// lr · gamma^⌊step / step_size⌋ (torch.optim.lr_scheduler.StepLR).
class StepLR : public Schedule {
 public:
  StepLR(double lr, int64_t step_size, double gamma);
  double lr(int64_t step) const override;

 private:
  double lr_;
  int64_t step_size_;
  double gamma_;
};

/// Linear warm-up to lr over `warmup` updates ((step+1)/warmup · lr), then a
/// cosine from lr down to min_lr at update `total`, and min_lr after it.
class CosineLR : public Schedule {
 public:
  CosineLR(double lr, int64_t warmup, int64_t total, double min_lr = 0);
  double lr(int64_t step) const override;

 private:
  double lr_;
  int64_t warmup_, total_;
  double min_lr_;
};

}  // namespace qkv::optim
