#include "nn/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace qkv::nn {

void save_module(const std::string& path, const Module& module, const std::map<std::string, std::string>& metadata) {
  io::save_safetensors(path, module.named_parameters(), metadata);
}

void load_into(Module& module, const io::TensorFile& file, const std::string& path,
               const std::vector<std::string>& ignored_prefixes) {
  auto ignored = [&](const std::string& name) {
    return std::any_of(ignored_prefixes.begin(), ignored_prefixes.end(),
                       [&](const std::string& p) { return name.compare(0, p.size(), p) == 0; });
  };
  auto params = module.named_parameters();
  std::set<std::string> expected;
  for (const auto& [name, p] : params) {
    expected.insert(name);
    Tensor t = file.get(name);
    QKV_CHECK(t.defined(), path, ": missing tensor '", name, "'");
    QKV_CHECK(t.shape() == p.shape() && t.dtype() == p.dtype(), path, ": tensor '", name, "' is ",
              dtype_name(t.dtype()), " ", shape_str(t.shape()), " but the model expects ", dtype_name(p.dtype()), " ",
              shape_str(p.shape()));
    // A diverged run's weights would sample garbage, score 0% and draw
    // nothing, each without a word: refuse them here, by name.
    if (int64_t at = first_non_finite(t); at >= 0)
      throw NonFiniteParameter(cat(printable(path), ": tensor '", name, "' holds ", t.to_vector()[at], " at element ",
                                   at, ": the run that wrote it diverged"));
  }
  for (const auto& [name, t] : file.tensors)
    QKV_CHECK(expected.count(name) || ignored(name), path, ": unexpected tensor '", printable(name), "'");
  for (const auto& [name, p] : params) p.assign_(file.get(name).to(p.device()));
}

}  // namespace qkv::nn
