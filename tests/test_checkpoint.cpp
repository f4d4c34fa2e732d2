// safetensors checkpoints: bit-exact round trips, validation of corrupt
// files (crafted and randomized), crash safety, and bit-identical resumption.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "io/metadata.h"
#include "io/strict_json.h"
#include "tiny_training.h"

using namespace qkv;
using namespace qkv::nn;
using namespace qkv::io;
using Catch::Matchers::Contains;

namespace {
std::string scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "qkv-test-checkpoint";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header text and data bytes.
std::string raw_file(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.numel() * element_size(a.dtype())) == 0;
}
}  // namespace

TEST_CASE("save and load round-trip every tensor bit-exactly", "[checkpoint]") {
  Tensor f32 = Tensor::randn({3, 4});
  f32.set({0, 0}, std::numeric_limits<double>::infinity());
  f32.set({0, 1}, -0.0);
  f32.set({0, 2}, std::nan(""));
  Tensor f64 = Tensor::randn({2, 2, 2}, DType::Float64);
  Tensor i64 = Tensor::from_vector<int64_t>({-5, 0, 1LL << 40});
  Tensor mask = Tensor::from_vector(std::vector<bool>{true, false, true});
  Tensor scalar = Tensor::scalar(3.25, DType::Float64);
  Tensor empty = Tensor::zeros({0, 5});
  NamedTensors all{{"f32", f32},   {"nested.f64", f64}, {"i64", i64},
                   {"mask", mask}, {"scalar", scalar},  {"empty", empty}};
  std::string path = scratch("roundtrip.safetensors");
  save_safetensors(path, all, {{"note", "héllo \"quoted\"\n"}, {"width", "128"}});
  TensorFile file = load_safetensors(path);
  REQUIRE(file.tensors.size() == all.size());
  for (const auto& [name, t] : all) {
    INFO(name);
    CHECK(same_bytes(file.get(name), t));
  }
  CHECK(file.metadata.at("note") == "héllo \"quoted\"\n");
  CHECK(file.metadata.at("width") == "128");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
  // The header is padded so the data starts 8-byte aligned.
  uint64_t n;
  std::memcpy(&n, read_file(path).data(), 8);
  CHECK(n % 8 == 0);
}

TEST_CASE("load_safetensors can leave out tensors by prefix, still checking their header entries", "[checkpoint]") {
  const std::string path = scratch("skip.safetensors");
  save_safetensors(path, {{"w", Tensor::ones({2, 3})}, {"optimizer.w.exp_avg", Tensor::zeros({2, 3})}}, {});
  TensorFile file = load_safetensors(path, {"optimizer."});
  REQUIRE(file.tensors.size() == 1);
  CHECK(same_bytes(file.get("w"), Tensor::ones({2, 3})));
  CHECK_FALSE(file.get("optimizer.w.exp_avg").defined());
  // A skipped entry whose offsets lie is refused all the same.
  std::string bytes = read_file(path);
  const size_t at = bytes.find("\"data_offsets\":[0,24]");
  REQUIRE(at != std::string::npos);
  bytes.replace(at, 22, "\"data_offsets\":[0,20]");
  std::ofstream(path, std::ios::binary) << bytes;
  CHECK_THROWS_AS(load_safetensors(path, {"optimizer."}), Error);
}

TEST_CASE("JSON parsing is strict and never crashes", "[checkpoint][json]") {
  using io::detail::parse_strict_json;
  nlohmann::json j = parse_strict_json(R"( {"a": [1, -2, 3.5e1, true, null], "b": "x\u00e9\ud83d\ude00\n"} )");
  CHECK(j["a"][1].get<int64_t>() == -2);
  CHECK(j["a"][2].get<double>() == 35);
  CHECK(j["b"].get<std::string>() == "x\xc3\xa9\xf0\x9f\x98\x80\n");
  for (const char* bad : {"{", "{\"a\":1,}", "[1 2]", "{\"a\":1,\"a\":2}", "\"\x01\"", "01x", "-", "\"\\ud800\"", "nul",
                          "{\"a\" 1}", "[1]]", "\"\\q\"", "\"\xff\"", "{\"a\":{\"b\":1,\"b\":2}}"})
    CHECK_THROWS_AS(parse_strict_json(bad), Error);
  CHECK_THROWS_WITH(parse_strict_json("{\"a\":1,\"a\":2}"), Contains("repeated key \"a\""));
  // The same key in different objects is fine.
  CHECK(parse_strict_json(R"({"a":{"k":1},"b":{"k":2}})")["b"]["k"] == 2);
  CHECK_THROWS_WITH(parse_strict_json(std::string(100, '[') + std::string(100, ']')), Contains("deeper than 64"));
  // 10,000 open brackets: refused at depth 65, no recursion to overflow.
  CHECK_THROWS_WITH(parse_strict_json(std::string(10000, '[')), Contains("deeper than 64"));
  CHECK(parse_json_object(json_object({{"k", "v\"\\"}})).at("k") == "v\"\\");
  CHECK_THROWS_WITH(parse_json_object(R"({"k":1})"), Contains("not a string"));
  CHECK_THROWS_WITH(json_object({{"k", "\xff"}}), Contains("UTF-8"));
  // Numbers read back exactly, subnormals included (--dropout 1e-320 used to write a checkpoint qkv could not read).
  for (double v : {0.2, 1e-320, 1.0 / 3, 5e-324}) CHECK(parse_number(exact_number(v), "x") == v);
  CHECK_THROWS_WITH(parse_number("0.2x", "dropout"), Contains("dropout: '0.2x' is not a finite number"));
  CHECK_THROWS_AS(parse_number("nan", "x"), Error);
  CHECK_THROWS_AS(parse_number("1e999", "x"), Error);
  int64_t n = 0;
  CHECK((parse_integer("-12", n) && n == -12));
  for (const char* bad : {" 2", "+2", "2 ", "", "0x10", "99999999999999999999"}) CHECK_FALSE(parse_integer(bad, n));
  // A JSON-lines log row: its numbers, strictly parsed.
  CHECK(parse_json_numbers(R"({"step":3,"loss":1.5,"eval":null,"name":"x"})") ==
        std::map<std::string, double>{{"loss", 1.5}, {"step", 3}});
  CHECK_THROWS_WITH(parse_json_numbers(R"({"step":1,"step":2})"), Contains("repeated key"));
  CHECK_THROWS_WITH(parse_json_numbers("[1]"), Contains("expected an object"));
}

TEST_CASE("printable escapes what could forge lines or reach the terminal", "[checkpoint][errors]") {
  CHECK(printable("plain text, héllo ✓") == "plain text, héllo ✓");
  CHECK(printable("a\nfake line") == "a\\nfake line");
  CHECK(printable("\x1b[31mred") == "\\x1b[31mred");
  CHECK(printable(std::string("nul\0byte", 8)) == "nul\\x00byte");
  CHECK(printable("\xff\xc3") == "\\xff\\xc3");           // not UTF-8
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a surrogate
  CHECK(printable(std::string(300, 'x')).size() < 230);
}

TEST_CASE("corrupt files are rejected with a clear error", "[checkpoint][errors]") {
  std::string path = scratch("corrupt.safetensors");
  std::string good_data(16, '\0');
  auto expect = [&](const std::string& bytes, const std::string& message) {
    write_file(path, bytes);
    INFO(message);
    CHECK_THROWS_WITH(load_safetensors(path), Contains(path) && Contains(message));
  };
  const std::string tensor = R"("t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  write_file(path, raw_file("{" + tensor + "}", good_data));
  CHECK(load_safetensors(path).get("t").shape() == Shape{2, 2});  // the baseline loads

  expect("abc", "truncated: 3 bytes");
  expect(raw_file("{" + tensor + "}", good_data).substr(0, 30), "runs past the end of the file");
  expect(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "header length");
  expect(raw_file("{" + tensor, good_data), "bad header: JSON");
  expect(raw_file("[1]", ""), "not a JSON object");
  expect(raw_file("{" + tensor + "}", good_data.substr(0, 8)), "run past the data (8 bytes)");
  expect(raw_file(R"({"t":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", std::string(2, '\0')),
         "unsupported dtype F8_E4M3");
  expect(raw_file(R"({"t":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
         "holds 8 bytes but F16 [3] needs 6");
  expect(raw_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", good_data),
         "holds 16 bytes but F32 [3] needs 12");
  expect(raw_file(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", good_data), "bad size in its shape");
  expect(raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", good_data), "bad data_offsets");
  expect(raw_file(R"({"t":{"dtype":"F32","shape":[2]}})", good_data), "lacks dtype, shape or data_offsets");
  expect(
      raw_file(
          R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
          good_data),
      "overlaps");
  expect(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", good_data), "belong to no tensor");
  expect(raw_file(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x07", 2)),
         "not 0 or 1");
  expect(raw_file(R"({"__metadata__":{"k":1}})", ""), "is not a string");
  CHECK_THROWS_WITH(load_safetensors(scratch("no-such-file")), Contains("cannot open"));
}

TEST_CASE("float16 and bfloat16 tensors are read into float32 exactly", "[checkpoint]") {
  // Every 16-bit pattern of each format against its value computed another way: from its fields, in double.
  std::string halves, bfloats;
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    halves += std::string{static_cast<char>(bits & 0xff), static_cast<char>(bits >> 8)};
    bfloats += std::string{static_cast<char>(bits & 0xff), static_cast<char>(bits >> 8)};
  }
  std::string path = scratch("halves.safetensors");
  write_file(path, raw_file(R"({"h":{"dtype":"F16","shape":[65536],"data_offsets":[0,131072]},)"
                            R"("b":{"dtype":"BF16","shape":[256,256],"data_offsets":[131072,262144]}})",
                            halves + bfloats));
  TensorFile file = load_safetensors(path);
  Tensor h = file.get("h"), b = file.get("b");
  REQUIRE(h.dtype() == DType::Float32);
  REQUIRE(b.shape() == Shape{256, 256});
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const int sign = bits >> 15 ? -1 : 1, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
    const float got = h.data<float>()[bits];
    if (exponent == 0x1f) {
      if (mantissa ? !std::isnan(got) : got != sign * INFINITY) FAIL("F16 bits " << bits << ": " << got);
    } else {
      const double value = exponent ? sign * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15)
                                    : sign * std::ldexp(mantissa / 1024.0, -14);
      if (got != value || std::signbit(got) != (sign < 0)) FAIL("F16 bits " << bits << ": " << got << " != " << value);
    }
    uint32_t wide;
    const float bf = b.data<float>()[bits];
    std::memcpy(&wide, &bf, 4);
    if (wide != bits << 16) FAIL("BF16 bits " << bits);
  }
}

TEST_CASE("loading into a model checks names, shapes and dtypes", "[checkpoint][errors]") {
  Linear lin(3, 2);
  std::string path = scratch("linear.safetensors");
  save_module(path, lin);
  Linear other(3, 2);
  load_into(other, load_safetensors(path), path);
  CHECK(same_bytes(other.weight, lin.weight));

  save_safetensors(path, {{"weight", lin.weight}});
  CHECK_THROWS_WITH(load_into(other, load_safetensors(path), path), Contains("missing tensor 'bias'"));
  save_safetensors(path, {{"weight", lin.weight}, {"bias", lin.bias}, {"extra", lin.bias}});
  CHECK_THROWS_WITH(load_into(other, load_safetensors(path), path), Contains("unexpected tensor 'extra'"));
  save_safetensors(path, {{"weight", Tensor::zeros({3, 2})}, {"bias", lin.bias}});
  CHECK_THROWS_WITH(load_into(other, load_safetensors(path), path),
                    Contains("tensor 'weight' is float32 [3, 2] but the model expects float32 [2, 3]"));
  save_safetensors(path, {{"weight", lin.weight.to(DType::Float64)}, {"bias", lin.bias}});
  CHECK_THROWS_WITH(load_into(other, load_safetensors(path), path),
                    Contains("is float64 [2, 3] but the model expects float32"));
  // A diverged run's file: its own type, in the library's words (a program adds its advice).
  Tensor diverged = lin.weight.detach().clone();
  diverged.set({0, 1}, std::numeric_limits<double>::quiet_NaN());
  save_safetensors(path, {{"weight", diverged}, {"bias", lin.bias}});
  CHECK_THROWS_AS(load_into(other, load_safetensors(path), path), NonFiniteParameter);
  CHECK_THROWS_WITH(
      load_into(other, load_safetensors(path), path),
      Catch::Matchers::EndsWith("tensor 'weight' holds nan at element 1: the run that wrote it diverged"));
}

TEST_CASE("a crash between writing and renaming leaves the previous checkpoint whole", "[checkpoint]") {
  std::string path = scratch("crash.safetensors");
  Tensor v1 = Tensor::full({4}, 1.0), v2 = Tensor::full({1000}, 2.0);
  save_safetensors(path, {{"v", v1}});
  std::string before = read_file(path);
  io::detail::before_rename = [](const std::string&) { throw std::runtime_error("simulated crash"); };
  CHECK_THROWS_WITH(save_safetensors(path, {{"v", v2}}), Contains("simulated crash"));
  io::detail::before_rename = nullptr;
  CHECK(read_file(path) == before);
  CHECK(same_bytes(load_safetensors(path).get("v"), v1));
  save_safetensors(path, {{"v", v2}});  // and the next save goes through
  CHECK(same_bytes(load_safetensors(path).get("v"), v2));
}

TEST_CASE("a save that keeps what is there leaves a file that appeared meanwhile, and its own result beside it",
          "[checkpoint]") {
  namespace fs = std::filesystem;
  const std::string path = scratch("late.safetensors");
  for (const char* leftover : {"", ".unsaved", ".unsaved-2"}) fs::remove(path + leftover);
  const Tensor v = Tensor::full({4}, 3.0);
  // Another run's save (or a user's file) lands on the name while this one works.
  io::detail::before_rename = [&](const std::string&) { write_file(path, std::string("precious")); };
  CHECK_THROWS_WITH(save_safetensors(path, {{"v", v}}, {}, io::Existing::Keep),
                    Contains("late.safetensors appeared while this command worked and was not replaced: its result "
                             "is in ") &&
                        Contains("late.safetensors.unsaved"));
  CHECK(read_file(path) == "precious");
  CHECK(same_bytes(load_safetensors(path + ".unsaved").get("v"), v));
  CHECK_THROWS_WITH(save_safetensors(path, {{"v", v}}, {}, io::Existing::Keep), Contains(".unsaved-2"));
  CHECK(read_file(path) == "precious");
  io::detail::before_rename = nullptr;
  // Asked to replace (--force), it does.
  save_safetensors(path, {{"v", v}}, {}, io::Existing::Replace);
  CHECK(same_bytes(load_safetensors(path).get("v"), v));
  // A page, and a folder of pictures, alike.
  const std::string page = scratch("late.html");
  fs::remove(page);
  fs::remove(page + ".unsaved");
  io::write_file(page, "mine");
  CHECK_THROWS_WITH(io::write_file(page, "theirs", io::Existing::Keep), Contains("late.html.unsaved"));
  CHECK(read_file(page) == "mine");
  CHECK(read_file(page + ".unsaved") == "theirs");
  const std::string maps = scratch("late_maps");
  fs::remove_all(maps);
  fs::remove_all(maps + ".unsaved");
  io::OutputFolder folder(maps, "--out", false, {".svg"});
  folder.write("a.svg", "<svg/>");
  fs::create_directories(maps);
  write_file(maps + "/notes.txt", std::string("a user's"));
  CHECK_THROWS_WITH(folder.commit(), Contains("late_maps.unsaved"));
  CHECK(read_file(maps + "/notes.txt") == "a user's");
  CHECK(read_file(maps + ".unsaved/a.svg") == "<svg/>");
}

TEST_CASE("training N steps, saving, loading and training M more equals training N+M", "[checkpoint][resume]") {
  std::string path = scratch("resume.safetensors");
  manual_seed(77);
  tiny::Run straight;
  straight.train_until(12);

  manual_seed(77);
  tiny::Run first;
  first.train_until(7);
  first.save(path);
  manual_seed(12345);  // whatever the generator holds now must not matter
  tiny::Run resumed;   // fresh model and optimizer, different initial weights
  CHECK_FALSE(tiny::same_parameters(resumed, first));
  resumed.load(path);
  CHECK(resumed.optimizer.steps() == 7);
  CHECK(tiny::same_parameters(resumed, first));
  resumed.train_until(12);
  CHECK(tiny::same_parameters(resumed, straight));

  nn::GPT model(tiny::config());
  optim::SGD sgd(model.named_parameters(), {0.1});
  CHECK_THROWS_WITH(optim::load_training_checkpoint(path, model, &sgd, {}),
                    Contains("trained with adamw, cannot resume with sgd"));
  save_safetensors(path, model.named_parameters());
  CHECK_THROWS_WITH(optim::load_training_checkpoint(path, model, nullptr, {}), Contains("not a qkv checkpoint"));
}

// A parameter that sat out a step counts fewer Adam updates; the file keeps the counts (only then) and a
// resumed run takes the step the first would have.
TEST_CASE("a training checkpoint keeps the update counts of parameters that sat out steps", "[checkpoint][resume]") {
  std::string path = scratch("lagging.safetensors");
  auto run = [](nn::Linear& lin, optim::AdamW& opt, bool with_bias) {
    opt.zero_grad();
    Tensor loss = sum(lin.weight * lin.weight);
    (with_bias ? loss + sum(lin.bias * 3.0) : loss).backward();
    opt.step();
  };
  manual_seed(5);
  nn::Linear lin(2, 1);
  optim::AdamW opt(lin.named_parameters(), {.lr = 0.1});
  run(lin, opt, false);  // the bias gets no gradient
  run(lin, opt, true);
  optim::save_training_checkpoint(path, lin, &opt, {});
  CHECK(io::load_safetensors(path).metadata.at("qkv.optimizer.updates") == R"({"bias":"1"})");

  manual_seed(6);
  nn::Linear copy(2, 1);
  optim::AdamW copy_opt(copy.named_parameters(), {.lr = 0.1});
  optim::load_training_checkpoint(path, copy, &copy_opt, {});
  CHECK(copy_opt.updates(1) == 1);
  run(lin, opt, true);
  run(copy, copy_opt, true);
  CHECK(same_bytes(copy.bias, lin.bias));
  CHECK(same_bytes(copy.weight, lin.weight));

  run(lin, opt, true);  // every parameter took the last step, but the bias is still one behind
  optim::save_training_checkpoint(path, lin, &opt, {});
  CHECK(io::load_safetensors(path).metadata.count("qkv.optimizer.updates") == 1);
  // Another file's counts handed back in the metadata are not this optimizer's: they are not written.
  optim::AdamW fresh(copy.named_parameters(), {.lr = 0.1});
  const std::string other = scratch("fresh.safetensors");
  optim::save_training_checkpoint(other, copy, &fresh, {}, io::load_safetensors(path).metadata);
  CHECK(io::load_safetensors(other).metadata.count("qkv.optimizer.updates") == 0);
  TensorFile file = io::load_safetensors(path);
  file.metadata["qkv.optimizer.updates"] = R"({"bias":"x"})";
  CHECK_THROWS_WITH(optim::load_training_checkpoint(std::move(file), path, copy, &copy_opt, {}),
                    Contains("bad qkv.optimizer.updates of 'bias': 'x'"));
}

TEST_CASE("randomly corrupted checkpoints load correctly or throw qkv::Error, never crash", "[checkpoint][fuzz]") {
  std::string path = scratch("fuzz-source.safetensors"), damaged = scratch("fuzz.safetensors");
  manual_seed(5);
  tiny::Run run;
  run.train_until(2);
  run.save(path);
  const std::string original = read_file(path);
  Generator gen(99);
  int loaded = 0, rejected = 0, multi_line = 0;
  constexpr int kTrials = 2000;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::string bytes = original;
    if (trial % 3 == 0) {
      bytes.resize(gen.below(bytes.size()));  // truncate anywhere
    } else {
      int flips = 1 + static_cast<int>(gen.below(8));
      // Mostly in the header, where a flip changes structure rather than a value.
      uint64_t header_end = 8 + *reinterpret_cast<const uint64_t*>(original.data());
      for (int f = 0; f < flips; ++f) {
        uint64_t at = gen.below(2) ? gen.below(header_end) : gen.below(bytes.size());
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << gen.below(8)));
      }
    }
    write_file(damaged, bytes);
    tiny::Run target;
    try {
      target.load(damaged);
      ++loaded;
    } catch (const Error& e) {
      ++rejected;
      multi_line += std::string(e.what()).find('\n') != std::string::npos;  // errors are one line
    }
  }
  INFO("loaded " << loaded << ", rejected " << rejected);
  CHECK(loaded + rejected == kTrials);
  CHECK(rejected > kTrials / 2);
  CHECK(multi_line == 0);
}
