// hostile_files SOURCE TEXT_SOURCE DIR: from real qkv checkpoints (a task
// model and a text model), writes the files a
// hostile-input campaign found that cost time or memory to reject:
//   keys160k.safetensors   a 160,000-tensor header (once quadratic to parse)
//   layers1e8.safetensors  the source's tensors, metadata claiming 10^8 layers
//   layersmax.safetensors  layers = INT64_MAX; width1m: width 1048576; context1m: context 1000000
//   evil.safetensors       a task name with a newline and a terminal escape sequence
//   devzero.safetensors    the text model, its metadata naming /dev/zero as its data
//   nan.safetensors, inf.safetensors  the task model with one weight NaN (+inf): a diverged run's file
//   evilkey.safetensors    a training setting whose name holds a newline and an escape sequence
//   seed20.safetensors     a 20-digit seed (past uint64: once std::stoull's uncaught out_of_range)
//   moment.safetensors     a negative Adam second moment (once resumed into a NaN step that was saved)
//   huge.safetensors       every weight 3e38: finite (the load's check passes), and every output overflows
//   ctx64k.safetensors     the task model at context 65536, its position table to match: eval's key/value
//                          cache was sized by the context (2 GB of zeros for 3-digit inputs)
//   textctx.safetensors    the text model at context 131072: 32 windows of it would need 17 GB
// tests/cli/trust.sh then checks each is rejected fast within 1 GB.
#include <cmath>
#include <cstdio>
#include <string>

#include "io/metadata.h"
#include "nn/checkpoint.h"

using namespace qkv;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: hostile_files SOURCE TEXT_SOURCE DIR\n");
    return 2;
  }
  try {
    const std::string dir = argv[3];
    io::TensorFile source = io::load_safetensors(argv[1]), text = io::load_safetensors(argv[2]);
    auto with = [&](const char* name, const char* field, const char* section, const std::string& value) {
      auto meta = source.metadata;
      auto object = io::parse_json_object(meta.at(section));
      object[field] = value;
      meta[section] = io::json_object(object);
      io::save_safetensors(dir + "/" + name, source.tensors, meta);
    };
    with("layers1e8.safetensors", "layers", "qkv.config", "100000000");
    with("layersmax.safetensors", "layers", "qkv.config", "9223372036854775807");
    with("width1m.safetensors", "width", "qkv.config", "1048576");
    with("context1m.safetensors", "context", "qkv.config", "1000000");
    // Newlines and terminal escapes in a string the error message quotes.
    with("evil.safetensors", "name", "qkv.task", "rev\nqkv: all ok\x1b[2J");
    with("seed20.safetensors", "seed", "qkv.train", "99999999999999999999");
    with("evilkey.safetensors", "evil\nqkv: all ok\x1b[2J", "qkv.train", "1");
    {
      io::NamedTensors poisoned = source.tensors;
      for (auto& [name, t] : poisoned)
        if (name == "optimizer.tok_emb.weight.exp_avg_sq") {
          t = t.clone();
          t.data<float>()[0] = -1;
        }
      io::save_safetensors(dir + "/moment.safetensors", poisoned, source.metadata);
    }
    {
      io::NamedTensors huge;
      for (const auto& [name, t] : source.tensors)
        huge.emplace_back(name, name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0
                                    ? Tensor::full(t.shape(), 3e38, t.dtype())
                                    : t);
      io::save_safetensors(dir + "/huge.safetensors", huge, source.metadata);
    }
    for (float bad : {NAN, INFINITY}) {
      io::NamedTensors broken = source.tensors;
      for (auto& [name, t] : broken)
        if (name == "blocks.0.attn.q_proj.weight") {
          t = t.clone();
          t.data<float>()[3] = bad;
        }
      io::save_safetensors(dir + (std::isnan(bad) ? "/nan.safetensors" : "/inf.safetensors"), broken, source.metadata);
    }
    // A model whose context is the file's say-so, every tensor consistent with it.
    auto at_context = [&](const io::TensorFile& model, const std::string& name, int64_t context) {
      io::NamedTensors tensors;
      for (const auto& [n, t] : model.tensors)
        if (n == "pos_emb.weight")
          tensors.emplace_back(n, Tensor::zeros({context, t.size(1)}));
        else if (n.rfind("optimizer.", 0) != 0)
          tensors.emplace_back(n, t);
      auto meta = model.metadata;
      auto config = io::parse_json_object(meta.at("qkv.config"));
      config["context"] = std::to_string(context);
      meta["qkv.config"] = io::json_object(config);
      io::save_safetensors(dir + "/" + name, tensors, meta);
    };
    at_context(source, "ctx64k.safetensors", 65536);
    at_context(text, "textctx.safetensors", 131072);
    source = text;
    with("devzero.safetensors", "data", "qkv.task", "/dev/zero");
    io::NamedTensors many;
    for (int i = 0; i < 160000; ++i) many.emplace_back("tensor." + std::to_string(i), Tensor::zeros({1}));
    io::save_safetensors(dir + "/keys160k.safetensors", many, source.metadata);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hostile_files: %s\n", e.what());
    return 1;
  }
}
