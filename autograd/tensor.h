// Tensor: a cheap handle to shared, contiguous, row-major storage on one
// device plus the autograd state (requires_grad, grad, the node that produced it).
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "autograd/device.h"
#include "autograd/dtype.h"
#include "autograd/generator.h"
#include "autograd/shape.h"

namespace qkv {

struct Node;

/// A 64-byte aligned buffer on one device; several tensors may share one
/// (reshape, detach). Its memory comes from the device's backend.
struct Storage {
  explicit Storage(std::size_t bytes, Device device = Device::cpu());
  /// CPU memory someone else owns (a mapped file's pages): kept alive by
  /// `owner`, never handed to a backend. 64-byte aligned, as every storage.
  Storage(void* external, std::size_t bytes, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data;
  std::size_t bytes;
  Device device;
  DeviceBackend* backend;       // the one that allocated `data`, which frees it
  std::shared_ptr<void> owner;  // set for external memory: backend allocated nothing
  /// In-place writes through the API so far (Tensor::set, an optimizer's step,
  /// a gradient accumulated in place): a recorded op notes its tensors'
  /// versions, and backward refuses to run on values changed since (torch's
  /// version counter). A write through data<T>() is not counted.
  std::atomic<uint64_t> version{0};  // (relaxed: a count, read by the thread that runs backward)
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  DType dtype = DType::Float32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated by backward() on leaves (and on retain_grad() tensors)
  bool retains_grad = false;         // a non-leaf that keeps its gradient (retain_grad())
  std::shared_ptr<Node> grad_fn;     // null for leaves
};

class Tensor {
 public:
  /// An undefined tensor (like a None gradient).
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (new leaf tensors, requires_grad off) ----
  // Random and listed values are made on the CPU: move them with to(Device),
  // so a seed gives the same numbers on every device.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32,
                      Device device = Device::cpu());  // uninitialized
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::Float32);  // 0-d
  /// 0, 1, ..., end-1 (like torch.arange(end), but float32 unless `dtype`
  /// says otherwise: torch gives int64 for integer arguments). A step whose
  /// sign leads away from `end` is an error, as in torch.
  static Tensor arange(double end, DType dtype = DType::Float32);
  static Tensor arange(double start, double end, double step = 1, DType dtype = DType::Float32);
  /// Copies `values` (float, double, int64_t or bool) into a tensor of `shape`.
  template <class T> static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  template <class T> static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, Shape{static_cast<int64_t>(values.size())});
  }
  /// Standard normal samples from `gen` (the default generator when null).
  static Tensor randn(const Shape& shape, DType dtype = DType::Float32, Generator* gen = nullptr);
  /// Uniform samples in [low, high).
  static Tensor uniform(const Shape& shape, double low, double high, DType dtype = DType::Float32,
                        Generator* gen = nullptr);
  /// Uniform samples in [0, 1).
  static Tensor rand(const Shape& shape, DType dtype = DType::Float32, Generator* gen = nullptr) {
    return uniform(shape, 0, 1, dtype, gen);
  }
  /// Uniform int64 samples in [low, high).
  static Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen = nullptr);

  // ---- queries ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const { return qkv::numel(shape()); }
  DType dtype() const;
  Device device() const;

  // ---- element access (for tests, examples and optimizers) ----
  /// Typed pointer to the data of a CPU tensor; throws when T does not match
  /// dtype(), and when the tensor lives on another device (CPU code must not
  /// touch device memory: copy it with to(Device::cpu()) first).
  template <class T> T* data() const;
  void* raw_data() const;
  /// Typed pointer into the tensor's own device memory, for that device's
  /// kernels (the CUDA backend); on the CPU the same as data<T>().
  template <class T> T* device_data() const;
  /// The same, untyped: for kernels that copy elements of any dtype.
  void* device_raw_data() const;
  /// The only element of a one-element tensor, as double (copied to the host
  /// from a device, which waits for the device: as torch's item()).
  double item() const;
  /// The element at a full index, as double; a negative index counts from
  /// the end of its dim (-1: the last), as in PyTorch.
  double at(const std::vector<int64_t>& index) const;
  /// Writes one element (indices as at()); no autograd (do not change tensors saved for backward).
  void set(const std::vector<int64_t>& index, double value) const;
  /// Every element as double, row-major.
  std::vector<double> to_vector() const;

  // ---- conversion ----
  /// A copy in another dtype, on the same device. The copy is a new leaf: it has no history.
  Tensor to(DType dtype) const;
  /// This tensor on `device`: itself when it is there already, else a copy
  /// that gradients flow back through (as torch's Tensor.to(device)).
  Tensor to(Device device) const;
  /// Shares storage, drops history: the result is a leaf without requires_grad.
  Tensor detach() const;
  /// A differentiable copy with its own storage.
  Tensor clone() const;
  /// Counts an in-place write to this tensor's storage (see Storage::version):
  /// code that writes through data<T>() into a tensor a graph may hold calls it.
  void modified_in_place() const;
  /// Replaces this leaf's data, shape and dtype by a copy of `source`'s,
  /// keeping requires_grad and dropping .grad. Every handle to this tensor
  /// sees the change (how Module::to and checkpoint loading update parameters).
  void assign_(const Tensor& source) const;

  // ---- autograd ----
  bool requires_grad() const;
  /// Marks a leaf as a parameter whose gradient backward() accumulates.
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;
  /// The accumulated gradient of a leaf (or of a retain_grad() tensor);
  /// undefined before any backward().
  Tensor grad() const;
  /// Keeps this non-leaf's gradient through the next backward() (as
  /// torch.Tensor.retain_grad): how a graph picture shows every node's gradient.
  void retain_grad() const;
  /// Drops the accumulated gradient (the next backward() starts from zero).
  /// set_to_none = false keeps a gradient there as zeros (torch 1.13's
  /// default), so an optimizer still steps a parameter the next backward
  /// leaves out: momentum and weight decay move it. A tensor with no
  /// gradient keeps none either way.
  void zero_grad(bool set_to_none = true) const;
  /// Back-propagates from this tensor. `grad` defaults to 1 for a one-element
  /// tensor. The graph is freed afterwards unless retain_graph is set.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  const std::shared_ptr<Node>& grad_fn() const;

  std::string to_string() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  const TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

/// A tensor of `shape` sharing `source`'s storage (reshape's storage path).
Tensor alias_with_shape(const Tensor& source, const Shape& shape);

/// The one device all of an op's defined inputs live on; inputs on two
/// devices are a one-line error naming the op, as in PyTorch.
Device common_device(const char* op, std::initializer_list<Tensor> inputs);

/// While one is alive, Tensor::randn and Tensor::uniform on this thread
/// return tensors whose values are not set (not even zeroed) and leave their
/// generator as it was: a model built only to have every parameter
/// overwritten by a file (a GPT-2 folder's 124M weights) skips drawing them,
/// which took most of its start-up, and zeroing them, which took a third of
/// the rest (a 496 MB memset and its page faults).
class SkipInitGuard {
 public:
  /// Whether one is alive on this thread: an initialiser that scales its
  /// draws (randn · 0.02) skips the scaling too.
  static bool active();
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool previous_;
};

/// The index of the first NaN or infinity in a float tensor (on any device;
/// a device's is copied to the host), else -1: a checkpoint's weights and
/// optimizer state, and weights before they are saved, are checked with it.
int64_t first_non_finite(const Tensor& t);

}  // namespace qkv
