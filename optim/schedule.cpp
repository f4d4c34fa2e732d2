#include "optim/schedule.h"

#include <cmath>
#include <numbers>

#include "autograd/error.h"

namespace qkv::optim {

namespace {
void check_rate(const char* who, double lr) {
  QKV_CHECK(std::isfinite(lr) && lr >= 0, who, ": learning rate must be finite and >= 0, got ", lr);
}
}  // namespace

ConstantLR::ConstantLR(double lr) : lr_(lr) { check_rate("ConstantLR", lr); }

StepLR::StepLR(double lr, int64_t step_size, double gamma) : lr_(lr), step_size_(step_size), gamma_(gamma) {
  check_rate("StepLR", lr);
  QKV_CHECK(step_size > 0 && gamma > 0, "StepLR: step_size must be > 0 and gamma > 0, got ", step_size, ", ", gamma);
}
double StepLR::lr(int64_t step) const {
  QKV_CHECK(step >= 0, "StepLR: step ", step, " is negative");
  return lr_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

CosineLR::CosineLR(double lr, int64_t warmup, int64_t total, double min_lr)
    : lr_(lr), warmup_(warmup), total_(total), min_lr_(min_lr) {
  check_rate("CosineLR", lr);
  check_rate("CosineLR", min_lr);
  QKV_CHECK(warmup >= 0 && total >= warmup, "CosineLR: need 0 <= warmup <= total, got warmup ", warmup, ", total ",
            total);
}

double CosineLR::lr(int64_t step) const {
  QKV_CHECK(step >= 0, "CosineLR: step ", step, " is negative");  // a warm-up rate below 0 would climb the loss
  if (step < warmup_) return lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (step >= total_) return min_lr_;
  double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return min_lr_ + 0.5 * (lr_ - min_lr_) * (1 + std::cos(std::numbers::pi * progress));
}

}  // namespace qkv::optim
