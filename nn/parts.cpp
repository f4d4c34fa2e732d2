#include "nn/parts.h"

#include <cmath>

#include "io/metadata.h"
#include "nn/feed_forward.h"
#include "nn/normalization.h"
#include "nn/position.h"

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

PartRegistry<PositionPart>& positions() {
  static PartRegistry<PositionPart> registry = [] {
    PartRegistry<PositionPart> r("position");
    r.add({"learned", "a learned table of positions added to the input (pos_emb; GPT-2's)", true, nullptr});
    r.add({"rope",
           "rotary embeddings: each self-attention's queries and keys rotated by position, no table "
           "(RoFormer's, LLaMA's)",
           false, [](const Tensor& heads, int64_t offset) { return rope(heads, offset); }});
    return r;
  }();
  return registry;
}

}  // namespace

void check_part_name(const char* kind, const std::string& name) {
  bool ok = !name.empty() && name.size() <= 32 && name[0] >= 'a' && name[0] <= 'z';
  for (char c : name) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  QKV_CHECK(ok, "register: a ", kind, " part's name must be 1-32 of a-z, 0-9 and _, starting with a letter, not '",
            printable(name), "'");
}

const NormPart& norm_part(const std::string& name) { return norms().find(name); }
void register_norm_part(NormPart part) {
  QKV_CHECK(part.build && part.parameters, "register_norm_part: '", part.name, "' has no builder or no count");
  norms().add(std::move(part));
}

const MlpPart& mlp_part(const std::string& name) { return mlps().find(name); }
void register_mlp_part(MlpPart part) {
  QKV_CHECK(part.build && part.parameters, "register_mlp_part: '", part.name, "' has no builder or no count");
  mlps().add(std::move(part));
}

const PositionPart& position_part(const std::string& name) { return positions().find(name); }
void register_position_part(PositionPart part) { positions().add(std::move(part)); }

const std::vector<PartChoice>& part_choices() {
  static const std::vector<PartChoice> table{
      {"norm", "normalisation, of each block and the final output", "NAME", [] { return norms().joined(" | "); },
       [](const BlockParts& p) { return p.norm; },
       [](BlockParts& p, const std::string& v) { p.norm = norm_part(v).name; },
       [](const BlockParts& p) { return norms().plugin_of(p.norm); }},
      {"mlp", "each block's feed-forward network", "NAME", [] { return mlps().joined(" | "); },
       [](const BlockParts& p) { return p.mlp; }, [](BlockParts& p, const std::string& v) { p.mlp = mlp_part(v).name; },
       [](const BlockParts& p) { return mlps().plugin_of(p.mlp); }},
      {"position", "how positions are told apart", "NAME", [] { return positions().joined(" | "); },
       [](const BlockParts& p) { return p.position; },
       [](BlockParts& p, const std::string& v) { p.position = position_part(v).name; },
       [](const BlockParts& p) { return positions().plugin_of(p.position); }},
      {"kv-heads", "self-attention's key/value heads, each shared by heads / N query heads (grouped-query)", "N",
       [] { return std::string("a divisor of --heads"); },
       [](const BlockParts& p) { return p.kv_heads > 0 ? std::to_string(p.kv_heads) : std::string(); },
       [](BlockParts& p, const std::string& v) {
         int64_t n = 0;
         QKV_CHECK(io::parse_integer(v, n) && n >= 1 && n <= (int64_t{1} << 16), "kv-heads must be an integer in [1, ",
                   int64_t{1} << 16, "], got '", printable(v), "'");
         p.kv_heads = n;
       },
       [](const BlockParts&) { return std::string(); }},
  };
  return table;
}

void BlockParts::check(const std::string& where, int64_t heads, int64_t width) const {
  const std::string at = where.empty() ? "" : where + ": ";
  try {
    BlockParts copy;
    for (const PartChoice& c : part_choices())
      if (!c.get(*this).empty()) c.set(copy, c.get(*this));  // each name registered, each number in range
  } catch (const Error& e) {
    throw Error(at + e.what());
  }
  QKV_CHECK(kv_heads == 0 || (heads % kv_heads == 0), at, "kv-heads ", kv_heads, " does not divide the ", heads,
            " heads");
  QKV_CHECK(!position_part(position).rotate || heads <= 0 || (width / heads) % 2 == 0, at, position,
            " rotates pairs of a head's ", width / heads, " values: give each head an even width");
}

std::string BlockParts::str() const {
  const BlockParts defaults;
  std::string text;
  for (const PartChoice& c : part_choices())
    if (c.get(*this) != c.get(defaults)) text += (text.empty() ? "" : ", ") + c.get(*this) + " " + c.key;
  return text;
}

std::vector<std::string> describe_parts() {
  std::vector<std::string> lines;
  norms().describe(lines);
  mlps().describe(lines);
  positions().describe(lines);
  return lines;
}

std::shared_ptr<Norm> make_norm(const BlockParts& parts, int64_t width) { return norm_part(parts.norm).build(width); }

}  // namespace qkv::nn
