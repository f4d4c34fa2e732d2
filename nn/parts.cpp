#include "nn/parts.h"

#include <cmath>

#include "nn/feed_forward.h"
#include "nn/normalization.h"

namespace qkv::nn {

namespace {

// The built-in parts come first, today's defaults before the others.
PartRegistry<NormPart>& norms() {
  static PartRegistry<NormPart> registry = [] {
    PartRegistry<NormPart> r("norm");
    r.add({"layernorm", "LayerNorm: (x - mean) / std · weight + bias (GPT-2's)",
           [](int64_t width) -> std::shared_ptr<Norm> { return std::make_shared<LayerNorm>(width); },
           [](double width) { return 2 * width; }});
    r.add({"rmsnorm", "RMSNorm: x / rms(x) · weight, no mean taken off and no bias (LLaMA's)",
           [](int64_t width) -> std::shared_ptr<Norm> { return std::make_shared<RMSNorm>(width); },
           [](double width) { return width; }});
    return r;
  }();
  return registry;
}

PartRegistry<MlpPart>& mlps() {
  static PartRegistry<MlpPart> registry = [] {
    PartRegistry<MlpPart> r("mlp");
    // fc1 [4C, C] and fc2 [C, 4C] with biases
    r.add({"gelu", "fc2(gelu_tanh(fc1(x))), 4 x width wide, with biases (GPT-2's)",
           [](int64_t width, Generator* gen) -> std::shared_ptr<FeedForward> {
             return std::make_shared<MLP>(width, gen);
           },
           [](double width) { return 8 * width * width + 5 * width; }});
    // gate and up [H, C], down [C, H], no biases
    r.add({"swiglu", "down(silu(gate(x)) · up(x)), 8/3 x width wide, no biases (LLaMA's)",
           [](int64_t width, Generator* gen) -> std::shared_ptr<FeedForward> {
             return std::make_shared<SwiGLU>(width, gen);
           },
           [](double width) {
             // swiglu_hidden in double: a hostile file's width must not overflow before it is bounded
             const double hidden = std::ceil(std::ceil(8 * width / 3) / 8) * 8;
             return 3 * width * hidden;
           }});
    return r;
  }();
  return registry;
}

std::string norm_summary(const std::string& name) { return norm_part(name).summary; }
std::string mlp_summary(const std::string& name) { return mlp_part(name).summary; }

}  // namespace

void check_part_name(const char* kind, const std::string& name) {
  bool ok = !name.empty() && name.size() <= 32 && name[0] >= 'a' && name[0] <= 'z';
  for (char c : name) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  QKV_CHECK(ok, "register: a ", kind, " part's name must be 1-32 of a-z, 0-9 and _, starting with a letter, not '",
            printable(name), "'");
}

const NormPart& norm_part(const std::string& name) { return norms().find(name); }
void register_norm_part(NormPart part) { norms().add(std::move(part)); }
std::vector<std::string> norm_part_names() { return norms().names(); }

const MlpPart& mlp_part(const std::string& name) { return mlps().find(name); }
void register_mlp_part(MlpPart part) { mlps().add(std::move(part)); }
std::vector<std::string> mlp_part_names() { return mlps().names(); }

const std::vector<PartChoice>& part_choices() {
  static const std::vector<PartChoice> table{
      {"norm", "normalisation, of each block and the final output", &BlockParts::norm, norm_part_names, norm_summary,
       [](const std::string& name) { norm_part(name); }},
      {"mlp", "each block's feed-forward network", &BlockParts::mlp, mlp_part_names, mlp_summary,
       [](const std::string& name) { mlp_part(name); }},
  };
  return table;
}

void BlockParts::check(const std::string& where) const {
  try {
    for (const PartChoice& c : part_choices()) c.require(this->*c.value);
  } catch (const Error& e) {
    throw Error(cat(where, ": ", e.what()));
  }
}

std::string BlockParts::str() const {
  const BlockParts defaults;
  std::string text;
  for (const PartChoice& c : part_choices())
    if (this->*c.value != defaults.*c.value) text += (text.empty() ? "" : ", ") + this->*c.value + " " + c.key;
  return text;
}

std::shared_ptr<Norm> make_norm(const BlockParts& parts, int64_t width) { return norm_part(parts.norm).build(width); }

}  // namespace qkv::nn
