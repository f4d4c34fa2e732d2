#include "nn/model_kinds.h"

#include <cmath>
#include <deque>
#include <optional>

#include "autograd/error.h"
#include "io/metadata.h"

namespace qkv::nn {

std::map<std::string, std::string> ModelShape::fields() const {
  std::map<std::string, std::string> f{{"vocab", std::to_string(vocab)},   {"context", std::to_string(context)},
                                       {"width", std::to_string(width)},   {"heads", std::to_string(heads)},
                                       {"layers", std::to_string(layers)}, {"dropout", io::exact_number(dropout)},
                                       {"post_ln", post_ln ? "1" : "0"},   {"attention", attention}};
  if (classes > 0) f["classes"] = std::to_string(classes), f["pooling"] = pooling;
  if (image > 0) f["image"] = std::to_string(image), f["patch"] = std::to_string(patch);
  // Only parts other than the defaults: a model of today's parts keeps today's bytes.
  const BlockParts defaults;
  for (const PartChoice& c : part_choices())
    if (c.get(parts) != c.get(defaults)) {
      f[c.key] = c.get(parts);
      if (!c.plugin(parts).empty()) f[cat("plugin.", c.key)] = c.plugin(parts);  // what a reader must load
    }
  return f;
}

namespace {

// "its norm 'my_norm' comes from the plugin libmine.so: ...", for the first part
// of `fields` that no registry holds and whose plugin the file names.
std::optional<std::string> missing_plugin(const std::map<std::string, std::string>& fields) {
  for (const PartChoice& c : part_choices()) {
    auto value = fields.find(c.key), plugin = fields.find(cat("plugin.", c.key));
    if (value == fields.end() || plugin == fields.end()) continue;
    try {
      BlockParts parts;
      c.set(parts, value->second);
    } catch (const Error&) {
      return cat("its ", c.key, " '", printable(value->second, 40), "' comes from the plugin ",
                 printable(plugin->second, 80), ": load it (qkv: --plugin PATH/", printable(plugin->second, 80), ")");
    }
  }
  return std::nullopt;
}

}  // namespace

ModelShape ModelShape::from_fields(const std::map<std::string, std::string>& fields, const std::string& where) {
  auto field = [&](const char* key) -> const std::string& {
    auto it = fields.find(key);
    QKV_CHECK(it != fields.end(), where, ": bad model description in its metadata (no ", key, ")");
    return it->second;
  };
  // Every size bounded before anything is built from it: a file saying
  // layers = 100000000 must not allocate until the memory runs out.
  auto integer = [&](const char* key, int64_t low, int64_t high) {
    const std::string& text = field(key);
    int64_t v = 0;
    QKV_CHECK(io::parse_integer(text, v) && v >= low && v <= high, where, ": bad model description in its metadata (",
              key, " = '", printable(text), "', expected an integer in [", low, ", ", high, "])");
    return v;
  };
  ModelShape s;
  s.vocab = integer("vocab", 1, kMaxVocab);
  s.context = integer("context", 1, kMaxContext);
  s.width = integer("width", 1, kMaxWidth);
  s.heads = integer("heads", 1, s.width);
  QKV_CHECK(s.width % s.heads == 0, where, ": bad model description in its metadata (heads ", s.heads,
            " does not divide width ", s.width, ")");
  s.layers = integer("layers", 1, kMaxLayers);
  s.dropout = io::parse_number(field("dropout"), cat(where, ": dropout"));
  QKV_CHECK(s.dropout >= 0 && s.dropout < 1, where, ": bad model description in its metadata (dropout ", s.dropout,
            ")");
  // One of two values: "17", "copy" or nothing once read as false and was shown as it was.
  const std::string& post_ln = field("post_ln");
  QKV_CHECK(post_ln == "0" || post_ln == "1", where, ": bad model description in its metadata (post_ln = '",
            printable(post_ln), "', expected 0 or 1)");
  s.post_ln = post_ln == "1";
  if (fields.count("attention")) s.attention = AttentionKind::parse(fields.at("attention")).str();  // older files: full
  if (fields.count("classes")) {
    s.classes = integer("classes", 2, kMaxClasses);
    s.pooling = field("pooling");
    parse_pooling(s.pooling);
  }
  // A ViT's image and patch come together: either alone is a file that lost a field, not a patch of 0.
  if (fields.count("image") || fields.count("patch")) {
    s.image = integer("image", 1, kMaxImage);
    s.patch = integer("patch", 1, s.image);
    QKV_CHECK(s.image % s.patch == 0, where, ": bad model description in its metadata (patch ", s.patch,
              " does not tile images of ", s.image, ")");
  }
  try {
    for (const PartChoice& c : part_choices())
      if (fields.count(c.key)) c.set(s.parts, fields.at(c.key));
  } catch (const Error& e) {  // a part no registry holds (a plugin's, not loaded) is an error naming the file
    throw Error(cat(where, ": ", missing_plugin(fields).value_or(e.what())));
  }
  s.parts.check(where, s.heads, s.width);
  return s;
}

GPTConfig gpt_config(const ModelShape& s) {
  GPTConfig c;
  c.parts = s.parts;
  c.vocab = s.vocab, c.context = s.context, c.width = s.width, c.heads = s.heads, c.layers = s.layers;
  c.dropout = s.dropout, c.post_ln = s.post_ln, c.attention = AttentionKind::parse(s.attention);
  return c;
}

Seq2SeqConfig seq2seq_config(const ModelShape& s) {
  Seq2SeqConfig c;
  c.parts = s.parts;
  c.vocab = s.vocab, c.context = s.context, c.width = s.width, c.heads = s.heads;
  c.encoder_layers = c.decoder_layers = s.layers, c.dropout = s.dropout, c.post_ln = s.post_ln;
  c.attention = AttentionKind::parse(s.attention);
  return c;
}

EncoderConfig encoder_config(const ModelShape& s) {
  EncoderConfig c;
  c.parts = s.parts;
  c.vocab = s.vocab, c.context = s.context, c.width = s.width, c.heads = s.heads, c.layers = s.layers;
  c.classes = s.classes, c.pooling = parse_pooling(s.pooling), c.dropout = s.dropout, c.post_ln = s.post_ln;
  c.attention = AttentionKind::parse(s.attention);
  return c;
}

ViTConfig vit_config(const ModelShape& s) {
  ViTConfig c;
  c.parts = s.parts;
  c.image = s.image, c.patch = s.patch, c.width = s.width, c.heads = s.heads, c.layers = s.layers;
  c.classes = s.classes, c.dropout = s.dropout, c.post_ln = s.post_ln, c.attention = AttentionKind::parse(s.attention);
  return c;
}

RecommenderConfig recommender_config(const ModelShape& s) {
  RecommenderConfig c;
  c.parts = s.parts;
  c.items = s.vocab - 1, c.context = s.context, c.width = s.width, c.heads = s.heads, c.layers = s.layers;
  c.dropout = s.dropout, c.post_ln = s.post_ln, c.attention = AttentionKind::parse(s.attention);
  return c;
}

namespace {

// Per block: self-attention's projections with biases (q and out C x C, k
// and v kv x C, kv = C · kv_heads / heads: 4C² + 4C with a key/value head per
// head), two norms and the MLP, each the count of its part (LayerNorm 2C, the
// GELU MLP 8C² + 5C: 12C² + 13C in all). A decoder block adds a norm and
// cross-attention (4C² + 4C). Embeddings V·C, the position table T·C where the
// position part keeps one, the head tied to tok_emb, and the final norm.
// Counted in double: a hostile file's sizes must not overflow before they are compared.
double attention_parameters(double C) { return 4 * C * C + 4 * C; }
double self_attention_parameters(const ModelShape& s) {
  const double C = static_cast<double>(s.width),
               kv = C * static_cast<double>(s.parts.kv_heads_for(s.heads)) / static_cast<double>(s.heads);
  return 2 * (C * C + C) + 2 * (kv * C + kv);
}
double norm_parameters(const ModelShape& s) { return norm_part(s.parts.norm).parameters(static_cast<double>(s.width)); }
double block_parameters(const ModelShape& s) {
  return self_attention_parameters(s) + 2 * norm_parameters(s) +
         mlp_part(s.parts.mlp).parameters(static_cast<double>(s.width));
}
// A learned table of `positions` rows, or nothing.
double position_parameters(const ModelShape& s, double positions) {
  return position_part(s.parts.position).table ? positions * static_cast<double>(s.width) : 0;
}
double embedding_parameters(const ModelShape& s) {
  double C = static_cast<double>(s.width);
  return static_cast<double>(s.vocab) * C + position_parameters(s, static_cast<double>(s.context)) +
         norm_parameters(s);  // + ln_f
}
int64_t saturate(double n) { return n > 9e18 ? INT64_MAX : static_cast<int64_t>(n); }
// A classifier's head: classes x width weights and a bias per class.
double head_parameters(const ModelShape& s) {
  return static_cast<double>(s.classes) * static_cast<double>(s.width + 1);
}
double blocks_parameters(const ModelShape& s) { return static_cast<double>(s.layers) * block_parameters(s); }

void no_check(const ModelShape&, const std::string&) {}
void check_classifier(const ModelShape& s, const std::string& where) {
  QKV_CHECK(s.classes >= 2, where, ": a classifier needs classes >= 2, got ", s.classes);
  parse_pooling(s.pooling);
}
void check_vit(const ModelShape& s, const std::string& where) {
  check_classifier(s, where);
  QKV_CHECK(s.image >= 1, where, ": a ViT needs its image's side (no image field)");
  QKV_CHECK(s.patch >= 1 && s.image % s.patch == 0, where, ": a ViT's patch side must divide its ",
            "images' side: patch ", s.patch, " does not tile images of ", s.image, " x ", s.image);
  QKV_CHECK(s.pooling == "cls", where, ": a ViT pools its [CLS] token, not '", printable(s.pooling), "'");
}
void check_recommender(const ModelShape& s, const std::string& where) {
  QKV_CHECK(s.vocab >= 2, where, ": a recommender needs items (vocab ", s.vocab, " holds only the padding)");
}

// A deque: registering a kind never moves the ones model_kind() handed out.
// The built-in kinds come first, in the order of their accessors below.
std::deque<ModelKind>& kinds() {
  static std::deque<ModelKind> all{
      {"gpt", "decoder-only transformer (causal self-attention, tied head)",
       [](const ModelShape& s) { return saturate(embedding_parameters(s) + blocks_parameters(s)); }, no_check,
       [](const ModelShape& s, Generator* gen) -> std::unique_ptr<Module> {
         return std::make_unique<GPT>(gpt_config(s), gen);
       }},
      {"seq2seq", "encoder-decoder transformer (self- and cross-attention)",
       [](const ModelShape& s) {
         // encoder and decoder blocks, each decoder block with ln_cross and cross_attn; and encoder_ln
         double cross = norm_parameters(s) + attention_parameters(static_cast<double>(s.width));
         return saturate(embedding_parameters(s) + 2 * blocks_parameters(s) + static_cast<double>(s.layers) * cross +
                         norm_parameters(s));
       },
       no_check,
       [](const ModelShape& s, Generator* gen) -> std::unique_ptr<Module> {
         return std::make_unique<Seq2Seq>(seq2seq_config(s), gen);
       }},
      {"encoder", "BERT-style classifier (bidirectional encoder, [CLS] or mean pooling, a class head)",
       [](const ModelShape& s) {
         double C = static_cast<double>(s.width);
         return saturate(embedding_parameters(s) + (s.pooling == "cls" ? C : 0) + blocks_parameters(s) +
                         head_parameters(s));
       },
       check_classifier,
       [](const ModelShape& s, Generator* gen) -> std::unique_ptr<Module> {
         return std::make_unique<EncoderClassifier>(encoder_config(s), gen);
       }},
      {"vit", "Vision Transformer (an image's patches and a [CLS] token, a class head)",
       [](const ModelShape& s) {
         if (s.patch <= 0 || s.image <= 0) return int64_t{0};  // check_vit refuses it
         double C = static_cast<double>(s.width), p = static_cast<double>(s.patch),
                tokens = static_cast<double>(vit_config(s).tokens());
         // patch_embed (p² x C and a bias), cls_token, pos_emb, the blocks, ln_f and the head
         return saturate(p * p * C + C + C + position_parameters(s, tokens) + blocks_parameters(s) +
                         norm_parameters(s) + head_parameters(s));
       },
       check_vit,
       [](const ModelShape& s, Generator* gen) -> std::unique_ptr<Module> {
         return std::make_unique<ViT>(vit_config(s), gen);
       }},
      {"recommender", "SASRec-style next-item recommender (causal attention over a history, tied item scores)",
       [](const ModelShape& s) { return saturate(embedding_parameters(s) + blocks_parameters(s)); }, check_recommender,
       [](const ModelShape& s, Generator* gen) -> std::unique_ptr<Module> {
         return std::make_unique<Recommender>(recommender_config(s), gen);
       }},
  };
  return all;
}

}  // namespace

const ModelKind& model_kind(const std::string& name) {
  for (const ModelKind& k : kinds())
    if (k.name == name) return k;
  std::string names;
  for (const ModelKind& k : kinds()) names += (names.empty() ? "" : ", ") + k.name;
  throw Error(cat("unknown model '", printable(name), "' (", names, ")"));
}

std::vector<std::string> model_kind_names() {
  std::vector<std::string> names;
  for (const ModelKind& k : kinds()) names.push_back(k.name);
  return names;
}

void register_model_kind(ModelKind kind) {
  for (const ModelKind& k : kinds()) QKV_CHECK(k.name != kind.name, "register_model_kind: '", kind.name, "' exists");
  kinds().push_back(std::move(kind));
}

const ModelKind& gpt_kind() { return kinds()[0]; }
const ModelKind& seq2seq_kind() { return kinds()[1]; }
const ModelKind& encoder_kind() { return kinds()[2]; }
const ModelKind& vit_kind() { return kinds()[3]; }
const ModelKind& recommender_kind() { return kinds()[4]; }

}  // namespace qkv::nn
