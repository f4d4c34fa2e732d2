#include "nn/gpt2_files.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "autograd/parallel.h"
#include "io/folder.h"
#include "io/output.h"
#include "io/strict_json.h"
#include "nn/checkpoint.h"
#include "nn/model_kinds.h"

namespace qkv::nn {

namespace {

constexpr const char* kFolderIs = "GPT-2 folder";
constexpr const char* kExpected = "a GPT-2 folder holds config.json and model.safetensors";
constexpr int64_t kMaxConfigBytes = 1 << 20;  // GPT-2's config.json is under 1 KB

// A config.json read and parsed: strict JSON, an object; errors name the file.
nlohmann::json read_config(const std::string& folder, std::string& shown) {
  io::check_folder(folder, kExpected);
  const std::string path = io::file_in_folder(folder, "config.json", kFolderIs);
  shown = printable(path);
  QKV_CHECK(std::filesystem::exists(path), printable(folder),
            " is a folder, not a checkpoint file, and holds no config.json (", kExpected, ")");
  nlohmann::json config;
  try {
    config = io::detail::parse_strict_json(io::read_regular_file(path, kMaxConfigBytes, "config file"));
  } catch (const Error& e) {
    const std::string what = e.what();
    throw Error(what.find(shown) == std::string::npos ? cat(shown, ": not JSON (", what, ")") : what);
  }
  QKV_CHECK(config.is_object(), shown, ": not a JSON object");
  return config;
}

// A size field: a JSON integer in [1, max]; `also` is a field older files use instead ("n_ctx").
int64_t size_field(const nlohmann::json& config, const std::string& shown, const char* name, int64_t max,
                   const char* also = nullptr) {
  const char* key = config.contains(name) || !also ? name : also;
  QKV_CHECK(config.contains(key), shown, ": no ", name);
  const nlohmann::json& v = config[key];
  QKV_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= max, shown, ": ", key, " is ",
            printable(v.dump()), "; qkv reads an integer from 1 to ", max);
  return v.get<int64_t>();
}

// A field GPT-2 may hold that must say what qkv's GPT computes, where given.
void require(const nlohmann::json& config, const std::string& shown, const char* name,
             const std::function<bool(const nlohmann::json&)>& ok, const char* what_qkv_computes) {
  if (!config.contains(name) || config[name].is_null()) return;
  QKV_CHECK(ok(config[name]), shown, ": ", name, " is ", printable(config[name].dump()), "; qkv's GPT computes ",
            what_qkv_computes);
}

// One tensor of the file and the parameters it becomes. A Conv1D weight
// [in, parts·out] gives each part's [out, in] (its columns, transposed); its
// bias [parts·out] each part's slice. Anything else is copied as it is.
struct Rule {
  std::string file;                 // the name in the file, without "transformer."
  std::vector<std::string> params;  // qkv's names, one per part
  bool conv1d;
};

std::vector<Rule> rules(int64_t layers) {
  std::vector<Rule> all = {{"wte.weight", {"tok_emb.weight"}, false}, {"wpe.weight", {"pos_emb.weight"}, false}};
  for (int64_t i = 0; i < layers; ++i) {
    const std::string h = cat("h.", i, "."), b = cat("blocks.", i, ".");
    for (const char* p : {"weight", "bias"}) {
      all.push_back({h + "ln_1." + p, {b + "ln1." + p}, false});
      all.push_back(
          {h + "attn.c_attn." + p, {b + "attn.q_proj." + p, b + "attn.k_proj." + p, b + "attn.v_proj." + p}, true});
      all.push_back({h + "attn.c_proj." + p, {b + "attn.out_proj." + p}, true});
      all.push_back({h + "ln_2." + p, {b + "ln2." + p}, false});
      all.push_back({h + "mlp.c_fc." + p, {b + "mlp.fc1." + p}, true});
      all.push_back({h + "mlp.c_proj." + p, {b + "mlp.fc2." + p}, true});
    }
  }
  for (const char* p : {"weight", "bias"}) all.push_back({cat("ln_f.", p), {cat("ln_f.", p)}, false});
  return all;
}

// The file tensor's shape a rule expects, from the parameters' shapes.
Shape file_shape(const Rule& rule, const std::map<std::string, Tensor>& params) {
  Shape s = params.at(rule.params[0]).shape();
  const int64_t parts = static_cast<int64_t>(rule.params.size());
  if (!rule.conv1d) return s;
  if (s.size() == 1) return {parts * s[0]};
  return {s[1], parts * s[0]};  // [in, parts·out]
}

// GPT-2's buffers: the causal mask (attn.bias, the name of a layer's c_attn.bias is longer) and masked_bias.
bool is_buffer(const std::string& bare) {
  const auto ends = [&](const std::string& tail) {
    return bare.size() > tail.size() && bare.compare(bare.size() - tail.size(), tail.size(), tail) == 0;
  };
  return bare.rfind("h.", 0) == 0 && (ends(".attn.bias") || ends(".attn.masked_bias"));
}

// A file's names without the state_dict's "transformer." prefix; the first name fixes the style, and a name of
// the other style is refused (lm_head.weight belongs to neither).
struct Naming {
  int style = -1;  // -1 unknown, 0 bare, 1 "transformer."
  std::string bare(const std::string& name, const std::string& shown) {
    if (name == "lm_head.weight") return name;
    const bool prefixed = name.rfind("transformer.", 0) == 0;
    QKV_CHECK(style < 0 || style == static_cast<int>(prefixed), shown, ": tensor '", printable(name),
              "' mixes the hub's bare names with GPT2LMHeadModel's \"transformer.\" names");
    style = prefixed;
    return prefixed ? name.substr(12) : name;
  }
};

// Visits the (file index, parameter index) pairs of part k of `parts`: a copy, a bias's slice, or a Conv1D
// weight's columns transposed (param[r][c] = file[c][k·out + r]), in tiles that keep both sides in cache.
// Each pair is visited once, on one of the pool's threads (their writes are disjoint).
template <class Visit>
void for_each_pair(const Shape& param_shape, bool conv1d, int64_t k, int64_t parts, Visit visit) {
  if (!conv1d || param_shape.size() == 1) {
    int64_t n = 1;
    for (int64_t d : param_shape) n *= d;
    parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) visit(k * n + i, i);
    });
    return;
  }
  const int64_t out = param_shape[0], in = param_shape[1], row = parts * out;
  constexpr int64_t kTile = 32;
  parallel_for((in + kTile - 1) / kTile, kTile * out, [&](int64_t first_tile, int64_t end_tile) {
    for (int64_t c0 = first_tile * kTile; c0 < std::min(in, end_tile * kTile); c0 += kTile)
      for (int64_t r0 = 0; r0 < out; r0 += kTile)
        for (int64_t c = c0; c < std::min(in, c0 + kTile); ++c)
          for (int64_t r = r0; r < std::min(out, r0 + kTile); ++r) visit(c * row + k * out + r, r * in + c);
  });
}

template <class T> T* as(const Tensor& t) { return static_cast<T*>(t.raw_data()); }

// Part k of a file tensor's values (`Src` as stored, `convert` to the parameter's `Dst`) into `param`. A
// Conv1D weight's part is transposed in 32 x 32 tiles with plain pointers (the visitor's lambdas cost 5 ns an
// element here: the 85M of GPT-2 small's blocks took 0.4 s); each tile column on one of the pool's threads.
template <class Dst, class Src, class Convert>
void fill_part(const Src* file, Tensor& param, bool conv1d, int64_t k, int64_t parts, Convert convert) {
  Dst* dst = as<Dst>(param);
  if (!conv1d || param.dim() == 1) {
    for_each_pair(param.shape(), conv1d, k, parts,
                  [&](int64_t f, int64_t p) { dst[p] = static_cast<Dst>(convert(file[f])); });
    return;
  }
  const int64_t out = param.size(0), in = param.size(1), row = parts * out;
  constexpr int64_t kTile = 32;
  parallel_for((in + kTile - 1) / kTile, kTile * out, [=](int64_t first_tile, int64_t end_tile) {
    for (int64_t c0 = first_tile * kTile; c0 < std::min(in, end_tile * kTile); c0 += kTile)
      for (int64_t r0 = 0; r0 < out; r0 += kTile) {
        const int64_t c1 = std::min(in, c0 + kTile), r1 = std::min(out, r0 + kTile);
        Dst tile[kTile][kTile];  // [r - r0][c - c0]: read along the file's rows, written along the parameter's
        for (int64_t c = c0; c < c1; ++c) {
          const Src* from = file + c * row + k * out;  // file[c][k·out + r]
          for (int64_t r = r0; r < r1; ++r) tile[r - r0][c - c0] = static_cast<Dst>(convert(from[r]));
        }
        for (int64_t r = r0; r < r1; ++r) std::copy(tile[r - r0], tile[r - r0] + (c1 - c0), dst + r * in + c0);
      }
  });
}

// A file tensor's bytes (F32, F64, F16 or BF16, little-endian) into the rule's parameters (on the CPU, float32
// or float64), converted and laid out as they are copied: no buffer of the whole tensor is made.
template <class Dst> void fill_as(const Rule& rule, const io::TensorEntry& entry, std::string_view bytes,
                                  std::map<std::string, Tensor>& params) {
  const int64_t parts = static_cast<int64_t>(rule.params.size());
  for (int64_t k = 0; k < parts; ++k) {
    Tensor& p = params.at(rule.params[k]);
    const void* data = bytes.data();
    if (entry.dtype == "F32")
      fill_part<Dst>(static_cast<const float*>(data), p, rule.conv1d, k, parts, [](float v) { return v; });
    else if (entry.dtype == "F64")
      fill_part<Dst>(static_cast<const double*>(data), p, rule.conv1d, k, parts, [](double v) { return v; });
    else if (entry.dtype == "F16")
      fill_part<Dst>(static_cast<const uint16_t*>(data), p, rule.conv1d, k, parts, io::half_to_float);
    else
      fill_part<Dst>(static_cast<const uint16_t*>(data), p, rule.conv1d, k, parts, io::bfloat16_to_float);
  }
}

void fill(const Rule& rule, const io::TensorEntry& entry, std::string_view bytes,
          std::map<std::string, Tensor>& params) {
  const Tensor& first = params.at(rule.params[0]);
  QKV_CHECK(first.device().is_cpu(), "load_gpt2_into: the model must be on the CPU");
  if (first.dtype() == DType::Float64)
    fill_as<double>(rule, entry, bytes, params);
  else
    fill_as<float>(rule, entry, bytes, params);
}

// The file layout of one rule from its parameters' tensors (the inverse of fill), in their dtype, on the CPU.
Tensor gather(const Rule& rule, const std::vector<Tensor>& parts_in) {
  const int64_t parts = static_cast<int64_t>(parts_in.size());
  const DType dtype = parts_in[0].dtype();
  const Shape& s = parts_in[0].shape();
  Tensor out = Tensor::empty(!rule.conv1d ? s : s.size() == 1 ? Shape{parts * s[0]} : Shape{s[1], parts * s[0]}, dtype);
  for (int64_t k = 0; k < parts; ++k) {
    const Tensor host = parts_in[k].to(Device::cpu()).to(dtype);
    auto copy = [&](auto* to, const auto* from) {
      for_each_pair(s, rule.conv1d, k, parts, [&](int64_t f, int64_t p) { to[f] = from[p]; });
    };
    if (dtype == DType::Float64)
      copy(as<double>(out), as<const double>(host));
    else
      copy(as<float>(out), as<const float>(host));
  }
  return out;
}

// Every tensor of the header checked against the model's: one naming style, known names, the shapes the
// config gives, float dtypes; each rule's tensor present. Nothing of the data is read yet.
// `config` names config.json in the errors where the two files disagree: either may be the wrong one.
void check_header(const std::vector<io::TensorEntry>& entries, const std::vector<Rule>& all,
                  const std::map<std::string, const Rule*>& by_file, const std::map<std::string, Tensor>& params,
                  const std::string& shown, const std::string& config) {
  Naming naming;
  std::set<std::string> seen;
  for (const io::TensorEntry& e : entries) {
    const std::string bare = naming.bare(e.name, shown), name = printable(e.name);
    if (is_buffer(bare)) continue;
    const bool head = bare == "lm_head.weight";
    QKV_CHECK(head || by_file.count(bare), shown, ": tensor '", name,
              "' is not GPT-2's (qkv reads wte, wpe, h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, "
              "mlp.c_proj}, ln_f and the tied lm_head; a layer past the n_layer of ",
              config, " is refused)");
    QKV_CHECK(e.dtype == "F32" || e.dtype == "F16" || e.dtype == "BF16" || e.dtype == "F64", shown, ": tensor '", name,
              "' is ", printable(e.dtype), "; GPT-2's weights are floats");
    const Shape want = file_shape(head ? *by_file.at("wte.weight") : *by_file.at(bare), params);
    QKV_CHECK(e.shape == want, shown, ": tensor '", name, "' is ", shape_str(e.shape), "; ", config, " makes it ",
              shape_str(want));
    seen.insert(bare);
  }
  const char* prefix = naming.style == 1 ? "transformer." : "";
  for (const Rule& r : all)
    QKV_CHECK(seen.count(r.file), shown, ": no tensor '", prefix, r.file, "' (", config, "'s model needs it)");
}

}  // namespace

GPTConfig read_gpt2_config(const std::string& folder) {
  std::string shown;
  const nlohmann::json c = read_config(folder, shown);
  require(
      c, shown, "model_type", [](const auto& v) { return v == "gpt2"; }, "GPT-2 (model_type \"gpt2\")");
  GPTConfig g;
  g.vocab = size_field(c, shown, "vocab_size", kMaxVocab);
  g.context = size_field(c, shown, "n_positions", kMaxContext, "n_ctx");
  g.width = size_field(c, shown, "n_embd", kMaxWidth);
  g.layers = size_field(c, shown, "n_layer", kMaxLayers);
  g.heads = size_field(c, shown, "n_head", kMaxWidth);
  QKV_CHECK(g.width % g.heads == 0, shown, ": n_embd ", g.width, " is not divisible by n_head ", g.heads);
  const int64_t inner = 4 * g.width;
  require(
      c, shown, "n_inner", [&](const auto& v) { return v.is_number_integer() && v.template get<int64_t>() == inner; },
      "an MLP of 4·n_embd (n_inner null)");
  require(
      c, shown, "activation_function", [](const auto& v) { return v == "gelu_new" || v == "gelu_pytorch_tanh"; },
      "GELU's tanh form (gelu_new)");
  require(
      c, shown, "layer_norm_epsilon",
      [](const auto& v) { return v.is_number() && std::fabs(v.template get<double>() - 1e-5) < 1e-12; },
      "LayerNorm with eps 1e-5");
  require(
      c, shown, "scale_attn_weights", [](const auto& v) { return v == true; }, "scores scaled by 1/sqrt(d)");
  require(
      c, shown, "scale_attn_by_inverse_layer_idx", [](const auto& v) { return v == false; },
      "the same scale in every layer");
  require(
      c, shown, "add_cross_attention", [](const auto& v) { return v == false; }, "no cross-attention");
  require(
      c, shown, "tie_word_embeddings", [](const auto& v) { return v == true; }, "a head tied to wte");
  return g;
}

bool is_gpt2_folder(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string gpt2_weights_file(const std::string& folder) {
  const std::string path = io::file_in_folder(folder, "model.safetensors", kFolderIs);
  if (std::filesystem::exists(path)) return path;
  for (const char* other : {"pytorch_model.bin", "model.bin", "tf_model.h5", "flax_model.msgpack"})
    QKV_CHECK(!std::filesystem::exists(std::filesystem::path(folder) / other), printable(folder), ": holds ", other,
              " but no model.safetensors; qkv reads safetensors only (",
              std::string(other) == "pytorch_model.bin" ? "a pickle can run code when it is loaded; " : "",
              "fetch the folder's model.safetensors)");
  throw Error(cat(printable(folder), ": no model.safetensors (", kExpected, ")"));
}

std::unique_ptr<GPT> load_gpt2(const std::string& folder, const GPTConfig& config) {
  std::unique_ptr<GPT> model;
  {
    SkipInitGuard no_draws;  // every parameter is read from the file
    model = std::make_unique<GPT>(config);
  }
  load_gpt2_into(*model, folder);
  model->eval();
  return model;
}

void load_gpt2_into(GPT& gpt, const std::string& folder) {
  const GPTConfig folder_config = read_gpt2_config(folder), &config = gpt.config();
  QKV_CHECK(folder_config.vocab == config.vocab && folder_config.context == config.context &&
                folder_config.width == config.width && folder_config.heads == config.heads &&
                folder_config.layers == config.layers,
            printable(folder), ": its config.json describes another model (vocab ", folder_config.vocab, ", context ",
            folder_config.context, ", width ", folder_config.width, ", ", folder_config.heads, " heads, ",
            folder_config.layers, " layers)");
  const std::string path = gpt2_weights_file(folder), shown = printable(path);
  const std::vector<io::TensorEntry> entries = io::read_safetensors_header(path);
  GPT* model = &gpt;
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : model->named_parameters()) params[name] = p;
  const std::vector<Rule> all = rules(config.layers);
  std::map<std::string, const Rule*> by_file;  // a file tensor's name -> its rule
  for (const Rule& r : all) by_file[r.file] = &r;
  check_header(entries, all, by_file, params, shown, printable(io::file_in_folder(folder, "config.json", kFolderIs)));
  Naming naming;
  Tensor head;  // lm_head.weight, where the file holds one: compared with wte once both are read
  io::for_each_safetensor(path, [&](const io::TensorEntry& entry, std::string_view bytes) {
    const std::string bare = naming.bare(entry.name, shown);
    if (is_buffer(bare)) return;
    const bool is_head = bare == "lm_head.weight";
    Rule rule = is_head ? Rule{bare, {"lm_head"}, false} : *by_file.at(bare);
    if (is_head)
      params["lm_head"] = head = Tensor::empty(model->tok_emb->weight.shape(), model->tok_emb->weight.dtype());
    fill(rule, entry, bytes, params);
    for (const std::string& p : rule.params)  // a NaN or an infinity: a diverged run's file
      if (int64_t at = first_non_finite(params.at(p)); at >= 0)
        throw NonFiniteParameter(cat(shown, ": tensor '", printable(entry.name), "' holds ",
                                     params.at(p).to_vector()[at], " (", p, "'s element ", at, ")"));
  });
  if (head.defined())
    QKV_CHECK(std::memcmp(head.raw_data(), model->tok_emb->weight.raw_data(),
                          static_cast<size_t>(head.numel()) * element_size(head.dtype())) == 0,
              shown, ": lm_head.weight differs from wte.weight; qkv's GPT ties its head to the token embedding");
}

namespace {

constexpr int32_t kLlmcMagic = 20240326;

// An llm.c checkpoint's header, checked: the model it describes, its element size, its padded vocabulary.
struct LlmcHeader {
  GPTConfig config;
  int64_t padded_vocab = 0, element_bytes = 4;
};

LlmcHeader read_llmc_header(const io::FileReader& file, const std::string& shown) {
  int32_t h[256];
  QKV_CHECK(file.size() >= static_cast<int64_t>(sizeof h), shown, ": ", file.size(),
            " bytes, shorter than an llm.c checkpoint's header of 1024");
  file.read(0, reinterpret_cast<char*>(h), sizeof h);
  QKV_CHECK(h[0] == kLlmcMagic, shown, ": not an llm.c GPT-2 checkpoint (its magic number is ", h[0], ", not ",
            kLlmcMagic, ")");
  QKV_CHECK(h[1] == 3 || h[1] == 5, shown, ": llm.c checkpoint version ", h[1],
            "; qkv reads versions 3 (float32) and 5 (bfloat16), what llm.c's train_gpt2.py writes");
  auto field = [&](int at, const char* name, int64_t max) {
    QKV_CHECK(h[at] >= 1 && h[at] <= max, shown, ": its header's ", name, " is ", h[at], "; qkv reads 1 to ", max);
    return static_cast<int64_t>(h[at]);
  };
  LlmcHeader out;
  out.element_bytes = h[1] == 3 ? 4 : 2;
  GPTConfig& c = out.config;
  c.context = field(2, "max_seq_len", kMaxContext);
  c.vocab = field(3, "vocab_size", kMaxVocab);
  c.layers = field(4, "num_layers", kMaxLayers);
  c.heads = field(5, "num_heads", kMaxWidth);
  c.width = field(6, "channels", kMaxWidth);
  out.padded_vocab = field(7, "padded_vocab_size", kMaxVocab);
  QKV_CHECK(out.padded_vocab >= c.vocab, shown, ": padded_vocab_size ", out.padded_vocab, " is under vocab_size ",
            c.vocab);
  QKV_CHECK(c.width % c.heads == 0, shown, ": channels ", c.width, " is not divisible by num_heads ", c.heads);
  // The sizes are bounded (at most 2^20 each), so the count fits in 64 bits.
  const int64_t C = c.width, L = c.layers;
  const int64_t elements = out.padded_vocab * C + c.context * C + L * (12 * C * C + 13 * C) + 2 * C;
  QKV_CHECK(file.size() == 1024 + elements * out.element_bytes, shown, ": ", file.size(), " bytes, but its header (", L,
            " layers, channels ", C, ", vocab ", out.padded_vocab, " padded, context ", c.context, ", ",
            out.element_bytes == 4 ? "float32" : "bfloat16", ") describes ", 1024 + elements * out.element_bytes);
  return out;
}

// A rule's parameters as stretches of a mapped llm.c file, where they can be: float32 parameters, each part
// the next run of the file's values (row-major like the parameter), 64-byte aligned as every storage is.
bool adopt_mapped(const Rule& rule, const std::shared_ptr<char>& mapped, int64_t offset,
                  std::map<std::string, Tensor>& params) {
  int64_t at = offset;
  for (const std::string& name : rule.params) {
    const Tensor& p = params.at(name);
    if (rule.conv1d || p.dtype() != DType::Float32 || !p.device().is_cpu() || (at % 64) != 0) return false;
    at += p.numel() * 4;
  }
  at = offset;
  for (const std::string& name : rule.params) {
    Tensor& p = params.at(name);
    const size_t bytes = static_cast<size_t>(p.numel()) * 4;
    p.impl_ptr()->storage = std::make_shared<Storage>(mapped.get() + at, bytes, mapped);
    at += static_cast<int64_t>(bytes);
  }
  return true;
}

void check_finite(const Rule& rule, const std::map<std::string, Tensor>& params, const std::string& shown) {
  for (const std::string& p : rule.params)
    if (int64_t bad = first_non_finite(params.at(p)); bad >= 0)
      throw NonFiniteParameter(
          cat(shown, ": its ", rule.file, " holds ", params.at(p).to_vector()[bad], " (", p, "'s element ", bad, ")"));
}

// llm.c's parameters in file order: each is the file's tensor, the qkv parameters it fills (c_attn's rows are
// the query's, the key's and the value's), and its elements in the file.
std::vector<std::pair<Rule, int64_t>> llmc_order(const LlmcHeader& header) {
  const GPTConfig& c = header.config;
  const int64_t C = c.width;
  std::vector<std::pair<Rule, int64_t>> order = {{{"wte", {"tok_emb.weight"}, false}, header.padded_vocab * C},
                                                 {{"wpe", {"pos_emb.weight"}, false}, c.context * C}};
  auto each_layer = [&](const std::string& what, const std::vector<std::string>& params, int64_t elements) {
    for (int64_t i = 0; i < c.layers; ++i) {
      std::vector<std::string> names;
      for (const std::string& p : params) names.push_back(cat("blocks.", i, ".", p));
      order.push_back({{cat("h.", i, ".", what), names, false}, elements});
    }
  };
  each_layer("ln_1.weight", {"ln1.weight"}, C);
  each_layer("ln_1.bias", {"ln1.bias"}, C);
  each_layer("attn.c_attn.weight", {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight"}, 3 * C * C);
  each_layer("attn.c_attn.bias", {"attn.q_proj.bias", "attn.k_proj.bias", "attn.v_proj.bias"}, 3 * C);
  each_layer("attn.c_proj.weight", {"attn.out_proj.weight"}, C * C);
  each_layer("attn.c_proj.bias", {"attn.out_proj.bias"}, C);
  each_layer("ln_2.weight", {"ln2.weight"}, C);
  each_layer("ln_2.bias", {"ln2.bias"}, C);
  each_layer("mlp.c_fc.weight", {"mlp.fc1.weight"}, 4 * C * C);
  each_layer("mlp.c_fc.bias", {"mlp.fc1.bias"}, 4 * C);
  each_layer("mlp.c_proj.weight", {"mlp.fc2.weight"}, 4 * C * C);
  each_layer("mlp.c_proj.bias", {"mlp.fc2.bias"}, C);
  order.push_back({{"ln_f.weight", {"ln_f.weight"}, false}, C});
  order.push_back({{"ln_f.bias", {"ln_f.bias"}, false}, C});
  return order;
}

}  // namespace

bool is_llmc_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kLlmcMagic;
}

GPTConfig read_llmc_config(const std::string& path) {
  const io::FileReader file(path, "llm.c checkpoint");
  return read_llmc_header(file, printable(path)).config;
}

std::unique_ptr<GPT> load_llmc(const std::string& path) {
  const std::string shown = printable(path);
  const io::FileReader file(path, "llm.c checkpoint");
  const LlmcHeader header = read_llmc_header(file, shown);
  std::unique_ptr<GPT> model;
  {
    SkipInitGuard no_draws;  // every parameter is read from the file
    model = std::make_unique<GPT>(header.config);
  }
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : model->named_parameters()) params[name] = p;
  // float32 parameters are the file's own bytes where its layout is theirs: mapped, not copied (the first token
  // of a 124M model came 1.5 s after start, most of it zeroing, faulting and copying 496 MB).
  const std::shared_ptr<char> mapped = header.element_bytes == 4 ? file.map() : nullptr;
  std::string buffer;
  int64_t at = 1024;
  for (const auto& [rule, elements] : llmc_order(header)) {
    const int64_t offset = at;
    at += elements * header.element_bytes;
    if (mapped && adopt_mapped(rule, mapped, offset, params)) {
      check_finite(rule, params, shown);
      continue;
    }
    buffer.resize(static_cast<size_t>(elements * header.element_bytes));
    file.read(offset, buffer.data(), buffer.size());
    const io::TensorEntry entry{rule.file, header.element_bytes == 4 ? "F32" : "BF16", {elements}};
    fill(rule, entry, buffer, params);  // wte: its first vocab_size rows (the padding is never read into the model)
    check_finite(rule, params, shown);
  }
  model->eval();
  return model;
}

io::NamedTensors gpt2_tensors(const GPT& model,
                              const std::function<Tensor(const std::string& name, const Tensor& parameter)>& of,
                              bool bare) {
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : model.named_parameters()) params[name] = p;
  io::NamedTensors out;
  for (const Rule& r : rules(model.config().layers)) {
    std::vector<Tensor> parts;
    for (const std::string& p : r.params) {
      Tensor t = of(p, params.at(p));
      if (!t.defined())
        t = Tensor::zeros(params.at(p).shape(), params.at(p).dtype());  // a gradient that reached nothing
      QKV_CHECK(t.shape() == params.at(p).shape(), "gpt2_tensors: no ", p, " of shape ",
                shape_str(params.at(p).shape()));
      parts.push_back(t);
    }
    out.emplace_back((bare ? "" : "transformer.") + r.file, gather(r, parts));
  }
  return out;
}

std::string gpt2_config_json(const GPTConfig& config) {
  nlohmann::ordered_json c;
  c["architectures"] = {"GPT2LMHeadModel"};
  c["model_type"] = "gpt2";
  c["vocab_size"] = config.vocab;
  c["n_positions"] = config.context;
  c["n_ctx"] = config.context;
  c["n_embd"] = config.width;
  c["n_layer"] = config.layers;
  c["n_head"] = config.heads;
  c["n_inner"] = nullptr;
  c["activation_function"] = "gelu_new";
  c["layer_norm_epsilon"] = 1e-5;
  c["resid_pdrop"] = c["embd_pdrop"] = c["attn_pdrop"] = config.dropout;
  c["scale_attn_weights"] = true;
  c["scale_attn_by_inverse_layer_idx"] = false;
  c["reorder_and_upcast_attn"] = false;
  c["tie_word_embeddings"] = true;
  c["bos_token_id"] = c["eos_token_id"] = config.vocab - 1;  // GPT-2's <|endoftext|> is its last token
  c["initializer_range"] = 0.02;
  return c.dump(2) + "\n";
}

void save_gpt2(const std::string& folder, const GPT& model) {
  std::filesystem::create_directories(folder);
  io::NamedTensors tensors =
      gpt2_tensors(model, [](const std::string&, const Tensor& p) { return p.to(Device::cpu()).to(DType::Float32); });
  io::save_safetensors((std::filesystem::path(folder) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  io::write_file((std::filesystem::path(folder) / "config.json").string(), gpt2_config_json(model.config()));
}

}  // namespace qkv::nn
