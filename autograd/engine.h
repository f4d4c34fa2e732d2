// Reverse-mode autograd: graph nodes, grad mode, and how an op records itself.
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace qkv {

/// Returns one gradient per input (undefined where an input needs none),
/// given the gradient of the op's output. Runs with grad mode off.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

/// For a one-input op whose gradient is mostly zeros (an embedding's rows):
/// adds that gradient into `sum`, the gradient already gathered for the input
/// (a tensor nothing else holds), in place, with the values of
/// add(sum, backward(grad_output)[0]). The whole-size zeros and the sum's
/// copy are never made: for GPT-2's tied 50,257 x 768 embedding, 3 x 154 MB
/// a step.
using AddIntoFn = std::function<void(const Tensor& grad_output, const Tensor& sum)>;

/// One recorded op: its inputs and its backward closure (which holds the
/// tensors it saved). backward() releases both unless asked to retain them.
struct Node {
  const char* op = "";
  std::vector<Tensor> inputs;
  BackwardFn backward;
  /// Optional (record_add_into): used instead of `backward` when the input's
  /// gradient is already partly gathered.
  AddIntoFn add_into;
  /// The storage versions of the inputs (index i), the output (-1) and the
  /// tensors the closure saved besides (inputs.size() + k) when the op ran:
  /// backward refuses to run once one changed (an in-place write).
  struct Version {
    std::weak_ptr<Storage> storage;  // not kept alive: a storage nobody else holds cannot change
    uint64_t version = 0;
    int input = -1;
  };
  std::vector<Version> versions;
  bool released = false;
  /// The module whose forward recorded this node ("blocks.0.attn"), kept
  /// only while a GraphRecording is alive (for autograd/graph_dot.h).
  std::shared_ptr<const std::string> scope;
  /// Frees the chain of nodes only this one kept alive without recursion, so
  /// a graph thousands of ops deep cannot overflow the stack.
  ~Node();
};

/// True unless a NoGradGuard is alive on this thread.
bool grad_enabled();

/// Switches graph recording off for its scope (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// Sets grad mode for its scope (recompute switches it back on inside backward).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

/// While alive on this thread, record() tags every node with the current
/// ScopeGuard's module path and counts the ops recorded, by name: what a
/// picture of the graph needs (autograd/graph_dot.h). Costs nothing otherwise.
class GraphRecording {
 public:
  GraphRecording();
  ~GraphRecording();
  GraphRecording(const GraphRecording&) = delete;
  GraphRecording& operator=(const GraphRecording&) = delete;
  /// How many nodes each op recorded since this recording began.
  const std::map<std::string, int64_t>& op_counts() const { return counts_; }

 private:
  friend void record(const char*, Tensor&, std::vector<Tensor>, BackwardFn, const std::vector<Tensor>&);
  std::map<std::string, int64_t> counts_;
  GraphRecording* previous_;
};

/// True while a GraphRecording is alive on this thread.
bool graph_recording();

/// Names the module whose forward runs in its scope (nn::Module::scope()
/// makes one); nodes recorded meanwhile carry the name when a
/// GraphRecording is alive. A default-constructed guard does nothing.
class ScopeGuard {
 public:
  ScopeGuard() = default;
  explicit ScopeGuard(std::string path);
  ~ScopeGuard();
  ScopeGuard(ScopeGuard&& other) noexcept;
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ScopeGuard& operator=(ScopeGuard&&) = delete;

 private:
  bool active_ = false;
  std::shared_ptr<const std::string> previous_;
};

/// True when grad mode is on and some input requires grad: the op must record.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

/// Makes `out` a non-leaf produced by `op` from `inputs`. `op` must be declared
/// with QKV_DECLARE_OP in its family's source file. The backward closure must
/// capture tensors only as `.detach()`ed copies (or shapes): capturing `out`
/// itself, or an input with its history, makes a reference cycle. It records
/// whatever the grad mode: call it only where the op needs a gradient
/// (needs_grad(inputs), as a rule). The closure returns one gradient per input
/// (undefined where none is needed), and `out` must be a new float tensor, not
/// one of the inputs. `saved` lists what else the closure keeps by handle
/// (targets, masks): backward refuses to run once one of them, an input or
/// `out` was written in place (Storage::version).
void record(const char* op, Tensor& out, std::vector<Tensor> inputs, BackwardFn backward,
            const std::vector<Tensor>& saved = {});

/// Gives the node that produced `out` (recorded, one input) an AddIntoFn.
void record_add_into(const Tensor& out, AddIntoFn add_into);

/// The tensors reachable from `root` through recorded nodes (inputs that
/// require grad), each after every input it was computed from, `root` last:
/// the order backward() walks in reverse, and graph pictures draw in.
std::vector<Tensor> data_flow_order(const Tensor& root);

/// Every differentiable op declared in the library, sorted. The gradcheck
/// registry must hold at least one case for each (a test enforces it).
std::vector<std::string> declared_ops();

struct OpDeclaration {
  explicit OpDeclaration(const char* name);
};

}  // namespace qkv

/// Declares a differentiable op next to its forward and backward.
#define QKV_DECLARE_OP(name) \
  static const ::qkv::OpDeclaration qkv_declared_op_##name { #name }
