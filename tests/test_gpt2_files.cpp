// GPT-2's own files (nn/gpt2_files.h): the fixture folder tests/fixtures/gpt2
// (a tiny random GPT-2 over the real vocabulary, written by
// tests/fixtures/make_gpt2_fixture.py with PyTorch's numbers for it) read as
// it is, in both naming styles and three dtypes, written back, and refused
// in one line when it lies.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "autograd/engine.h"
#include "autograd/ops/shape.h"
#include "compare.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/gpt2_files.h"
#include "nn/loss.h"

using namespace qkv;
using namespace qkv::nn;
using Catch::Matchers::Contains;

namespace {

namespace fs = std::filesystem;
const std::string kFolder = std::string(QKV_FIXTURE_DIR) + "/gpt2";

fs::path gpt2_scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "qkv-test-gpt2" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// The fixture's tensors as the hub names them, in float32.
io::NamedTensors fixture_tensors() { return io::load_safetensors(kFolder + "/model.safetensors").tensors; }

uint16_t to_half_bits(float f) {  // exact for the fixture's values (bfloat16 values in float16's normal range, or 0)
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t sign = (b >> 16) & 0x8000, exponent = (b >> 23) & 0xff, mantissa = b & 0x7fffff;
  if (exponent == 0) return static_cast<uint16_t>(sign);
  if (exponent < 113 || exponent > 142 || (mantissa & 0x1fff) != 0) FAIL("not a float16: " << f);
  return static_cast<uint16_t>(sign | ((exponent - 112) << 10) | (mantissa >> 13));
}

// A safetensors file of float32 tensors stored as `dtype` (F32, F16 or BF16), written byte by byte.
void write_as(const fs::path& path, const io::NamedTensors& tensors, const std::string& dtype) {
  nlohmann::ordered_json header;
  std::string data;
  for (const auto& [name, t] : tensors) {
    const Tensor f = t.to(DType::Float32);
    const float* v = static_cast<const float*>(f.raw_data());
    const size_t begin = data.size();
    for (int64_t i = 0; i < f.numel(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &v[i], 4);
      if (dtype == "F32")
        data.append(reinterpret_cast<const char*>(&bits), 4);
      else {
        const uint16_t h = dtype == "BF16" ? static_cast<uint16_t>(bits >> 16) : to_half_bits(v[i]);
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header[name] = {{"dtype", dtype}, {"shape", f.shape()}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string text = header.dump();
  const uint64_t length = text.size();
  write_text(path, std::string(reinterpret_cast<const char*>(&length), 8) + text + data);
}

// A copy of the fixture folder (config.json and model.safetensors) whose weights are `tensors` stored as `dtype`.
fs::path folder_with(const std::string& name, const io::NamedTensors& tensors, const std::string& dtype = "F32") {
  const fs::path dir = gpt2_scratch(name);
  fs::copy_file(kFolder + "/config.json", dir / "config.json");
  write_as(dir / "model.safetensors", tensors, dtype);
  return dir;
}

// Every parameter equal, bit for bit.
void require_same(const Module& a, const Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    REQUIRE(pa[i].first == pb[i].first);
    REQUIRE(pa[i].second.shape() == pb[i].second.shape());
    CHECK(pa[i].second.to_vector() == pb[i].second.to_vector());
  }
}

// |a - b| over all elements against the largest |b|: the relative error of a tensor (QKV_FIXTURE_REPORT prints it).
double fixture_error(const Tensor& a, const Tensor& b, const std::string& what = "") {
  double scale = 0;
  for (double v : b.to_vector()) scale = std::max(scale, std::fabs(v));
  const double error = testing::worst_difference(a, b) / std::max(scale, 1e-300);
  if (std::getenv("QKV_FIXTURE_REPORT") && !what.empty())
    std::printf("gpt2 %s %s %.3g\n", dtype_name(a.dtype()), what.c_str(), error);
  return error;
}

// log Σ exp of each row of a [rows, n] tensor, in double: every logit of a position, through its normalizer.
Tensor logsumexp_rows(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  const int64_t rows = t.size(0), n = t.size(1);
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    const double top = *std::max_element(v.begin() + r * n, v.begin() + (r + 1) * n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(v[r * n + i] - top);
    out.push_back(top + std::log(sum));
  }
  return Tensor::from_vector(out, {rows});
}

}  // namespace

TEST_CASE("a GPT-2 folder loads with PyTorch's logits, loss, gradients and greedy continuation", "[gpt2][fixtures]") {
  const GPTConfig config = read_gpt2_config(kFolder);
  CHECK(
      (config.vocab == 50257 && config.context == 16 && config.width == 8 && config.heads == 2 && config.layers == 2));
  const io::TensorFile expected = io::load_safetensors(kFolder + "/pytorch_expected.safetensors");
  const Tensor ids = expected.get("ids");
  const int64_t T = ids.size(1);
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tolerance = dtype == DType::Float64 ? 1e-10 : 1e-5;
    INFO((dtype == DType::Float64 ? "float64" : "float32"));
    std::unique_ptr<GPT> model = load_gpt2(kFolder, config);
    model->to(dtype);  // the fixture's weights are float32 values: the same model in float64
    Tensor logits = model->forward(ids);
    Tensor loss = cross_entropy(slice(logits, 1, 0, T - 1), slice(ids, 1, 1, T));
    CHECK(fixture_error(reshape(loss, {1}), expected.get("loss"), "loss") < tolerance);
    const Tensor rows = reshape(logits, {T, config.vocab});
    CHECK(fixture_error(slice(rows, 1, 0, 256), expected.get("logits_first_256"), "logits[:, :256]") < tolerance);
    CHECK(fixture_error(reshape(slice(rows, 0, T - 1, T), {config.vocab}), expected.get("logits_last")) < tolerance);
    CHECK(fixture_error(logsumexp_rows(rows), expected.get("logsumexp"), "logsumexp") < tolerance);
    loss.backward();
    // Every gradient, under the file's own names and in its layout.
    const io::NamedTensors grads = gpt2_tensors(*model, [](const std::string&, const Tensor& p) { return p.grad(); });
    REQUIRE(grads.size() == 2 + 12 * 2 + 2);
    for (const auto& [name, g] : grads) {
      INFO(name);
      REQUIRE(g.shape() == expected.get("grad." + name).shape());
      CHECK(fixture_error(g, expected.get("grad." + name), "grad " + name) < tolerance);
    }
  }
  // Greedy continuation, with the key/value cache and without: the same tokens as PyTorch's.
  std::unique_ptr<GPT> model = load_gpt2(kFolder, config);
  NoGradGuard no_grad;
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < 8; ++i) prompt.push_back(static_cast<int64_t>(ids.to_vector()[i]));
  std::vector<int64_t> plain = prompt, cached = prompt;
  KVCache cache = model->make_cache(1);
  Tensor next_logits = model->forward_cached(Tensor::from_vector(prompt, {1, 8}), cache);
  auto argmax_last = [&](const Tensor& logits) {
    const std::vector<double> v = logits.to_vector();
    const size_t start = v.size() - static_cast<size_t>(config.vocab);
    return static_cast<int64_t>(std::max_element(v.begin() + start, v.end()) - (v.begin() + start));
  };
  for (int step = 0; step < 8; ++step) {
    plain.push_back(argmax_last(model->forward(Tensor::from_vector(plain, {1, static_cast<int64_t>(plain.size())}))));
    cached.push_back(argmax_last(next_logits));
    next_logits = model->forward_cached(Tensor::from_vector(std::vector<int64_t>{cached.back()}, {1, 1}), cache);
  }
  std::vector<int64_t> want;
  for (double v : expected.get("greedy").to_vector()) want.push_back(static_cast<int64_t>(v));
  CHECK(std::vector<int64_t>(plain.begin() + 8, plain.end()) == want);
  CHECK(std::vector<int64_t>(cached.begin() + 8, cached.end()) == want);
}

TEST_CASE("GPT-2's two naming styles and three dtypes load the same model", "[gpt2]") {
  const GPTConfig config = read_gpt2_config(kFolder);
  std::unique_ptr<GPT> hub = load_gpt2(kFolder, config);
  // GPT2LMHeadModel.state_dict()'s names: "transformer." and the tied lm_head.weight.
  io::NamedTensors state_dict = gpt2_tensors(
      *hub, [](const std::string&, const Tensor& p) { return p; }, /*bare=*/false);
  state_dict.emplace_back("lm_head.weight", hub->tok_emb->weight);
  require_same(*hub, *load_gpt2(folder_with("state_dict", state_dict).string(), config));
  for (const char* dtype : {"F16", "BF16"}) {
    INFO(dtype);
    require_same(*hub, *load_gpt2(folder_with(dtype, fixture_tensors(), dtype).string(), config));
  }
}

TEST_CASE("a GPT written as a Hugging Face folder reads back identical", "[gpt2]") {
  const GPTConfig config = read_gpt2_config(kFolder);
  std::unique_ptr<GPT> model = load_gpt2(kFolder, config);
  const fs::path dir = gpt2_scratch("export");
  save_gpt2(dir.string(), *model);
  const GPTConfig back = read_gpt2_config(dir.string());
  CHECK((back.vocab == config.vocab && back.context == config.context && back.width == config.width &&
         back.heads == config.heads && back.layers == config.layers));
  require_same(*model, *load_gpt2(dir.string(), back));
  // The file holds GPT2LMHeadModel's names, the metadata transformers asks for, and no lm_head (tied).
  std::map<std::string, std::string> metadata;
  const std::vector<io::TensorEntry> entries =
      io::read_safetensors_header((dir / "model.safetensors").string(), &metadata);
  CHECK(metadata["format"] == "pt");
  CHECK(entries.size() == 2 + 12 * 2 + 2);
  for (const io::TensorEntry& e : entries) CHECK(e.name.rfind("transformer.", 0) == 0);
}

TEST_CASE("a hostile GPT-2 folder is refused in one line naming the file and the tensor", "[gpt2][errors]") {
  const GPTConfig config = read_gpt2_config(kFolder);
  auto expect = [&](const fs::path& dir, const std::vector<std::string>& words) {
    try {
      load_gpt2(dir.string(), read_gpt2_config(dir.string()));
      FAIL("loaded " << dir);
    } catch (const Error& e) {
      const std::string message = e.what();
      INFO(message);
      CHECK(message.find('\n') == std::string::npos);
      for (const std::string& w : words) CHECK_THAT(message, Contains(w));
    }
  };
  const io::NamedTensors good = fixture_tensors();
  auto without = [&](const std::string& name) {
    io::NamedTensors t;
    for (const auto& [n, v] : good)
      if (n != name) t.emplace_back(n, v);
    return t;
  };
  auto replaced = [&](const std::string& name, const Tensor& value) {
    io::NamedTensors t = good;
    for (auto& [n, v] : t)
      if (n == name) v = value;
    return t;
  };
  expect(folder_with("missing", without("h.1.mlp.c_fc.bias")), {"model.safetensors", "no tensor 'h.1.mlp.c_fc.bias'"});
  expect(folder_with("shape", replaced("h.0.attn.c_attn.weight", Tensor::zeros({24, 8}))),
         {"model.safetensors", "h.0.attn.c_attn.weight", "[24, 8]", "[8, 24]"});
  Tensor nan = Tensor::zeros({8});
  static_cast<float*>(nan.raw_data())[3] = NAN;
  expect(folder_with("nan", replaced("h.1.ln_2.bias", nan)), {"model.safetensors", "h.1.ln_2.bias", "nan"});
  io::NamedTensors extra = good;
  extra.emplace_back("h.2.ln_1.weight", Tensor::ones({8}));
  expect(folder_with("extra", extra), {"model.safetensors", "h.2.ln_1.weight", "not GPT-2's"});
  io::NamedTensors mixed = good;
  mixed.emplace_back("transformer.ln_f.weight", Tensor::ones({8}));
  expect(folder_with("mixed", mixed), {"model.safetensors", "transformer.ln_f.weight", "mixes"});
  io::NamedTensors untied = good;
  untied.emplace_back("lm_head.weight", Tensor::zeros({50257, 8}));
  expect(folder_with("untied", untied), {"model.safetensors", "lm_head.weight differs"});

  // The config: each field qkv cannot compute, a size out of bounds, one that disagrees with the tensors.
  const nlohmann::json base = nlohmann::json::parse(std::ifstream(kFolder + "/config.json"));
  auto config_case = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                         const std::vector<std::string>& words) {
    const fs::path dir = folder_with(name, good);
    nlohmann::json c = base;
    edit(c);
    write_text(dir / "config.json", c.dump());
    expect(dir, words);
  };
  config_case("activation", [](auto& c) { c["activation_function"] = "relu"; }, {"config.json", "activation_function"});
  config_case("inner", [](auto& c) { c["n_inner"] = 16; }, {"config.json", "n_inner"});
  config_case("type", [](auto& c) { c["model_type"] = "bert"; }, {"config.json", "model_type"});
  config_case("eps", [](auto& c) { c["layer_norm_epsilon"] = 1e-6; }, {"config.json", "layer_norm_epsilon"});
  config_case("layer_scale", [](auto& c) { c["scale_attn_by_inverse_layer_idx"] = true; },
              {"config.json", "scale_attn_by_inverse_layer_idx"});
  config_case("huge", [](auto& c) { c["n_layer"] = 1000000000; }, {"config.json", "n_layer", "1000000000"});
  config_case("no_width", [](auto& c) { c.erase("n_embd"); }, {"config.json", "no n_embd"});
  config_case("heads", [](auto& c) { c["n_head"] = 3; }, {"config.json", "not divisible"});
  config_case("disagrees", [](auto& c) { c["n_embd"] = 16; }, {"model.safetensors", "wte.weight", "[50257, 16]"});
  config_case("layers", [](auto& c) { c["n_layer"] = 3; }, {"model.safetensors", "no tensor 'h.2."});
  {
    const fs::path dir = folder_with("not_json", good);
    write_text(dir / "config.json", "{\"n_embd\": 8,");
    expect(dir, {"config.json", "JSON"});
  }
  {  // A lying offset: the file's own checks, naming it.
    const fs::path dir = folder_with("offset", good);
    std::string bytes;
    {
      std::ifstream in(dir / "model.safetensors", std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const size_t at = bytes.find("\"data_offsets\":[0,");
    REQUIRE(at != std::string::npos);
    bytes[at + 17] = '8';  // [8, ...: a gap at the start, an overlap after
    write_text(dir / "model.safetensors", bytes);
    expect(dir, {"model.safetensors"});
  }
  {  // A pickle alone: refused, saying why and what to fetch.
    const fs::path dir = gpt2_scratch("pickle");
    fs::copy_file(kFolder + "/config.json", dir / "config.json");
    write_text(dir / "pytorch_model.bin", "PK\x03\x04");
    expect(dir, {"pytorch_model.bin", "pickle", "model.safetensors"});
  }
  {  // Weights that are a link out of the folder.
    const fs::path dir = gpt2_scratch("link"), outside = folder_with("outside", good);
    fs::copy_file(kFolder + "/config.json", dir / "config.json");
    fs::create_symlink(outside / "model.safetensors", dir / "model.safetensors");
    expect(dir, {"model.safetensors", "link out of the folder"});
  }
  CHECK_THROWS_WITH(read_gpt2_config(gpt2_scratch("empty").string()),
                    Contains("config.json") && Contains("is a folder, not a checkpoint file"));
  CHECK_THROWS_WITH(read_gpt2_config((gpt2_scratch("file") / "x").string()), Contains("not a folder"));
  (void)config;
}

namespace {

// An llm.c checkpoint of `model` as train_gpt2.py writes one: the header, then every parameter in llm.c's order
// ([out, in], c_attn's rows the query's, key's and value's), wte padded with zero rows to `padded` rows; version 3
// writes float32, 5 bfloat16 (the fixture's values are bfloat16 values: nothing is rounded).
void write_llmc(const fs::path& path, const GPT& model, int version, int64_t padded) {
  const GPTConfig& c = model.config();
  int32_t header[256] = {20240326,
                         version,
                         static_cast<int32_t>(c.context),
                         static_cast<int32_t>(c.vocab),
                         static_cast<int32_t>(c.layers),
                         static_cast<int32_t>(c.heads),
                         static_cast<int32_t>(c.width),
                         static_cast<int32_t>(padded)};
  std::string bytes(reinterpret_cast<const char*>(header), sizeof header);
  std::map<std::string, Tensor> p;
  for (auto& [name, t] : model.named_parameters()) p[name] = t;
  auto put = [&](const Tensor& t) {
    for (double v : t.to_vector()) {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if (version == 3)
        bytes.append(reinterpret_cast<const char*>(&bits), 4);
      else
        bytes.append(reinterpret_cast<const char*>(&bits) + 2, 2);  // bfloat16: the top half
    }
  };
  put(p["tok_emb.weight"]);
  put(Tensor::zeros({padded - c.vocab, c.width}));
  put(p["pos_emb.weight"]);
  auto each = [&](const std::vector<std::string>& names) {
    for (int64_t i = 0; i < c.layers; ++i)
      for (const std::string& n : names) put(p[cat("blocks.", i, ".", n)]);
  };
  for (const auto& names :
       std::vector<std::vector<std::string>>{{"ln1.weight"},
                                             {"ln1.bias"},
                                             {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight"},
                                             {"attn.q_proj.bias", "attn.k_proj.bias", "attn.v_proj.bias"},
                                             {"attn.out_proj.weight"},
                                             {"attn.out_proj.bias"},
                                             {"ln2.weight"},
                                             {"ln2.bias"},
                                             {"mlp.fc1.weight"},
                                             {"mlp.fc1.bias"},
                                             {"mlp.fc2.weight"},
                                             {"mlp.fc2.bias"}})
    each(names);
  put(p["ln_f.weight"]);
  put(p["ln_f.bias"]);
  write_text(path, bytes);
}

}  // namespace

TEST_CASE("an llm.c float32 checkpoint's parameters are its mapped pages, and training writes never reach the file",
          "[gpt2]") {
  // Width 16: every parameter starts at a multiple of 64 bytes, so each is a stretch of the mapped file.
  GPTConfig c;
  c.vocab = 50, c.context = 8, c.width = 16, c.heads = 2, c.layers = 2;
  Generator gen(3);
  GPT model(c, &gen);
  const fs::path file = gpt2_scratch("llmc_mapped") / "gpt2_v3.bin";
  write_llmc(file, model, 3, 64);
  auto read_all = [&] {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string original = read_all();
  std::unique_ptr<GPT> mapped = load_llmc(file.string());
  require_same(model, *mapped);
  for (const auto& [name, p] : mapped->named_parameters()) {
    INFO(name);
    CHECK(p.impl_ptr()->storage->owner != nullptr);  // the file's pages, not a copy
  }
  for (const Tensor& p : mapped->parameters()) p.set(std::vector<int64_t>(p.dim(), 0), 7.0);  // copy-on-write
  CHECK(mapped->tok_emb->weight.to_vector()[0] == 7.0);
  CHECK(read_all() == original);
}

TEST_CASE("a mapped file cut short while in use is a one-line error naming it, not a crash", "[gpt2]") {
  const fs::path file = gpt2_scratch("llmc_cut") / "weights.bin";
  write_text(file, std::string(3 * 4096, 'x'));
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // no threads here: the file is mapped, cut to one page, and its last page read
    ::dup2(out[1], 2);
    const io::FileReader reader(file.string(), "checkpoint");
    const std::shared_ptr<char> mapped = reader.map();
    if (!mapped || ::truncate(file.c_str(), 4096) != 0) ::_exit(2);
    volatile char c = mapped.get()[2 * 4096];
    (void)c;
    ::_exit(3);  // not reached: SIGBUS
  }
  ::close(out[1]);
  std::string said;
  char buffer[512];
  for (ssize_t got; (got = ::read(out[0], buffer, sizeof buffer)) > 0;) said.append(buffer, static_cast<size_t>(got));
  ::close(out[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  INFO(said);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(said, Contains("qkv: error: ") && Contains("weights.bin: the file was cut short while qkv read it"));
  CHECK(std::count(said.begin(), said.end(), '\n') == 1);
}

TEST_CASE("llm.c's GPT-2 checkpoints (float32 and bfloat16, padded vocabulary) load the same model", "[gpt2]") {
  std::unique_ptr<GPT> hub = load_gpt2(kFolder, read_gpt2_config(kFolder));
  const fs::path dir = gpt2_scratch("llmc");
  for (int version : {3, 5}) {
    INFO("version " << version);
    const fs::path file = dir / cat("gpt2_v", version, ".bin");
    write_llmc(file, *hub, version, 50304);
    REQUIRE(is_llmc_checkpoint(file.string()));
    require_same(*hub, *load_llmc(file.string()));
  }
  // Hostile headers and sizes: one line each, naming the file.
  const fs::path good = dir / "gpt2_v3.bin";
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto expect = [&](const std::string& name, const std::string& contents, const std::string& words) {
    write_text(dir / name, contents);
    try {
      load_llmc((dir / name).string());
      FAIL("loaded " << name);
    } catch (const Error& e) {
      const std::string message = e.what();
      INFO(message);
      CHECK(message.find('\n') == std::string::npos);
      CHECK_THAT(message, Contains(name) && Contains(words));
    }
  };
  auto with_int = [&](int at, int32_t value) {
    std::string b = bytes;
    std::memcpy(b.data() + 4 * at, &value, 4);
    return b;
  };
  expect("version.bin", with_int(1, 2), "version 2");
  expect("layers.bin", with_int(4, 3), "describes");
  expect("huge.bin", with_int(6, 1 << 30), "channels");
  expect("padding.bin", with_int(7, 100), "padded_vocab_size 100 is under vocab_size 50257");
  expect("short.bin", bytes.substr(0, 2000), "describes");
  expect("tiny.bin", bytes.substr(0, 100), "header");
  std::string nan = bytes;
  const float not_a_number = NAN;
  std::memcpy(nan.data() + nan.size() - 4, &not_a_number, 4);  // the last of ln_f.bias
  expect("nan.bin", nan, "ln_f.bias");
}
