#include "autograd/engine.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "autograd/ops/elementwise.h"
#include "autograd/parallel.h"

namespace qkv {

namespace {
thread_local bool grad_mode = true;

std::set<std::string>& op_declarations() {
  static std::set<std::string> names;
  return names;
}
}  // namespace

bool grad_enabled() { return grad_mode; }

NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }
NoGradGuard::~NoGradGuard() { grad_mode = previous_; }
GradModeGuard::GradModeGuard(bool enabled) : previous_(grad_mode) { grad_mode = enabled; }
GradModeGuard::~GradModeGuard() { grad_mode = previous_; }

OpDeclaration::OpDeclaration(const char* name) { op_declarations().insert(name); }

std::vector<std::string> declared_ops() { return {op_declarations().begin(), op_declarations().end()}; }

namespace {
template <class Range> bool any_needs_grad(const Range& inputs) {
  if (!grad_mode) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}
}  // namespace

bool needs_grad(const std::vector<Tensor>& inputs) { return any_needs_grad(inputs); }
bool needs_grad(std::initializer_list<Tensor> inputs) { return any_needs_grad(inputs); }

Node::~Node() {
  std::vector<std::shared_ptr<Node>> pending;
  auto detach_inputs = [&pending](std::vector<Tensor>& inputs) {
    for (Tensor& slot : inputs) {
      Tensor t = std::move(slot);  // so the last of duplicate inputs (h * h) sees a count of 1
      if (t.impl_ptr().use_count() == 1 && t.impl()->grad_fn && t.impl()->grad_fn.use_count() == 1)
        pending.push_back(std::move(t.impl()->grad_fn));
    }
    inputs.clear();
  };
  detach_inputs(inputs);
  while (!pending.empty()) {
    std::shared_ptr<Node> node = std::move(pending.back());
    pending.pop_back();
    detach_inputs(node->inputs);
  }  // each node dies here with no inputs left to recurse into
}

namespace {
thread_local GraphRecording* active_recording = nullptr;
thread_local std::shared_ptr<const std::string> current_scope;
}  // namespace

GraphRecording::GraphRecording() : previous_(active_recording) { active_recording = this; }
GraphRecording::~GraphRecording() { active_recording = previous_; }
bool graph_recording() { return active_recording != nullptr; }

ScopeGuard::ScopeGuard(std::string path) : active_(true), previous_(current_scope) {
  current_scope = std::make_shared<const std::string>(std::move(path));
}
ScopeGuard::ScopeGuard(ScopeGuard&& other) noexcept : active_(other.active_), previous_(std::move(other.previous_)) {
  other.active_ = false;
}
ScopeGuard::~ScopeGuard() {
  if (active_) current_scope = std::move(previous_);
}

void record(const char* op, Tensor& out, std::vector<Tensor> inputs, BackwardFn backward,
            const std::vector<Tensor>& saved) {
  // An op that records without a declaration would escape the gradcheck registry.
  static thread_local std::unordered_set<const char*> known;
  if (!known.count(op)) {
    QKV_CHECK(op_declarations().count(op), "internal: op '", op,
              "' records a node but is not declared with QKV_DECLARE_OP");
    known.insert(op);
  }
  QKV_CHECK(out.defined(), "record: op '", op, "' has no output");
  QKV_CHECK(backward, "record: op '", op, "' has no backward function");
  QKV_CHECK(is_floating(out.dtype()), "record: op '", op, "' has a ", dtype_name(out.dtype()),
            " output, which cannot carry a gradient");
  auto node = std::make_shared<Node>();
  node->op = op;
  node->versions.reserve(inputs.size() + 1 + saved.size());
  auto note = [&](const Tensor& t, int index) {
    if (t.defined()) node->versions.push_back({t.impl()->storage, t.impl()->storage->version.load(), index});
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    QKV_CHECK(!inputs[i].defined() || inputs[i].impl() != out.impl(), "record: op '", op,
              "' records its output as its own input ", i);
    note(inputs[i], static_cast<int>(i));
  }
  note(out, -1);
  for (size_t k = 0; k < saved.size(); ++k) note(saved[k], static_cast<int>(inputs.size() + k));
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  if (active_recording) {
    node->scope = current_scope;
    ++active_recording->counts_[op];
  }
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
}

// Topological order by an iterative depth-first search (deep graphs cannot
// overflow the stack), each tensor finished after its inputs. The handles
// keep every tensor alive while backward() releases the nodes that also held them.
std::vector<Tensor> data_flow_order(const Tensor& root) {
  std::vector<Tensor> order;
  std::unordered_set<TensorImpl*> visited{root.impl()};
  std::vector<std::pair<Tensor, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [t, next] = stack.back();
    Node* node = t.impl()->grad_fn.get();
    if (node && next < node->inputs.size()) {
      const Tensor& input = node->inputs[next++];
      if (input.defined() && input.requires_grad() && visited.insert(input.impl()).second) stack.push_back({input, 0});
    } else {
      order.push_back(std::move(t));
      stack.pop_back();
    }
  }
  return order;
}

void record_add_into(const Tensor& out, AddIntoFn add_into) {
  QKV_CHECK(out.defined() && out.impl()->grad_fn && out.impl()->grad_fn->inputs.size() == 1,
            "record_add_into: the output of a recorded one-input op is needed");
  out.impl()->grad_fn->add_into = std::move(add_into);
}

namespace {

// A gradient must have its tensor's shape, dtype and device; "[2, 3] float32 on cpu" names them.
bool same_layout(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device();
}
std::string layout(const Tensor& t) {
  return cat(shape_str(t.shape()), " ", dtype_name(t.dtype()), " on ", t.device().str());
}

void check_gradient(const char* op, const Tensor& grad, const Tensor& input) {
  QKV_CHECK(same_layout(grad, input), "backward of ", op, ": gradient ", layout(grad), " does not match input ",
            layout(input));
}

// A backward computed from values written over since the forward would be silently wrong (torch: "one of the
// variables needed for gradient computation has been modified by an inplace operation").
void check_versions(const Node& node, const Tensor& out) {
  for (const Node::Version& v : node.versions) {
    std::shared_ptr<Storage> storage = v.storage.lock();
    const uint64_t now = storage ? storage->version.load() : v.version;
    if (now == v.version) continue;
    const size_t n = node.inputs.size();
    const std::string which = v.input < 0 ? cat("output (", layout(out), ")")
                              : static_cast<size_t>(v.input) < n
                                  ? cat("input ", v.input, " (", layout(node.inputs[v.input]), ")")
                                  : cat("saved tensor ", v.input - n, " (a target or mask)");
    throw Error(cat("backward of '", node.op, "': its ", which, " was modified in place after the forward (",
                    now - v.version, " write", now - v.version == 1 ? "" : "s",
                    ": Tensor::set, an optimizer step, or a gradient added into it); nothing was accumulated: run the "
                    "forward again"));
  }
}

// A gradient sum on the CPU that only the backward pass holds (no other handle, no shared storage): it
// may be added to in place, unseen.
bool own_sum(const Tensor& sum) {
  return sum.device().is_cpu() && sum.impl_ptr().use_count() == 1 && sum.impl()->storage.use_count() == 1 &&
         !sum.impl()->grad_fn;
}

// sum += g elementwise: the bits of add(sum, g), without a new tensor.
void add_in_place(const Tensor& sum, const Tensor& g) {
  dispatch_floating(sum.dtype(), "backward", [&](auto zero) {
    using T = decltype(zero);
    T* acc = sum.data<T>();
    const T* add = g.data<T>();
    parallel_for(sum.numel(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) acc[i] += add[i];
    });
  });
}

// Adds an input's gradient from one consumer to those gathered from the others.
void gather(Tensor& slot, const Tensor& g) {
  if (!slot.defined())
    slot = g;
  else if (own_sum(slot) && g.device().is_cpu())
    add_in_place(slot, g);
  else
    slot = add(slot, g);
}

// Adds g into t's .grad: in place on the CPU (the first time a copy: g may be shared), so a handle taken from
// grad() before sees the sum, as torch's. Leaves, and non-leaves that retain_grad(), across backward calls.
void accumulate_grad(TensorImpl* t, const Tensor& keep, Tensor g) {
  // Two threads' backward passes through graphs that share a leaf (a parameter) add into one .grad.
  static std::mutex accumulating;
  std::lock_guard<std::mutex> lock(accumulating);
  if (!t->grad) {  // a gradient nothing else holds (no other handle, no shared storage) is taken as it is
    bool sole = g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1 && !g.impl()->grad_fn;
    t->grad = sole ? g.impl_ptr() : g.clone().impl_ptr();
  } else if (!keep.device().is_cpu()) {
    // add() runs on the tensor's device (no history: grad mode is off). Unlike the CPU
    // branch it makes a new tensor: a handle taken from grad() before keeps the old sum.
    t->grad = add(Tensor(t->grad), g).impl_ptr();
  } else {
    Tensor grad(t->grad);
    grad.modified_in_place();
    add_in_place(grad, g);
  }
}
// After a node's backward: unless the graph is kept, its closures, inputs and versions go.
void release(Node& node, bool retain_graph) {
  if (retain_graph) return;
  node.released = true;
  node.backward = nullptr;  // frees the saved tensors
  node.add_into = nullptr;
  node.inputs.clear();
  node.versions.clear();
}
}  // namespace

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  QKV_CHECK(defined(), "backward: undefined tensor");
  QKV_CHECK(requires_grad(), "backward: tensor does not require grad (no input of the graph has requires_grad set)");
  Tensor seed = grad;
  if (!seed.defined()) {
    QKV_CHECK(numel() == 1, "backward: tensor of shape ", shape_str(shape()),
              " is not a scalar; pass the gradient of the output explicitly");
    seed = Tensor::ones(shape(), dtype(), device());
  }
  QKV_CHECK(same_layout(seed, *this), "backward: the gradient given, ", layout(seed), ", does not match the tensor, ",
            layout(*this));

  NoGradGuard no_grad;
  std::unordered_map<TensorImpl*, Tensor> grads{{impl(), seed}};
  std::vector<Tensor> order = data_flow_order(*this);
  // Every node first: a refusal halfway would leave some leaves' gradients accumulated.
  for (const Tensor& t : order)
    if (t.impl()->grad_fn && !t.impl()->grad_fn->released) check_versions(*t.impl()->grad_fn, t);
  for (auto handle = order.rbegin(); handle != order.rend(); ++handle) {  // from the root back to the leaves
    Tensor keep = std::move(*handle);                                     // released once this tensor is done
    TensorImpl* t = keep.impl();
    auto it = grads.find(t);
    if (it == grads.end()) continue;
    Tensor g = std::move(it->second);
    grads.erase(it);
    if (!t->grad_fn) {  // a leaf: accumulate into .grad
      accumulate_grad(t, keep, std::move(g));
      continue;
    }
    if (t->retains_grad) accumulate_grad(t, keep, g.clone());  // its whole gradient: every consumer has added to g
    Node& node = *t->grad_fn;
    QKV_CHECK(!node.released, "backward: the graph through '", node.op,
              "' was already freed by an earlier backward(); pass retain_graph=true to the first call");
    auto sum = node.add_into ? grads.find(node.inputs[0].impl()) : grads.end();
    if (sum != grads.end() && own_sum(sum->second)) {  // adds into the gathered sum, in place
      node.add_into(g, sum->second);
      release(node, retain_graph);
      continue;
    }
    std::vector<Tensor> input_grads = node.backward(g);
    QKV_CHECK(input_grads.size() == node.inputs.size(), "backward of '", node.op, "' returned ", input_grads.size(),
              " gradient", input_grads.size() == 1 ? "" : "s", " for ", node.inputs.size(), " input",
              node.inputs.size() == 1 ? "" : "s");
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Tensor& input = node.inputs[i];
      if (!input.defined() || !input.requires_grad() || !input_grads[i].defined()) continue;
      check_gradient(node.op, input_grads[i], input);
      gather(grads[input.impl()], input_grads[i]);
    }
    release(node, retain_graph);
  }
}

}  // namespace qkv
