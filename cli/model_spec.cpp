#include "model_spec.h"

#include "bounds.h"
#include "io/metadata.h"
#include "kinds.h"
#include "task.h"

namespace qkv::cli {

namespace {
const std::string kTokenizerKey = "qkv.tokenizer.";  // + a tokenizer file's name: its contents
}

Error bad_description(const std::string& file, const std::string& what) {
  return Error(what.compare(0, file.size(), file) == 0
                   ? what
                   : cat(file, ": bad model description in its metadata (", what, ")"));
}

std::map<std::string, std::string> ModelSpec::metadata() const {
  std::map<std::string, std::string> task_fields{
      {"name", task}, {"max_len", std::to_string(max_len)}, {"digits", std::to_string(digits)}, {"data", data}};
  std::map<std::string, std::string> out{
      {"qkv.model", model}, {"qkv.config", io::json_object(fields())}, {"qkv.task", io::json_object(task_fields)}};
  // A BPE model carries its tokenizer's files (about 1.5 MB for GPT-2's): it samples and evaluates without a folder.
  if (!tokenizer_files.empty()) out["qkv.tokenizer"] = tokenizer;
  for (const auto& [name, text] : tokenizer_files) out[kTokenizerKey + name] = text;
  return out;
}

ModelSpec ModelSpec::from_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  const std::string file = printable(path);
  auto need = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    QKV_CHECK(it != meta.end(), file, ": not a qkv model checkpoint (no ", key, " in its metadata)");
    return it->second;
  };
  ModelSpec s;
  try {
    s.model = need("qkv.model");
    nn::model_kind(s.model);  // a kind qkv knows
    static_cast<nn::ModelShape&>(s) = nn::ModelShape::from_fields(io::parse_json_object(need("qkv.config")), file);
    auto task = io::parse_json_object(need("qkv.task"));
    auto field = [&](const char* key) -> const std::string& {
      auto it = task.find(key);
      QKV_CHECK(it != task.end(), file, ": bad model description in its metadata (no ", key, ")");
      return it->second;
    };
    auto integer = [&](const char* key, int64_t high) {
      int64_t v = 0;
      QKV_CHECK(io::parse_integer(field(key), v) && v >= 1 && v <= high, file,
                ": bad model description in its metadata (", key, " = '", printable(field(key)),
                "', expected an integer in [1, ", high, "])");
      return v;
    };
    s.task = field("name");
    QKV_CHECK(is_task(s.task), file, ": unknown task '", printable(s.task), "'");
    QKV_CHECK(learns(kind_row(s.model), task_row(s.task)), file, ": ", with_article(s.model),
              " model does not learn the ", s.task, " task");
    nn::model_kind(s.model).check(s, file);  // the fields this kind needs, before its formula reads them
    s.max_len = integer("max_len", kMaxInputLength);
    s.digits = integer("digits", kMaxDigits);
    s.data = field("data");  // where it trained: shown, never opened (qkv reads only files the user names)
    for (const auto& [key, text] : meta)
      if (key.rfind(kTokenizerKey, 0) == 0) {
        const std::string name = key.substr(kTokenizerKey.size());
        QKV_CHECK(name == "vocab.json" || name == "merges.txt" || name == "tokenizer.json", file,
                  ": unknown tokenizer file '", printable(name), "' in its metadata");
        s.tokenizer_files[name] = text;
      }
    if (!s.tokenizer_files.empty()) {
      QKV_CHECK(s.task == "text", file, ": a tokenizer in its metadata, for ", with_article(s.task), " model");
      s.tokenizer = meta.count("qkv.tokenizer") ? meta.at("qkv.tokenizer") : "";  // shown, never opened
    }
    s.source = path;
  } catch (const Error& e) {
    throw bad_description(file, e.what());
  }
  return s;
}

int64_t ModelSpec::parameter_count() const { return nn::model_kind(model).parameter_count(*this); }

void ModelSpec::check_sizes() const {
  check_range("layers", layers, 1, kMaxLayers);
  check_range("dim", width, 1, kMaxWidth);
  check_range("heads", heads, 1, width);
  QKV_CHECK(width % heads == 0, "--heads ", heads, " does not divide --dim ", width);
  parts.check("", heads, width);  // --kv-heads divides --heads; rope's heads are of even width
  if (context != 0) check_range("context", context, 1, kMaxContext);
  check_range("max-len", max_len, 1, kMaxInputLength);
  check_range("digits", digits, 1, kMaxDigits);
}

void ModelSpec::check_tensors(const io::TensorFile& file, const std::string& path) const {
  int64_t held = 0;
  for (const auto& [name, t] : file.tensors)
    if (name.compare(0, 10, "optimizer.") != 0) held += t.numel();
  QKV_CHECK(held == parameter_count(), printable(path), ": its metadata describes ", with_article(model), " of ",
            parameter_count(), " parameters (width ", width, ", ", layers, " layers, vocab ", vocab, ", context ",
            context, ") but it holds ", held);
}

ModelSpec small_model_spec(const std::string& kind) {
  ModelSpec spec;
  const KindRow& row = kind_row(kind);
  spec.model = kind, spec.task = first_task(row).name, spec.max_len = 4;
  spec.width = 8, spec.heads = 2, spec.layers = 2;
  row.small(spec);
  return spec;
}

double training_bytes(const ModelSpec& s, int64_t batch) {
  const double tokens = static_cast<double>(s.example_tokens > 0 ? s.example_tokens : s.context);
  return training_step_bytes(static_cast<double>(s.parameter_count()), static_cast<double>(batch) * tokens,
                             static_cast<double>(s.layers) * kind_row(s.model).blocks_per_layer,
                             static_cast<double>(s.width), static_cast<double>(s.vocab),
                             2.0 * static_cast<double>(s.heads) * tokens, kind_row(s.model).fused_head);
}

double forward_bytes(const ModelSpec& s, int64_t batch) {
  return 4.0 * static_cast<double>(batch) * static_cast<double>(s.context) *
         (2.0 * static_cast<double>(s.vocab) + 16.0 * static_cast<double>(s.width));
}

}  // namespace qkv::cli
