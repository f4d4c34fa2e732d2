// Module: a named tree of parameters and sub-modules, in the manner of
// torch.nn.Module (register_parameter / register_module, dotted names,
// train() / eval()).
#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/error.h"
#include "autograd/tensor.h"

namespace qkv::nn {

class Module {
 public:
  /// Detaches the sub-modules: a child kept alive elsewhere becomes a root
  /// (path() ""), never reached through a freed parent.
  virtual ~Module();

  /// Every parameter, depth first in registration order.
  std::vector<Tensor> parameters() const;
  /// Every parameter with its dotted name ("blocks.0.attn.q_proj.weight").
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  /// Direct sub-modules with their names.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  /// Total number of parameter elements.
  int64_t num_parameters() const;

  /// Training mode (dropout active) for this module and all below it.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Drops every parameter's gradient (set_to_none = false: zeros, as
  /// torch 1.13's default; see Tensor::zero_grad).
  void zero_grad(bool set_to_none = true);
  /// Converts every parameter to `dtype` in place; handles stay valid.
  /// A float32 model becomes a float64 one for gradient checks this way.
  void to(DType dtype);
  /// The dtype of the parameters (float32 when there are none).
  DType dtype() const;
  /// Moves every parameter to `device` in place (gradients are dropped);
  /// handles stay valid. Make the optimizer after the move: its state lives
  /// where it was made.
  void to(Device device);
  /// The device of the parameters (the CPU when there are none).
  Device device() const;

  /// This module's dotted path from the root it is registered under
  /// ("blocks.0.attn"; "" for the root).
  std::string path() const;
  /// Names this module as the one running, for graph pictures: nodes
  /// recorded in the guard's lifetime carry path() while a GraphRecording
  /// is alive (autograd/graph_dot.h); otherwise it does nothing.
  ScopeGuard scope() const { return graph_recording() ? ScopeGuard(path()) : ScopeGuard(); }

 protected:
  /// Adds a parameter (requires_grad is switched on) and returns it.
  Tensor register_parameter(const std::string& name, Tensor value);
  /// Adds a sub-module and returns it.
  template <class M> std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    check_new_name("register_module", name);
    QKV_CHECK(module, "register_module: '", name, "' is null");
    children_.emplace_back(name, module);
    if (!module->parent_) module->parent_ = this, module->name_ = name;  // shared: its first place names it
    return module;
  }

 private:
  void check_new_name(const char* who, const std::string& name) const;
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
               std::unordered_set<const TensorImpl*>& seen) const;
  // The first of named_parameters(), found without building that list of names
  // (dtype() and device() are asked for every batch); null when there is none.
  const Tensor* first_parameter() const;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  const Module* parent_ = nullptr;  // set by register_module (for path())
  std::string name_;
};

/// An ordered list of sub-modules named 0, 1, 2, ... ("blocks.0.ln1.weight").
template <class M> class ModuleList : public Module {
 public:
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    items_.push_back(register_module(std::to_string(items_.size()), std::move(module)));
    return items_.back();
  }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<M>& operator[](size_t i) const { return items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace qkv::nn
