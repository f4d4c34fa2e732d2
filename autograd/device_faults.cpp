#include "autograd/device_faults.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "autograd/error.h"
#include "autograd/tensor.h"

namespace qkv {

namespace {

// A device's slot, and the checks launched on it since its last read: a
// failure's number is its check's place in that list, plus 1.
struct Faults {
  Tensor slot;  // int64 [3]: DeviceFault
  std::vector<std::pair<std::string, std::string>> checks;
};

constexpr std::size_t kMaxPending = 1024;

std::mutex& faults_mutex() {
  static std::mutex mutex;
  return mutex;
}

// By CUDA device index. Never destroyed: like the backend's memory, the
// slots may outlive any static destructor's order.
std::map<int, Faults>& all_faults() {
  static auto* faults = new std::map<int, Faults>;
  return *faults;
}

}  // namespace

FaultReport expect_valid(Device device, std::string prefix, std::string suffix) {
  QKV_CHECK(!device.is_cpu(), "expect_valid: the CPU's ops check their indices themselves");
  std::unique_lock<std::mutex> lock(faults_mutex());
  if (all_faults()[device.index].checks.size() >= kMaxPending) {  // no read for a long while: read now
    lock.unlock();
    raise_device_faults(device);
    lock.lock();
  }
  Faults& faults = all_faults()[device.index];
  if (!faults.slot.defined()) faults.slot = Tensor::zeros({3}, DType::Int64, device);
  faults.checks.emplace_back(std::move(prefix), std::move(suffix));
  return {static_cast<DeviceFault*>(faults.slot.device_raw_data()), static_cast<int64_t>(faults.checks.size())};
}

void raise_device_faults(Device device) {
  if (device.is_cpu()) return;
  std::unique_lock<std::mutex> lock(faults_mutex());
  auto it = all_faults().find(device.index);
  if (it == all_faults().end() || it->second.checks.empty()) return;
  Faults& faults = it->second;
  DeviceBackend& backend = device_backend(device);
  DeviceFault fault{0, 0, -1};
  backend.copy_to_host(&fault, faults.slot.device_raw_data(), sizeof fault, device.index);
  std::vector<std::pair<std::string, std::string>> checks = std::move(faults.checks);
  faults.checks.clear();
  if (fault.check == 0) return;
  backend.fill_zero(faults.slot.device_raw_data(), sizeof fault, device.index);  // ready for the next checks
  lock.unlock();
  QKV_CHECK(fault.check >= 1 && fault.check <= static_cast<int64_t>(checks.size()), "device ", device.str(),
            ": a kernel reported check ", fault.check, " of ", checks.size(), " (its fault slot was overwritten)");
  const auto& [prefix, suffix] = checks[fault.check - 1];
  const std::string at = fault.at >= 0 ? cat(" at position ", fault.at) : "";
  throw Error(cat(prefix, fault.value, at, suffix, " (found on ", device.str(), " by a kernel)"));
}

void read_from_device(Device device, void* host_dst, const void* device_src, std::size_t bytes) {
  device_backend(device).copy_to_host(host_dst, device_src, bytes, device.index);
  raise_device_faults(device);
}

void forget_device_faults() {
  std::lock_guard<std::mutex> lock(faults_mutex());
  all_faults().clear();
}

}  // namespace qkv
