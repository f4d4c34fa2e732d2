#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <type_traits>
#include <vector>

#include "autograd/error.h"
#include "autograd/parallel.h"
#include "autograd/simd.h"
#include "io/metadata.h"
#include "optim/device_kernels.h"
#include "optim/optimizer_math.h"

namespace qkv::optim {

namespace {
// Elements [begin, end) of a CPU gradient times `factor`: float32 through the vector kernel (this file
// is built for the baseline level only), the same bits as ScaleItem, the reference that float64 and the
// device kernels run.
std::function<void(int64_t, int64_t)> grad_scaler(const Tensor& g, double factor) {
  std::function<void(int64_t, int64_t)> fn;
  dispatch_floating(g.dtype(), "clip_grad_norm", [&](auto zero) {
    using T = decltype(zero);
    fn = [scale = math::ScaleItem<T>{g.data<T>(), factor}](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float>)
        simd::scale_by_double(scale.g + begin, scale.factor, end - begin);
      else
        for (int64_t i = begin; i < end; ++i) scale(i);
    };
  });
  return fn;
}

// Elements a chunk of the fused scale and update takes: 16 KiB of float gradient, still in L1 when the update
// reads it back.
constexpr int64_t kScaleChunk = 4096;

// The update loops from `first` on (one parameter's) scale each chunk of its gradient just before they update
// from it: elementwise both, so the bits of scaling everything first.
void scale_first(std::vector<ItemLoop>& loops, size_t first, const Tensor& grad, double factor) {
  for (size_t k = first; k < loops.size(); ++k)
    loops[k].fn = [update = std::move(loops[k].fn), scale = grad_scaler(grad, factor)](int64_t begin, int64_t end) {
      for (int64_t at = begin; at < end; at += kScaleChunk) {
        const int64_t stop = std::min(end, at + kScaleChunk);
        scale(at, stop);
        update(at, stop);
      }
    };
}
}  // namespace

Optimizer::Optimizer(NamedTensors params, double lr)
    : params_(std::move(params)), buffers_(params_.size()), updates_(params_.size(), 0) {
  set_lr(lr);
  std::set<std::string> names;
  std::set<const TensorImpl*> tensors;
  for (const auto& [name, p] : params_) {
    QKV_CHECK(p.defined() && is_floating(p.dtype()) && p.requires_grad(), "optimizer: parameter '", name,
              "' must be a float tensor that requires grad");
    QKV_CHECK(names.insert(name).second, "optimizer: parameter name '", name, "' given twice");
    // torch 1.13 warns and steps such a tensor twice a step
    QKV_CHECK(tensors.insert(p.impl()).second, "optimizer: parameter '", name,
              "' is a tensor already given under another name: it would be stepped twice");
  }
}

void Optimizer::set_lr(double lr) {
  QKV_CHECK(lr >= 0 && std::isfinite(lr), "optimizer: learning rate must be finite and >= 0, got ", lr);
  lr_ = lr;
}

void Optimizer::step(double grad_scale) {
  // Every buffer must still fit its parameter before anything counts the step (check_fits).
  for (size_t i = 0; i < params_.size(); ++i)
    for (const auto& [name, b] : buffers_[i]) check_fits(i, name, b);
  ++steps_;
  std::vector<ItemLoop> loops;
  std::vector<Tensor> device_grads;  // scaled before end_step() launches their updates
  pending_ = &loops, pending_cost_ = 1;
  try {
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor grad = params_[i].second.grad();
      if (!grad.defined()) continue;
      ++updates_[i];
      params_[i].second.modified_in_place();  // a graph recorded before this step can no longer run backward
      const size_t first_loop = loops.size();
      update(i, params_[i].second, grad);
      if (grad_scale == 1) continue;
      if (grad.device().is_cpu())
        scale_first(loops, first_loop, grad, grad_scale);
      else
        device_grads.push_back(grad);
    }
    if (!device_grads.empty()) device::scale(device_grads, grad_scale);
    end_step();  // device launches go first: the device runs them while the CPU runs its loops
  } catch (...) {
    pending_ = nullptr;
    throw;
  }
  pending_ = nullptr;
  parallel_for_all(loops, pending_cost_);
}

void Optimizer::for_each_element(int64_t n, int64_t cost, std::function<void(int64_t, int64_t)> fn) {
  if (!pending_) return parallel_for(n, cost, fn);
  pending_->push_back({n, std::move(fn)});
  pending_cost_ = std::max(pending_cost_, cost);
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const auto& [name, p] : params_) p.zero_grad(set_to_none);
}

Tensor& Optimizer::buffer(size_t index, const std::string& name) {
  Tensor& b = buffers_[index][name];
  const Tensor& p = params_[index].second;
  if (!b.defined()) b = Tensor::zeros(p.shape(), p.dtype(), p.device());  // (step() checked the existing ones)
  return b;
}

// An update loops over the parameter's elements through its buffers: they must still fit it.
void Optimizer::check_fits(size_t index, const std::string& name, const Tensor& b) const {
  const Tensor& p = params_[index].second;
  QKV_CHECK(b.shape() == p.shape() && b.dtype() == p.dtype() && b.device() == p.device(), "optimizer: parameter '",
            params_[index].first, "' is now ", dtype_name(p.dtype()), " ", shape_str(p.shape()), " on ",
            p.device().str(), " but its ", name, " is ", dtype_name(b.dtype()), " ", shape_str(b.shape()), " on ",
            b.device().str(),
            ": it changed after the optimizer was made (assign_, Module::to); make the optimizer again");
}

bool Optimizer::has_buffer(size_t index, const std::string& name) const { return buffers_[index].count(name) > 0; }

NamedTensors Optimizer::state() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i)
    for (const auto& [name, t] : buffers_[i]) out.emplace_back(params_[i].first + "." + name, t);
  return out;
}

std::map<std::string, int64_t> Optimizer::lagging_updates() const {
  std::map<std::string, int64_t> out;
  if (!counts_updates()) return out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (updates_[i] != (buffers_[i].empty() ? 0 : steps_)) out[params_[i].first] = updates_[i];
  return out;
}

namespace {
// The first element of a float tensor below 0, else -1.
int64_t first_negative(const Tensor& t) {
  int64_t at = -1;
  dispatch_floating(t.dtype(), "optimizer state", [&](auto zero) {
    using T = decltype(zero);
    const T* v = t.data<T>();
    for (int64_t i = 0; i < t.numel() && at < 0; ++i)
      if (v[i] < 0) at = i;
  });
  return at;
}
}  // namespace

// The index of the parameter a state entry "<param>.<buffer>" belongs to, and the buffer's name; throws when none.
std::pair<size_t, std::string> Optimizer::owner_of(const std::string& full) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& p = params_[i].first;
    if (full.size() > p.size() + 1 && full.compare(0, p.size(), p) == 0 && full[p.size()] == '.' &&
        full.find('.', p.size() + 1) == std::string::npos)
      return {i, full.substr(p.size() + 1)};
  }
  throw Error(cat("optimizer state '", printable(full), "' belongs to no parameter"));
}

// One state entry, as a file gives it: a buffer this optimizer keeps, of its parameter's shape and dtype, finite
// (a NaN moment would make the first resumed step's weights NaN), and >= 0 where it is never negative (a
// negative second moment, its square root).
void Optimizer::check_buffer(size_t index, const std::string& full, const std::string& buffer, const Tensor& t,
                             const std::map<std::string, bool>& kinds) const {
  const Tensor& param = params_[index].second;
  QKV_CHECK(kinds.count(buffer), "optimizer state '", printable(full), "': ", name(), " keeps no '", printable(buffer),
            "'");
  QKV_CHECK(t.shape() == param.shape() && t.dtype() == param.dtype(), "optimizer state '", full, "' is ",
            shape_str(t.shape()), " ", dtype_name(t.dtype()), ", its parameter ", shape_str(param.shape()), " ",
            dtype_name(param.dtype()));
  const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  const int64_t bad = first_non_finite(host);
  QKV_CHECK(bad < 0, "optimizer state '", full, "' holds ", host.to_vector()[bad], " at element ", bad);
  const int64_t negative = kinds.at(buffer) ? first_negative(host) : -1;
  QKV_CHECK(negative < 0, "optimizer state '", full, "' holds ", host.to_vector()[negative], " at element ", negative,
            ", which is never negative");
}

Optimizer::Restored Optimizer::checked_state(const NamedTensors& state, int64_t steps,
                                             const std::map<std::string, int64_t>& lagging) const {
  QKV_CHECK(steps >= 0, "optimizer: negative step count ", steps);
  const std::map<std::string, bool> kinds = state_buffers();
  Restored r{std::vector<std::map<std::string, Tensor>>(params_.size()), std::vector<int64_t>(params_.size())};
  for (const auto& [full, t] : state) {
    auto [i, buffer] = owner_of(full);
    check_buffer(i, full, buffer, t, kinds);
    r.buffers[i][buffer] = t;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    QKV_CHECK(r.buffers[i].empty() || r.buffers[i].size() == kinds.size(), "optimizer state of '", params_[i].first,
              "' has ", r.buffers[i].size(), " of ", name(), "'s ", kinds.size(), " buffers");
    r.updates[i] = r.buffers[i].empty() ? 0 : steps;
  }
  for (const auto& [name, count] : lagging) {
    auto p = std::find_if(params_.begin(), params_.end(), [&](const auto& named) { return named.first == name; });
    QKV_CHECK(p != params_.end(), "optimizer: update count of '", printable(name), "', which is no parameter");
    const size_t i = static_cast<size_t>(p - params_.begin());
    // A parameter with state took at least one update; one without took none.
    QKV_CHECK(count >= 0 && count <= steps && (count > 0) == !r.buffers[i].empty(), "optimizer: '", name, "' took ",
              count, count == 1 ? " update" : " updates", " in ", steps, steps == 1 ? " step" : " steps", ", with",
              r.buffers[i].empty() ? "out" : "", " state");
    r.updates[i] = count;
  }
  return r;
}

void Optimizer::check_state(const NamedTensors& state, int64_t steps,
                            const std::map<std::string, int64_t>& lagging) const {
  checked_state(state, steps, lagging);
}

void Optimizer::load_state(const NamedTensors& state, int64_t steps, const std::map<std::string, int64_t>& lagging) {
  Restored r = checked_state(state, steps, lagging);
  for (size_t i = 0; i < params_.size(); ++i)
    for (auto& [buffer, t] : r.buffers[i]) t = t.to(t.dtype()).to(params_[i].second.device());  // its own copy
  buffers_ = std::move(r.buffers);
  steps_ = steps;
  updates_ = std::move(r.updates);
}

// ---- SGD ----

SGD::SGD(NamedTensors params, const SGDOptions& options)
    : Optimizer(std::move(params), options.lr),
      o_{0, options.momentum, options.dampening, options.weight_decay, options.nesterov} {
  QKV_CHECK(options.momentum >= 0 && options.weight_decay >= 0 && options.dampening >= 0,
            "SGD: momentum, dampening and weight_decay must be >= 0");
  QKV_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
            "SGD: Nesterov momentum needs momentum > 0 and dampening 0");
}

std::map<std::string, bool> SGD::state_buffers() const {
  if (o_.momentum > 0) return {{"momentum_buffer", false}};
  return {};
}

std::map<std::string, std::string> SGD::hyperparameters() const {
  return {{"momentum", io::exact_number(o_.momentum)},
          {"dampening", io::exact_number(o_.dampening)},
          {"weight_decay", io::exact_number(o_.weight_decay)},
          {"nesterov", o_.nesterov ? "true" : "false"}};
}

void SGD::update(size_t index, const Tensor& param, const Tensor& grad) {
  bool first = !has_buffer(index, "momentum_buffer");
  Tensor* buf = o_.momentum > 0 ? &buffer(index, "momentum_buffer") : nullptr;
  if (!param.device().is_cpu()) {  // launched with the others in end_step()
    on_device_.push_back({steps(), index, first});
    return;
  }
  const math::SGDStep step{lr(), o_.momentum, o_.dampening, o_.weight_decay, o_.nesterov, first};
  dispatch_floating(param.dtype(), "SGD", [&](auto zero) {
    using T = decltype(zero);
    const math::SGDItem<T> update{step, param.data<T>(), grad.data<T>(), buf ? buf->data<T>() : nullptr};
    for_each_element(param.numel(), 4, [update](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) update(i);
    });
  });
}

// The device parameters that update() put aside, in launches of many each.
void SGD::end_step() {
  std::vector<device::SGDTensors> params;
  for (const OnDevice& d : on_device_) {
    if (d.step != steps()) continue;  // left by a step that threw before its end
    const Tensor& p = this->params()[d.index].second;
    params.push_back({p, p.grad(), o_.momentum > 0 ? buffer(d.index, "momentum_buffer") : Tensor(), d.first});
  }
  on_device_.clear();
  device::sgd_steps({lr(), o_.momentum, o_.dampening, o_.weight_decay, o_.nesterov, false}, params);
}

// ---- Adam / AdamW ----

Adam::Adam(NamedTensors params, const AdamOptions& options) : Adam(std::move(params), options, false) {}

Adam::Adam(NamedTensors params, const AdamOptions& options, bool decoupled)
    : Optimizer(std::move(params), options.lr), o_(options), decoupled_(decoupled) {
  o_.lr = 0;  // not a second copy: the rate is Optimizer::lr(), set by the schedule
  o_.weight_decay = options.weight_decay.value_or(decoupled ? 0.01 : 0.0);  // torch.optim's defaults
  QKV_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1, name(),
            ": betas must be in [0, 1), got ", options.beta1, ", ", options.beta2);
  QKV_CHECK(options.eps >= 0 && *o_.weight_decay >= 0, name(), ": eps and weight_decay must be >= 0");
  for (const auto& [n, p] : this->params()) decays_.push_back(!decoupled || !options.decays || options.decays(n, p));
}

std::map<std::string, std::string> Adam::hyperparameters() const {
  return {{"beta1", io::exact_number(o_.beta1)},
          {"beta2", io::exact_number(o_.beta2)},
          {"eps", io::exact_number(o_.eps)},
          {"weight_decay", io::exact_number(*o_.weight_decay)}};
}

namespace {
// Adam's settings at step t (shrink: AdamW's decay, 1 for a parameter it spares).
math::AdamStep adam_step(const AdamOptions& o, bool decoupled, bool decays, double lr, int64_t t) {
  const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(t)), bc2 = 1 - std::pow(o.beta2, static_cast<double>(t));
  const double wd = *o.weight_decay;  // set by the constructor
  const double l2 = decoupled ? 0.0 : wd, shrink = decoupled && decays ? 1 - lr * wd : 1.0;
  return {lr, o.beta1, o.beta2, o.eps, l2, shrink, bc1, bc2};
}
}  // namespace

void Adam::update(size_t index, const Tensor& param, const Tensor& grad) {
  Tensor& m = buffer(index, "exp_avg");
  Tensor& v = buffer(index, "exp_avg_sq");
  if (!param.device().is_cpu()) {
    on_device_.emplace_back(steps(), index);
    return;
  }
  const math::AdamStep step = adam_step(o_, decoupled_, decays_[index], lr(), updates(index));
  const double lr = step.lr, b1 = step.beta1, b2 = step.beta2, eps = step.eps, l2 = step.l2, shrink = step.shrink;
  const double bc1 = step.bias_correction1, bc2 = step.bias_correction2;
  dispatch_floating(param.dtype(), "Adam", [&](auto zero) {
    using T = decltype(zero);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T *pm = m.data<T>(), *pv = v.data<T>();
    if constexpr (std::is_same_v<T, float>) {  // float lanes, coefficients from double (bias corrections included)
      simd::AdamStep s{float(b1),     float(1 - b1), float(b2),      float(1 - b2),  float(l2),
                       float(shrink), float(lr),     float(1 / bc1), float(1 / bc2), float(eps)};
      for_each_element(param.numel(), 8, [s, p, g, pm, pv](int64_t begin, int64_t end) {
        simd::adam(s, p + begin, g + begin, pm + begin, pv + begin, end - begin);
      });
      return;
    }
    const math::AdamItem<T> update{step, p, g, pm, pv};
    for_each_element(param.numel(), 8, [update](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) update(i);
    });
  });
}

// The device parameters that update() put aside, in launches of many each: one
// a bias correction, so one in all unless a parameter sat out a step.
void Adam::end_step() {
  std::map<int64_t, std::vector<device::AdamTensors>> by_updates;
  for (auto [step, i] : on_device_) {
    if (step != steps()) continue;  // left by a step that threw before its end
    const Tensor& p = this->params()[i].second;
    const double shrink = adam_step(o_, decoupled_, decays_[i], lr(), updates(i)).shrink;
    by_updates[updates(i)].push_back({p, p.grad(), buffer(i, "exp_avg"), buffer(i, "exp_avg_sq"), shrink});
  }
  on_device_.clear();
  for (const auto& [t, params] : by_updates) device::adam_steps(adam_step(o_, decoupled_, false, lr(), t), params);
}

namespace {

// Squares are summed in fixed blocks of kSquaresBlock elements (vector lanes within
// a block), then the block sums in order: the same norm for any thread count.
constexpr int64_t kSquaresBlock = 16384;

// A CPU gradient's block sums of squares, written into `block_sums` by a loop added to `squares`.
void add_block_squares(const Tensor& g, std::vector<double>& block_sums, std::vector<ItemLoop>& squares) {
  const int64_t n = g.numel();
  dispatch_floating(g.dtype(), "clip_grad_norm", [&](auto zero) {
    using T = decltype(zero);
    squares.push_back({static_cast<int64_t>(block_sums.size()),
                       [pg = g.data<T>(), out = block_sums.data(), n](int64_t begin, int64_t end) {
                         for (int64_t k = begin; k < end; ++k) {
                           int64_t lo = k * kSquaresBlock, len = std::min(kSquaresBlock, n - lo);
                           if constexpr (std::is_same_v<T, float>)
                             out[k] = simd::dot(pg + lo, pg + lo, len);
                           else
                             math::SquaresBlock<T>{pg, out, n, kSquaresBlock}(k);
                         }
                       }});
  });
}

// The sum of every gradient's squares. Every CPU gradient's blocks run as
// one parallel region, while each device sums its own gradients' blocks.
double sum_of_squares(const std::vector<Tensor>& grads) {
  // partials[i]: gradient i's block sums. A device's gradients write theirs
  // into one buffer, read back once (a read waits for the device).
  std::vector<std::vector<double>> partials(grads.size());
  struct OnDevice {
    Device device;
    int64_t blocks = 0;
    std::vector<std::pair<size_t, int64_t>> slices;  // (gradient, its first block in the buffer)
  };
  std::vector<OnDevice> devices;
  std::vector<ItemLoop> squares;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    partials[i].resize((g.numel() + kSquaresBlock - 1) / kSquaresBlock);
    if (!g.device().is_cpu()) {
      auto d = std::find_if(devices.begin(), devices.end(), [&](const OnDevice& o) { return o.device == g.device(); });
      if (d == devices.end()) d = devices.insert(devices.end(), OnDevice{g.device(), 0, {}});
      d->slices.emplace_back(i, d->blocks);
      d->blocks += static_cast<int64_t>(partials[i].size());
      continue;
    }
    add_block_squares(g, partials[i], squares);
  }
  std::vector<Tensor> sums;  // launched first, read back after the CPU's loops: both run at once
  for (const OnDevice& d : devices) {
    sums.push_back(Tensor::empty({d.blocks}, DType::Float64, d.device));
    std::vector<Tensor> these;
    for (auto [i, at] : d.slices) these.push_back(grads[i]);
    device::squared_block_sums(these, kSquaresBlock, sums.back());
  }
  parallel_for_all(squares, 2 * kSquaresBlock);
  for (size_t k = 0; k < devices.size(); ++k) {
    const std::vector<double> host = sums[k].to_vector();
    for (auto [i, at] : devices[k].slices) std::copy_n(host.begin() + at, partials[i].size(), partials[i].begin());
  }
  double total = 0;
  for (const std::vector<double>& blocks : partials)
    for (double s : blocks) total += s;
  return total;
}

// Every gradient times `factor`: the CPU's as one parallel region.
void scale_grads(const std::vector<Tensor>& grads, double factor) {
  std::vector<Tensor> on_devices;
  std::vector<ItemLoop> scales;
  for (const Tensor& g : grads) {
    if (!g.device().is_cpu()) {
      on_devices.push_back(g);
      continue;
    }
    scales.push_back({g.numel(), grad_scaler(g, factor)});
  }
  device::scale(on_devices, factor);
  parallel_for_all(scales, 1);
}

}  // namespace

ClipFactor clip_factor(const NamedTensors& params, double max_norm) {
  QKV_CHECK(max_norm >= 0, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  std::vector<Tensor> grads;
  for (const auto& [name, p] : params)
    if (Tensor g = p.grad(); g.defined()) grads.push_back(g);
  const double norm = std::sqrt(sum_of_squares(grads)), factor = max_norm / (norm + 1e-6);
  // as torch: max_norm 0 zeroes the gradients, a NaN norm makes them NaN
  return {norm, factor < 1 || std::isnan(factor) ? factor : 1.0};
}

double clip_grad_norm(const NamedTensors& params, double max_norm) {
  const ClipFactor clip = clip_factor(params, max_norm);
  if (clip.factor != 1) {
    std::vector<Tensor> grads;
    for (const auto& [name, p] : params)
      if (Tensor g = p.grad(); g.defined()) grads.push_back(g);
    scale_grads(grads, clip.factor);
  }
  return clip.norm;
}

}  // namespace qkv::optim
