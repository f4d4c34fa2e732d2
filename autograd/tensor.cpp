#include "autograd/tensor.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "autograd/device_faults.h"
#include "autograd/engine.h"
#include "autograd/ops/device_kernels.h"
#include "autograd/parallel.h"

namespace qkv {

Storage::Storage(std::size_t bytes, Device device) : bytes(bytes), device(device), backend(&device_backend(device)) {
  data = backend->allocate(bytes, device.index);
}

Storage::Storage(void* external, std::size_t bytes, std::shared_ptr<void> owner)
    : data(external), bytes(bytes), device(Device::cpu()), backend(&device_backend(device)), owner(std::move(owner)) {
  QKV_CHECK(reinterpret_cast<std::uintptr_t>(external) % 64 == 0, "Storage: external memory must be 64-byte aligned");
}

Storage::~Storage() {
  if (!owner) backend->release(data, bytes, device.index);
}

namespace {

double read_element(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::Float32: return static_cast<const float*>(data)[i];
    case DType::Float64: return static_cast<const double*>(data)[i];
    case DType::Int64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::Bool: return static_cast<const bool*>(data)[i] ? 1.0 : 0.0;
  }
  return 0;
}

void write_element(void* data, DType dtype, int64_t i, double value) {
  switch (dtype) {
    case DType::Float32: static_cast<float*>(data)[i] = static_cast<float>(value); break;
    case DType::Float64: static_cast<double*>(data)[i] = value; break;
    case DType::Int64:
      QKV_CHECK(std::abs(value) < 9.2e18, "to int64: ", value, " has no int64 value");  // NaN fails too
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(value);
      break;
    case DType::Bool: static_cast<bool*>(data)[i] = value != 0; break;
  }
}

void check_shape(const Shape& shape) {
  for (int64_t s : shape) QKV_CHECK(s >= 0, "tensor: negative size in shape ", shape_str(shape));
  QKV_CHECK(qkv::numel(shape) <= (int64_t{1} << 40), "tensor: shape ", shape_str(shape), " is too large to allocate");
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(qkv::numel(shape) * element_size(dtype), device);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  device_backend(device).fill_zero(t.impl()->storage->data, t.numel() * element_size(dtype), device.index);
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  if (!device.is_cpu()) {  // a fill kernel: a copy from the host would wait for the device's queued work
    Tensor t = empty(shape, dtype, device);
    uint64_t element = 0;
    write_element(&element, dtype, 0, value);
    device::fill(t, &element);
    return t;
  }
  Tensor t = empty(shape, dtype);
  for (int64_t i = 0, n = t.numel(); i < n; ++i) write_element(t.raw_data(), dtype, i, value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor Tensor::arange(double end, DType dtype) { return arange(0, end, 1, dtype); }

Tensor Tensor::arange(double start, double end, double step, DType dtype) {
  QKV_CHECK(step != 0, "arange: step must be non-zero");
  QKV_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: [", start, ", ", end,
            ") with step ", step, " is not finite");
  QKV_CHECK(step > 0 ? start <= end : start >= end, "arange: step ", step, " leads away from ", end, " (start ", start,
            ")");
  double count = std::ceil((end - start) / step);
  QKV_CHECK(std::isfinite(count) && count < 1e15, "arange: [", start, ", ", end, ") with step ", step,
            " does not give a finite count");
  Tensor t = empty({count > 0 ? static_cast<int64_t>(count) : 0}, dtype);
  for (int64_t i = 0, n = t.numel(); i < n; ++i) write_element(t.raw_data(), dtype, i, start + i * step);
  return t;
}

template <class T> Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  check_shape(shape);
  QKV_CHECK(static_cast<int64_t>(values.size()) == qkv::numel(shape), "from_vector: ", values.size(),
            " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>());
  T* out = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<double>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int64_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<bool>&, const Shape&);

namespace {
thread_local bool skip_init = false;  // a SkipInitGuard is alive on this thread
}

SkipInitGuard::SkipInitGuard() : previous_(skip_init) { skip_init = true; }
SkipInitGuard::~SkipInitGuard() { skip_init = previous_; }
bool SkipInitGuard::active() { return skip_init; }

Tensor Tensor::randn(const Shape& shape, DType dtype, Generator* gen) {
  if (skip_init) return empty(shape, dtype);  // every value is about to be overwritten
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, dtype);
  dispatch_floating(dtype, "randn", [&](auto zero) {
    using T = decltype(zero);
    T* out = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) out[i] = static_cast<T>(g.normal());
  });
  return t;
}

Tensor Tensor::uniform(const Shape& shape, double low, double high, DType dtype, Generator* gen) {
  QKV_CHECK(low <= high, "uniform: low ", low, " > high ", high);
  if (skip_init) return empty(shape, dtype);  // every value is about to be overwritten
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, dtype);
  dispatch_floating(dtype, "uniform", [&](auto zero) {
    using T = decltype(zero);
    T* out = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) out[i] = static_cast<T>(low + (high - low) * g.uniform());
  });
  return t;
}

Tensor Tensor::randint(int64_t low, int64_t high, const Shape& shape, Generator* gen) {
  QKV_CHECK(low < high, "randint: empty range [", low, ", ", high, ")");
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, DType::Int64);
  int64_t* out = t.data<int64_t>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    out[i] = low + static_cast<int64_t>(g.below(static_cast<uint64_t>(high - low)));
  return t;
}

const TensorImpl& Tensor::checked() const {
  QKV_CHECK(impl_ != nullptr, "tensor: use of an undefined tensor");
  return *impl_;
}

const Shape& Tensor::shape() const { return checked().shape; }
DType Tensor::dtype() const { return checked().dtype; }
Device Tensor::device() const { return checked().storage->device; }

int64_t Tensor::size(int64_t d) const { return shape()[normalize_dim("size", d, dim())]; }

namespace {

void check_on_cpu(const Tensor& t) {
  QKV_CHECK(t.device().is_cpu(), "a ", shape_str(t.shape()), " tensor on ", t.device().str(),
            " was read by CPU code: this op has no kernel for ", t.device().str(),
            " yet, or its input needs .to(Device::cpu()) first");
}

// The tensor itself on the CPU, else a copy there (no history: for reading).
Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.detach().to(Device::cpu()); }

}  // namespace

template <class T> T* Tensor::data() const {
  check_on_cpu(*this);
  return device_data<T>();
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template bool* Tensor::data<bool>() const;

template <class T> T* Tensor::device_data() const {
  QKV_CHECK(dtype() == dtype_of<T>(), "data: tensor is ", dtype_name(dtype()), ", asked for ",
            dtype_name(dtype_of<T>()));
  return static_cast<T*>(impl_->storage->data);
}
template float* Tensor::device_data<float>() const;
template double* Tensor::device_data<double>() const;
template int64_t* Tensor::device_data<int64_t>() const;
template bool* Tensor::device_data<bool>() const;

void* Tensor::device_raw_data() const { return impl_->storage->data; }

void* Tensor::raw_data() const {
  check_on_cpu(*this);
  return impl_->storage->data;
}

double Tensor::item() const {
  QKV_CHECK(numel() == 1, "item: tensor of shape ", shape_str(shape()), " has ", numel(), " elements, not 1");
  return read_element(on_host(*this).raw_data(), dtype(), 0);
}

namespace {
// `op` ("at" or "set") names the caller in errors; a negative index counts from the end, as in PyTorch.
int64_t flat_index(const char* op, const Shape& shape, const std::vector<int64_t>& index) {
  QKV_CHECK(index.size() == shape.size(), op, ": index of rank ", index.size(), " for shape ", shape_str(shape));
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t i = index[d] < 0 ? index[d] + shape[d] : index[d];
    QKV_CHECK(i >= 0 && i < shape[d], op, ": index ", index[d], " out of range for dim ", d, " of shape ",
              shape_str(shape));
    flat = flat * shape[d] + i;
  }
  return flat;
}
}  // namespace

double Tensor::at(const std::vector<int64_t>& index) const {
  int64_t i = flat_index("at", shape(), index);
  if (device().is_cpu()) return read_element(raw_data(), dtype(), i);
  double value[1];  // one element, copied from the device
  std::size_t size = element_size(dtype());
  read_from_device(device(), value, static_cast<char*>(impl_->storage->data) + i * size, size);
  return read_element(value, dtype(), 0);
}

void Tensor::modified_in_place() const { checked().storage->version.fetch_add(1, std::memory_order_relaxed); }

void Tensor::set(const std::vector<int64_t>& index, double value) const {
  int64_t i = flat_index("set", shape(), index);
  modified_in_place();
  if (device().is_cpu()) return write_element(raw_data(), dtype(), i, value);
  double element[1];
  write_element(element, dtype(), 0, value);
  std::size_t size = element_size(dtype());
  device_backend(device()).copy_from_host(static_cast<char*>(impl_->storage->data) + i * size, element, size,
                                          device().index);
}

std::vector<double> Tensor::to_vector() const {
  Tensor host = on_host(*this);
  std::vector<double> out(numel());
  for (int64_t i = 0, n = numel(); i < n; ++i) out[i] = read_element(host.raw_data(), dtype(), i);
  return out;
}

Tensor Tensor::to(DType target) const {
  if (!device().is_cpu() && target != dtype()) return on_host(*this).to(target).to(device()).detach();
  Tensor out = empty(shape(), target, device());
  if (!device().is_cpu()) {
    device_backend(device()).copy_within(out.impl()->storage->data, impl_->storage->data,
                                         numel() * element_size(target), device().index);
  } else if (target == dtype()) {
    std::memcpy(out.raw_data(), raw_data(), numel() * element_size(target));
  } else {
    for (int64_t i = 0, n = numel(); i < n; ++i)
      write_element(out.raw_data(), target, i, read_element(raw_data(), dtype(), i));
  }
  return out;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = checked().storage;
  impl->shape = impl_->shape;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

void Tensor::assign_(const Tensor& source) const {
  QKV_CHECK(is_leaf(), "assign_: only a leaf tensor's data can be replaced");
  Tensor copy = source.to(source.dtype());
  impl_->storage = copy.impl_->storage;
  impl_->shape = source.shape();
  impl_->dtype = source.dtype();
  impl_->grad.reset();
}

Tensor alias_with_shape(const Tensor& source, const Shape& shape) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = source.impl_ptr()->storage;
  impl->shape = shape;
  impl->dtype = source.dtype();
  return Tensor(std::move(impl));
}

Device common_device(const char* op, std::initializer_list<Tensor> inputs) {
  const Tensor* first = nullptr;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
    } else {
      QKV_CHECK(t.device() == first->device(), op, ": inputs on ", first->device().str(), " and ", t.device().str(),
                " (move them to one device with .to())");
    }
  }
  return first ? first->device() : Device::cpu();
}

bool Tensor::requires_grad() const { return checked().requires_grad; }

Tensor& Tensor::requires_grad_(bool on) {
  QKV_CHECK(is_leaf(), "requires_grad_: only leaf tensors can be marked; this one was produced by ",
            impl_->grad_fn ? impl_->grad_fn->op : "?");
  QKV_CHECK(!on || is_floating(dtype()), "requires_grad_: a ", dtype_name(dtype()), " tensor cannot require grad");
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return checked().grad_fn == nullptr; }

Tensor Tensor::grad() const { return Tensor(checked().grad); }

void Tensor::retain_grad() const {
  QKV_CHECK(requires_grad(), "retain_grad: the tensor does not require grad");
  impl_->retains_grad = true;
}

void Tensor::zero_grad(bool set_to_none) const {
  checked();
  if (set_to_none || !impl_->grad) {
    impl_->grad.reset();
    return;
  }
  // New zeros, not the old ones zeroed: they may be another tensor's gradient too (a backward may hand
  // one tensor to two inputs).
  Tensor old(impl_->grad);
  impl_->grad = Tensor::zeros(old.shape(), old.dtype(), old.device()).impl_ptr();
}

const std::shared_ptr<Node>& Tensor::grad_fn() const { return checked().grad_fn; }

// ---- printing, in the style of torch: nested brackets, summarised when large ----

namespace {

void print_block(std::ostream& out, const Tensor& t, const std::vector<double>& values, int64_t dim, int64_t offset,
                 int indent, bool summarise) {
  const Shape& shape = t.shape();
  int64_t n = shape[dim];
  int64_t inner = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t edge = 3;
  out << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * edge && i == edge) {
      out << (dim + 1 == t.dim() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - edge;
    }
    if (dim + 1 == t.dim()) {
      double v = values[offset + i];
      if (t.dtype() == DType::Bool)
        out << (v != 0 ? "true" : "false");
      else if (t.dtype() == DType::Int64)
        out << static_cast<int64_t>(v);
      else
        out << std::setw(8) << v;
    } else {
      print_block(out, t, values, dim + 1, offset + i * inner, indent + 1, summarise);
    }
    if (i + 1 < n) out << (dim + 1 == t.dim() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  out << ']';
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream out;
  out << std::fixed << std::setprecision(4) << "tensor(";
  std::vector<double> values = to_vector();
  if (dim() == 0)
    out << values[0];
  else
    print_block(out, *this, values, 0, 0, 7, numel() > 1000);
  if (!device().is_cpu()) out << ", device=" << device().str();
  if (dtype() != DType::Float32) out << ", dtype=" << dtype_name(dtype());
  if (requires_grad()) out << (is_leaf() ? ", requires_grad=true" : cat(", grad_fn=", grad_fn()->op));
  out << ')';
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) { return out << tensor.to_string(); }

int64_t first_non_finite(const Tensor& any) {
  const Tensor t = any.device().is_cpu() ? any : any.to(Device::cpu());
  const int64_t n = t.numel();  // once: numel() multiplies the shape out at every call
  // Blocks of 4096 tested without an exit in the loop (the compiler vectorises it), shared by the threads (a
  // 124M-parameter model just mapped from its file is 496 MB of memory read once: 170 ms on one thread); the
  // first non-finite element is looked for only in the first block that has one.
  auto first = [n](const auto* v, auto exponent_mask) {
    using Bits = decltype(exponent_mask);
    constexpr int64_t kBlock = 4096;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::atomic<int64_t> first_bad{blocks};
    parallel_for(blocks, kBlock, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end && b < first_bad.load(std::memory_order_relaxed); ++b) {
        bool bad = false;
        for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
          Bits bits;
          std::memcpy(&bits, &v[i], sizeof bits);
          bad |= (bits & exponent_mask) == exponent_mask;  // all exponent bits set: an infinity or a NaN
        }
        for (int64_t seen = first_bad.load(); bad && b < seen && !first_bad.compare_exchange_weak(seen, b);) {
        }
      }
    });
    for (int64_t i = first_bad.load() * kBlock; i < n; ++i)
      if (!std::isfinite(v[i])) return i;
    return int64_t{-1};
  };
  if (t.dtype() == DType::Float32) return first(t.data<float>(), uint32_t{0x7f800000});
  if (t.dtype() == DType::Float64) return first(t.data<double>(), uint64_t{0x7ff0000000000000});
  return -1;
}

}  // namespace qkv
