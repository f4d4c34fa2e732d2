// Optimizers over a module's named parameters: SGD, Adam, AdamW. Each
// update is one fused loop over a parameter's data; the rules follow
// PyTorch's definitions (bias correction, eps outside the square root).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/parallel.h"
#include "autograd/tensor.h"

namespace qkv::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  explicit Optimizer(NamedTensors params, double lr);
  virtual ~Optimizer() = default;

  /// Counts the step, then applies one update from the parameters' current
  /// gradients (parameters without a gradient are skipped, and do not count it).
  /// With grad_scale ≠ 1 each gradient is first multiplied by it in place, as
  /// clip_grad_norm does, in the same pass over memory as the update (a
  /// chunk scaled, then updated while it is in cache): clip_factor() then
  /// step(factor) is clip_grad_norm() then step(), to the bit, one pass
  /// over the gradients fewer. (An update scales its gradient this way when
  /// it hands its element loop to for_each_element, as update()'s contract
  /// asks; a device's gradients are scaled before end_step().)
  void step(double grad_scale = 1.0);
  /// Drops every parameter's gradient (set_to_none = false: zeros, as
  /// torch 1.13's default; see Tensor::zero_grad).
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr);
  /// Steps taken so far.
  int64_t steps() const { return steps_; }
  /// Updates parameter `index` has taken: the steps it had a gradient in. Adam's
  /// bias correction counts these, as torch keeps its step per parameter.
  int64_t updates(size_t index) const { return updates_[index]; }
  /// For an optimizer that counts updates (Adam), the parameters whose count
  /// is not what load_state() infers from the state (steps() with state, 0
  /// without), by name: those updated in fewer steps than steps(). Empty in
  /// the usual case, when every parameter that has a gradient had it from the
  /// first step.
  std::map<std::string, int64_t> lagging_updates() const;
  const NamedTensors& params() const { return params_; }
  /// The kind, for checkpoints: "sgd", "adam", "adamw".
  virtual std::string name() const = 0;
  /// Hyper-parameters as text, for checkpoints and logs: all but the
  /// learning rate, which lr() holds (a schedule sets it at every step, and
  /// a training checkpoint's run settings record the rate it starts from).
  virtual std::map<std::string, std::string> hyperparameters() const = 0;

  /// Per-parameter state (moments, momentum buffers) under names like
  /// "<param>.exp_avg", for checkpoints. Created lazily on the first step.
  NamedTensors state() const;
  /// Restores what state(), steps() and lagging_updates() returned, after
  /// checking it all (check_state()).
  void load_state(const NamedTensors& state, int64_t steps, const std::map<std::string, int64_t>& lagging = {});
  /// Throws what load_state() would, changing nothing: a parameter holds all
  /// of its kind's buffers or none, of its shape and dtype, finite (and >= 0
  /// where state_buffers() says so); a lagging count is within the steps, at
  /// least 1 for a parameter with state and 0 for one without.
  void check_state(const NamedTensors& state, int64_t steps, const std::map<std::string, int64_t>& lagging = {}) const;

 protected:
  /// One parameter's update with its gradient; buffers from buffer(). A CPU
  /// update hands its element loop to for_each_element.
  virtual void update(size_t index, const Tensor& param, const Tensor& grad) = 0;
  /// Runs fn(begin, end) over elements [0, n) of one update, each element on
  /// its own (so any split gives the same bits); cost: work per element.
  /// Inside step() it runs after every update() has returned, all
  /// parameters' loops as one parallel region (one fork a step, not one per
  /// parameter), so fn must hold what it uses by value.
  void for_each_element(int64_t n, int64_t cost, std::function<void(int64_t, int64_t)> fn);
  /// Called once at the end of step(), after every update() has returned:
  /// where an optimizer launches the device updates it gathered.
  virtual void end_step() {}
  /// The buffers a parameter holds once updated, each with whether it is
  /// never negative (Adam's second moment); for load_state()'s checks.
  virtual std::map<std::string, bool> state_buffers() const = 0;
  /// Whether update() reads updates() (Adam's bias correction).
  virtual bool counts_updates() const { return false; }
  /// The named per-parameter buffer (zeros of the parameter's shape at first).
  Tensor& buffer(size_t index, const std::string& name);
  bool has_buffer(size_t index, const std::string& name) const;

 private:
  NamedTensors params_;
  std::vector<std::map<std::string, Tensor>> buffers_;
  double lr_;
  int64_t steps_ = 0;
  std::vector<int64_t> updates_;  // per parameter: the steps it had a gradient in
  struct Restored {               // what load_state() takes from a file, checked
    std::vector<std::map<std::string, Tensor>> buffers;
    std::vector<int64_t> updates;
  };
  Restored checked_state(const NamedTensors& state, int64_t steps, const std::map<std::string, int64_t>& lagging) const;
  std::pair<size_t, std::string> owner_of(const std::string& full) const;
  /// Throws unless buffer `b` (named `name`) still has parameter `index`'s shape, dtype and device.
  void check_fits(size_t index, const std::string& name, const Tensor& b) const;
  void check_buffer(size_t index, const std::string& full, const std::string& buffer, const Tensor& t,
                    const std::map<std::string, bool>& kinds) const;
  std::vector<ItemLoop>* pending_ = nullptr;  // during step(): the updates' loops, run together at its end
  int64_t pending_cost_ = 1;
};

struct SGDOptions {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

/// torch.optim.SGD: g += wd·p; b = μ·b + (1-τ)·g (b = g at first); g = nesterov ? g + μ·b : b; p -= lr·g.
class SGD : public Optimizer {
 public:
  SGD(NamedTensors params, const SGDOptions& options);
  std::string name() const override { return "sgd"; }
  std::map<std::string, std::string> hyperparameters() const override;

 protected:
  void update(size_t index, const Tensor& param, const Tensor& grad) override;
  void end_step() override;
  std::map<std::string, bool> state_buffers() const override;

 private:
  struct OnDevice {
    int64_t step;
    size_t index;
    bool first;  // its momentum buffer starts at this step
  };
  SGDOptions o_;                     // its lr is 0: the one rate is lr()
  std::vector<OnDevice> on_device_;  // device updates for end_step()
};

struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  /// Unset: PyTorch's default for the kind, 0 for Adam and 0.01 for AdamW.
  std::optional<double> weight_decay;
  /// AdamW only: which parameters decay. By default those of rank >= 2, so
  /// biases and LayerNorm parameters (rank 1) are left alone.
  std::function<bool(const std::string& name, const Tensor& param)> decays = [](const std::string&, const Tensor& p) {
    return p.dim() >= 2;
  };
};

/// torch.optim.Adam: g += wd·p (L2); m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
/// p -= lr · (m / (1-β1ᵗ)) / (√(v / (1-β2ᵗ)) + eps), t the parameter's updates().
class Adam : public Optimizer {
 public:
  Adam(NamedTensors params, const AdamOptions& options);
  std::string name() const override { return decoupled_ ? "adamw" : "adam"; }
  std::map<std::string, std::string> hyperparameters() const override;

 protected:
  Adam(NamedTensors params, const AdamOptions& options, bool decoupled);
  void update(size_t index, const Tensor& param, const Tensor& grad) override;
  void end_step() override;
  std::map<std::string, bool> state_buffers() const override { return {{"exp_avg", false}, {"exp_avg_sq", true}}; }
  bool counts_updates() const override { return true; }

 private:
  AdamOptions o_;  // its lr is 0: the one rate is lr()
  bool decoupled_;
  std::vector<bool> decays_;
  std::vector<std::pair<int64_t, size_t>> on_device_;  // (step, parameter): device updates for end_step()
};

/// torch.optim.AdamW: p -= lr·wd·p (decoupled, for the parameters `decays`
/// selects), then the Adam step without weight decay in the gradient.
class AdamW : public Adam {
 public:
  AdamW(NamedTensors params, const AdamOptions& options) : Adam(std::move(params), options, true) {}
};

/// What clip_grad_norm computes before it scales: the gradients' global L2
/// norm, and the factor it scales them by (1 where it leaves them).
struct ClipFactor {
  double norm = 0, factor = 1;
};
ClipFactor clip_factor(const NamedTensors& params, double max_norm);

/// Scales all gradients so their global L2 norm is at most max_norm (>= 0;
/// as torch.nn.utils.clip_grad_norm_: factor max_norm / (norm + 1e-6) when
/// that is below 1, so max_norm 0 zeroes them, and a NaN factor, from a NaN
/// gradient, makes them all NaN). Returns the norm before clipping.
double clip_grad_norm(const NamedTensors& params, double max_norm);

}  // namespace qkv::optim
