#include "nn/module.h"

#include "autograd/error.h"

namespace qkv::nn {

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name("register_parameter", name);
  QKV_CHECK(value.defined() && is_floating(value.dtype()) && value.is_leaf(), "register_parameter: '", name,
            "' must be a float leaf tensor, got ",
            !value.defined()              ? std::string("an undefined one")
            : !is_floating(value.dtype()) ? cat("a ", dtype_name(value.dtype()), " one")
                                          : cat("the result of ", value.grad_fn()->op, " (pass it .detach())"));
  value.requires_grad_(true);
  parameters_.emplace_back(name, value);
  return value;
}

void Module::check_new_name(const char* who, const std::string& name) const {
  QKV_CHECK(name.find('.') == std::string::npos && !name.empty(), who, ": bad name '", name, "'");
  for (const auto& [existing, t] : parameters_)
    QKV_CHECK(existing != name, who, ": '", name, "' is already a parameter of this module");
  for (const auto& [existing, child] : children_)
    QKV_CHECK(existing != name, who, ": '", name, "' is already a sub-module of this module");
}

// A tensor (or a sub-module) reached twice, shared between two places, is listed once under the first
// name, as torch's named_parameters(): listed twice, an optimizer stepped it twice a step.
void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
                     std::unordered_set<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : parameters_)
    if (seen.insert(t.impl()).second) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, seen);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", out, seen);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& t : parameters()) t.zero_grad(set_to_none);
}

void Module::to(DType dtype) {
  QKV_CHECK(is_floating(dtype), "Module::to: parameters must be float32 or float64, not ", dtype_name(dtype));
  for (const Tensor& t : parameters())
    if (t.dtype() != dtype) t.assign_(t.to(dtype));
}

const Tensor* Module::first_parameter() const {
  if (!parameters_.empty()) return &parameters_.front().second;
  for (const auto& [name, child] : children_)
    if (const Tensor* t = child->first_parameter()) return t;
  return nullptr;
}

DType Module::dtype() const {
  const Tensor* first = first_parameter();
  return first ? first->dtype() : DType::Float32;
}

void Module::to(Device device) {
  for (const Tensor& t : parameters())
    if (t.device() != device) t.assign_(t.detach().to(device));
}

Device Module::device() const {
  const Tensor* first = first_parameter();
  return first ? first->device() : Device::cpu();
}

Module::~Module() {
  for (auto& [name, child] : children_)
    if (child->parent_ == this) {
      child->parent_ = nullptr;
      child->name_.clear();
    }
}

std::string Module::path() const {
  std::string p = name_;
  for (const Module* m = parent_; m && m->parent_; m = m->parent_) p = m->name_ + "." + p;
  return p;
}

}  // namespace qkv::nn
