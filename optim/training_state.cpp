#include "optim/training_state.h"

#include <cinttypes>
#include <cstdio>

#include "io/metadata.h"

namespace qkv::optim {

namespace {
const std::string kOptimizerPrefix = "optimizer.";
const std::string kUpdatesKey = "qkv.optimizer.updates";  // {"<param>": "<updates>"}: Optimizer::lagging_updates()

std::string encode_state(const Generator::State& s) {
  char text[80];
  std::snprintf(text, sizeof text, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, s[0], s[1], s[2], s[3]);
  return text;
}

bool decode_state(const std::string& text, Generator::State& s) {
  if (text.size() != 64 || text.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  for (int i = 0; i < 4; ++i) s[i] = std::strtoull(text.substr(16 * i, 16).c_str(), nullptr, 16);
  return true;
}
}  // namespace

void save_training_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* optimizer,
                              const NamedGenerators& generators, std::map<std::string, std::string> metadata,
                              io::Existing existing) {
  io::NamedTensors tensors = model.named_parameters();
  metadata["qkv.format"] = "1";
  if (optimizer) {
    for (const auto& [name, t] : optimizer->state()) tensors.emplace_back(kOptimizerPrefix + name, t);
    metadata["qkv.step"] = std::to_string(optimizer->steps());
    metadata["qkv.optimizer"] = optimizer->name();
    metadata["qkv.optimizer.hyperparameters"] = io::json_object(optimizer->hyperparameters());
    metadata.erase(kUpdatesKey);  // a caller's copy of another file's metadata: this optimizer's counts only
    if (auto lagging = optimizer->lagging_updates(); !lagging.empty()) {  // only where a parameter sat out a step
      std::map<std::string, std::string> counts;
      for (const auto& [name, count] : lagging) counts[name] = std::to_string(count);
      metadata[kUpdatesKey] = io::json_object(counts);
    }
  }
  for (const auto& [name, gen] : generators) {
    std::string key = "qkv.generator.";
    key += name;
    metadata[key] = encode_state(gen->state());
  }
  io::save_safetensors(path, tensors, metadata, existing);
}

std::map<std::string, std::string> load_training_checkpoint(const std::string& path, nn::Module& model,
                                                            Optimizer* optimizer, const NamedGenerators& generators) {
  return load_training_checkpoint(io::load_safetensors(path), path, model, optimizer, generators);
}

std::map<std::string, std::string> load_training_checkpoint(io::TensorFile file, const std::string& path,
                                                            nn::Module& model, Optimizer* optimizer,
                                                            const NamedGenerators& generators) {
  auto& meta = file.metadata;
  QKV_CHECK(meta.count("qkv.format") && meta["qkv.format"] == "1", path,
            ": not a qkv checkpoint (no qkv.format 1 in its metadata)");

  // Validate everything before changing anything.
  int64_t steps = 0;
  io::NamedTensors state;
  std::map<std::string, int64_t> lagging;
  if (optimizer) {
    QKV_CHECK(meta.count("qkv.optimizer"), path, ": holds no optimizer state to resume from");
    QKV_CHECK(meta["qkv.optimizer"] == optimizer->name(), path, ": trained with ", printable(meta["qkv.optimizer"]),
              ", cannot resume with ", optimizer->name());
    QKV_CHECK(io::parse_integer(meta["qkv.step"], steps) && steps >= 0, path, ": bad qkv.step '",
              printable(meta["qkv.step"]), "'");
    for (const auto& [name, t] : file.tensors)
      if (name.compare(0, kOptimizerPrefix.size(), kOptimizerPrefix) == 0)
        state.emplace_back(name.substr(kOptimizerPrefix.size()), t);
    if (meta.count(kUpdatesKey))
      for (const auto& [name, text] : io::metadata_object(meta, kUpdatesKey, path)) {
        int64_t count = 0;
        QKV_CHECK(io::parse_integer(text, count), path, ": bad ", kUpdatesKey, " of '", printable(name), "': '",
                  printable(text), "'");
        lagging[name] = count;
      }
  }
  std::vector<Generator::State> states;
  for (const auto& [name, gen] : generators) {
    Generator::State s;
    auto it = meta.find("qkv.generator." + name);
    QKV_CHECK(it != meta.end() && decode_state(it->second, s), path, ": missing or bad generator state '", name, "'");
    states.push_back(s);
  }
  if (optimizer) {
    try {
      optimizer->check_state(state, steps, lagging);
    } catch (const Error& e) {
      throw Error(cat(path, ": ", e.what()));
    }
  }
  nn::load_into(model, file, path, {kOptimizerPrefix});
  if (optimizer) optimizer->load_state(state, steps, lagging);  // checked above
  for (size_t i = 0; i < generators.size(); ++i) generators[i].second->set_state(states[i]);
  return meta;
}

}  // namespace qkv::optim
