// The named parts a transformer block is built from: its normalisation, its
// feed-forward network and its position encoding, each chosen by name from a
// registry, and its self-attention's key/value heads. Every model kind
// composes its blocks (and its final norm) from a BlockParts; the defaults
// are the parts qkv always had, with the same parameter names and bits. A
// part of your own registers under its own name, in a program or a plugin
// (nn/plugin.h), and is then built, saved, loaded and checked like the
// built-in ones (docs/api.md, "Parts" and "Add a layer").
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/error.h"
#include "nn/module.h"
#include "nn/plugin.h"

namespace qkv {
class Generator;
}

namespace qkv::nn {

/// A normalisation part: x [..., width] -> the same shape.
class Norm : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

/// A feed-forward part: x [..., width] -> the same shape.
class FeedForward : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
};

/// A registered normalisation: what it is called, and how to build it and count its parameters.
struct NormPart {
  std::string name;     // "rmsnorm": the --norm value and a checkpoint's norm field
  std::string summary;  // for `qkv info --system`
  std::function<std::shared_ptr<Norm>(int64_t width)> build;
  std::function<double(double width)> parameters;  // equal to the built part's count (tested)
};

/// A registered feed-forward network, likewise; its weights are drawn from `gen`.
struct MlpPart {
  std::string name;
  std::string summary;
  std::function<std::shared_ptr<FeedForward>(int64_t width, Generator* gen)> build;
  std::function<double(double width)> parameters;
};

/// Looks a norm up; throws "unknown norm 'x' (layernorm, rmsnorm)".
const NormPart& norm_part(const std::string& name);
/// Adds a norm; throws if the name is taken or has characters other than
/// lower-case letters, digits and '_' (the name goes into files and flags).
void register_norm_part(NormPart part);

/// Looks a feed-forward network up; throws "unknown mlp 'x' (gelu, swiglu)".
const MlpPart& mlp_part(const std::string& name);
void register_mlp_part(MlpPart part);

/// A registered position encoding: a learned table added to the input, a
/// rotation of each self-attention's queries and keys, or neither.
struct PositionPart {
  std::string name;
  std::string summary;
  bool table = false;  // the model keeps pos_emb [positions, width], added to its input
  /// Rotates queries or keys [B, n, heads, head_dim] as at positions offset ..
  /// offset + n - 1 (null: no rotation). Self-attention only.
  std::function<Tensor(const Tensor& heads, int64_t offset)> rotate;
};

/// Looks a position encoding up; throws "unknown position 'x' (learned, rope)".
const PositionPart& position_part(const std::string& name);
void register_position_part(PositionPart part);

/// The parts of every block of a model (and of its final norm). The
/// defaults are today's: LayerNorm, fc2(gelu_tanh(fc1(x))), a learned
/// position table, and one key/value head per query head.
struct BlockParts {
  std::string norm = "layernorm";
  std::string mlp = "gelu";
  std::string position = "learned";
  int64_t kv_heads = 0;  // self-attention's key/value heads (grouped-query attention); 0: as many as the heads
  bool operator==(const BlockParts&) const = default;
  /// Throws unless every name is registered and kv_heads divides `heads`
  /// (and rope's head width is even); errors start with `where`.
  void check(const std::string& where, int64_t heads, int64_t width) const;
  /// "rmsnorm norm, 2 kv-heads": the parts that differ from the defaults ("" when none).
  std::string str() const;
  /// Self-attention's key/value heads for a model of `heads` heads.
  int64_t kv_heads_for(int64_t heads) const { return kv_heads > 0 ? kv_heads : heads; }
};

/// One choice of part: a row of the table the program's flags (--norm,
/// --kv-heads), a checkpoint's fields and `qkv info` all read.
struct PartChoice {
  const char* key;                                     // "norm": the flag's and the checkpoint field's name
  const char* what;                                    // "each block's feed-forward network", for --help
  const char* value;                                   // "NAME" or "N", for --help
  std::string (*choices)();                            // "layernorm | rmsnorm", for --help
  std::string (*get)(const BlockParts& parts);         // the value as text ("" for kv_heads' default)
  void (*set)(BlockParts& parts, const std::string&);  // parses it; throws "unknown norm 'x' (layernorm, rmsnorm)"
  std::string (*plugin)(const BlockParts& parts);      // the plugin that registered the part ("" none)
};
const std::vector<PartChoice>& part_choices();

/// Every registered part, one line each: "norm rmsnorm: RMSNorm: ..." (and
/// "(plugin libx.so)" for a plugin's), for `qkv info --system`.
std::vector<std::string> describe_parts();

/// Builds the norm `parts` names for `width` (a block's or a model's final one).
std::shared_ptr<Norm> make_norm(const BlockParts& parts, int64_t width);

/// Throws unless `name` is 1-32 of [a-z0-9_], starting with a letter.
void check_part_name(const char* kind, const std::string& name);

/// A registry of named parts, in registration order; registering never
/// moves the parts handed out. `kind` names it in errors ("norm").
template <class Part> class PartRegistry {
 public:
  explicit PartRegistry(const char* kind) : kind_(kind) {}
  const Part& find(const std::string& name) const {
    for (const Part& p : parts_)
      if (p.name == name) return p;
    throw Error(cat("unknown ", kind_, " '", printable(name), "' (", joined(), ")"));
  }
  void add(Part part) {
    check_part_name(kind_, part.name);
    for (const Part& p : parts_) QKV_CHECK(p.name != part.name, "register: the ", kind_, " '", part.name, "' exists");
    if (!registering_plugin().empty()) plugin_of_[part.name] = registering_plugin();
    parts_.push_back(std::move(part));
  }
  /// The file name of the plugin that registered `name` ("" for a part built in or registered by the program).
  std::string plugin_of(const std::string& name) const {
    auto it = plugin_of_.find(name);
    return it == plugin_of_.end() ? "" : it->second;
  }
  /// "kind name: summary" per part, and its plugin.
  void describe(std::vector<std::string>& lines) const {
    for (const Part& p : parts_)
      lines.push_back(cat(kind_, " ", p.name, ": ", p.summary,
                          plugin_of(p.name).empty() ? "" : " (plugin " + plugin_of(p.name) + ")"));
  }
  /// The names in order, between `separator`s: "layernorm, rmsnorm" for errors, "layernorm | rmsnorm" for --help.
  std::string joined(const char* separator = ", ") const {
    std::string text;
    for (const Part& p : parts_) text += (text.empty() ? "" : separator) + p.name;
    return text;
  }

 private:
  const char* kind_;
  std::deque<Part> parts_;
  std::map<std::string, std::string> plugin_of_;
};

}  // namespace qkv::nn
