#include "nn/module.h"

#include "autograd/error.h"

namespace qkv::nn {

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  QKV_CHECK(name.find('.') == std::string::npos && !name.empty(), "register_parameter: bad name '", name, "'");
  for (const auto& [existing, t] : parameters_)
    QKV_CHECK(existing != name, "register_parameter: '", name, "' registered twice");
  value.requires_grad_(true);
  parameters_.emplace_back(name, value);
  return value;
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out);
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
