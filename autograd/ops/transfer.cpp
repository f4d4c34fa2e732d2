// Moving a tensor between devices: the copy, and its backward (the copy back).
#include "autograd/device_faults.h"
#include "autograd/engine.h"

namespace qkv {

QKV_DECLARE_OP(to_device);

// y = x on another device; dL/dx = dL/dy copied back to x's device.
Tensor Tensor::to(Device target) const {
  if (device() == target) return *this;
  if (!device().is_cpu() && !target.is_cpu()) return to(Device::cpu()).to(target);  // device to device: via the host
  Tensor out = empty(shape(), dtype(), target);
  std::size_t bytes = numel() * element_size(dtype());
  const void* source = impl()->storage->data;
  void* copy = out.impl()->storage->data;
  if (device().is_cpu())
    device_backend(target).copy_from_host(copy, source, bytes, target.index);
  else
    read_from_device(device(), copy, source, bytes);  // and raises what its kernels found
  if (needs_grad({*this})) {
    Device from = device();
    record("to_device", out, {*this}, [from](const Tensor& g) { return std::vector<Tensor>{g.to(from)}; });
  }
  return out;
}

}  // namespace qkv
