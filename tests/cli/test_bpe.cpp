// GPT-2's byte-level BPE (cli/bpe.h) against tiktoken's ids for GPT-2's own
// vocabulary (tests/fixtures/gpt2/expected.json), round trips on any bytes,
// and hostile tokenizer folders.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "autograd/error.h"
#include "bpe.h"

using qkv::cli::BpeTokenizer;
using qkv::cli::train_bpe;

namespace {

const std::string kGpt2 = std::string(QKV_FIXTURE_DIR) + "/gpt2";

const BpeTokenizer& gpt2() {
  static const BpeTokenizer t = BpeTokenizer::load(kGpt2);
  return t;
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A fresh folder under the build's temporary space.
std::filesystem::path fresh_folder(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("qkv_bpe_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The error loading `dir` gives: one line, naming `names`.
std::string load_error(const std::filesystem::path& dir) {
  try {
    BpeTokenizer::load(dir.string());
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("bpe: GPT-2's ids for every fixture string are tiktoken's", "[bpe]") {
  const nlohmann::json cases = nlohmann::json::parse(read(kGpt2 + "/expected.json"))["cases"];
  REQUIRE(cases.size() >= 300);
  size_t same = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int64_t> want = c["ids"].get<std::vector<int64_t>>(), got = gpt2().encode(text);
    if (got == want)
      ++same;
    else
      UNSCOPED_INFO("differs: " << nlohmann::json(text).dump());
    CHECK(gpt2().decode(got) == text);
  }
  CHECK(same == cases.size());
  CHECK(gpt2().vocab_size() == 50257);
}

TEST_CASE("bpe: encode and decode are inverses on random bytes, invalid UTF-8 included", "[bpe]") {
  std::mt19937 gen(7);
  for (int k = 0; k < 2000; ++k) {
    std::string bytes(gen() % 64, '\0');
    for (char& c : bytes)
      c = static_cast<char>(k % 2 ? gen() % 256 : " a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xff\x80"[gen() % 14]);
    REQUIRE(gpt2().decode(gpt2().encode(bytes)) == bytes);
  }
}

TEST_CASE("bpe: <|endoftext|> is ordinary text unless asked for", "[bpe]") {
  const std::vector<int64_t> ordinary = gpt2().encode("a<|endoftext|>b");
  CHECK(ordinary.size() > 3);
  CHECK(std::find(ordinary.begin(), ordinary.end(), 50256) == ordinary.end());
  CHECK(gpt2().encode("a<|endoftext|>b", true) == std::vector<int64_t>{64, 50256, 65});
  CHECK(gpt2().decode({50256}) == "<|endoftext|>");
}

TEST_CASE("bpe: a tokenizer.json gives the same ids as vocab.json and merges.txt", "[bpe]") {
  nlohmann::json merges = nlohmann::json::array();
  const std::string text = read(kGpt2 + "/merges.txt");
  size_t n = 0;
  for (size_t at = text.find('\n') + 1; at < text.size(); at = text.find('\n', at) + 1) {
    const std::string line = text.substr(at, text.find('\n', at) - at);
    if (line.empty()) break;
    const size_t space = line.find(' ');
    // Both spellings Hugging Face writes: "a b", and ["a", "b"] (tokenizers 0.20 and later).
    merges.push_back(n++ % 2 ? nlohmann::json(line)
                             : nlohmann::json::array({line.substr(0, space), line.substr(space + 1)}));
  }
  nlohmann::json j{
      {"model", {{"type", "BPE"}, {"vocab", nlohmann::json::parse(read(kGpt2 + "/vocab.json"))}, {"merges", merges}}},
      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}}};
  const auto dir = fresh_folder("json");
  write(dir / "tokenizer.json", j.dump());
  const BpeTokenizer t = BpeTokenizer::load(dir.string());
  for (const char* s : {"Hello world, it's 2024!", "  whitespace\n\n runs", "日本語 😀 café", "a<|endoftext|>b"})
    CHECK(t.encode(s, true) == gpt2().encode(s, true));
  std::filesystem::remove_all(dir);
}

TEST_CASE("bpe: hostile folders give one-line errors naming the file", "[bpe]") {
  const std::string vocab = read(kGpt2 + "/vocab.json"), merges = read(kGpt2 + "/merges.txt");
  const auto dir = fresh_folder("hostile");
  auto expect = [&](const std::string& what, const std::string& names) {
    const std::string e = load_error(dir);
    INFO(what << ": " << e);
    CHECK(!e.empty());
    CHECK(e.find('\n') == std::string::npos);
    CHECK(e.find(names) != std::string::npos);
  };
  auto both = [&](const std::string& v, const std::string& m) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    write(dir / "vocab.json", v);
    write(dir / "merges.txt", m);
  };
  both(vocab, merges + "\nĠzzzzqq Ġxxqqq\n");
  expect("a merge naming unknown tokens", "merges.txt");
  both(vocab, merges + "\n\xc4\x41 b\n");
  expect("a merge whose bytes are not UTF-8", "merges.txt");
  both("{\"a\": 0}", "");
  expect("a vocabulary without the 256 bytes", "no token for byte");
  both(std::string(100000, '[') + std::string(100000, ']'), merges);
  expect("JSON nested 100,000 deep", "nested more than");
  both("[1, 2, 3]", merges);
  expect("a vocabulary that is no object", "vocab.json");
  both("{\"a\": 0, \"b\": 0}", "");
  expect("an id given twice", "given twice");
  both("{\"\\u4e2d\": 0}", "");
  expect("a token outside GPT-2's byte alphabet", "byte-level");
  both("{\"a\": 99999999999}", "");
  expect("an id out of range", "outside");
  // 40 MB that are never read: refused by size (a sparse file).
  both(vocab, merges);
  ::truncate((dir / "vocab.json").c_str(), int64_t{40} << 20);
  expect("a vocab.json of 40 MB", "vocab.json");
  // A link out of the folder.
  both(vocab, merges);
  const auto outside = fresh_folder("outside");
  write(outside / "vocab.json", vocab);
  std::filesystem::remove(dir / "vocab.json");
  std::filesystem::create_symlink(outside / "vocab.json", dir / "vocab.json");
  expect("a link out of the folder", "link out of the folder");
  std::filesystem::remove_all(outside);
  {  // A hub cache's snapshot links into its model's blobs: read. A link elsewhere in the cache is not.
    const auto hub = fresh_folder("hub"), snapshot = hub / "models--gpt2" / "snapshots" / "e7da7f2";
    std::filesystem::create_directories(snapshot);
    std::filesystem::create_directories(hub / "models--gpt2" / "blobs");
    write(hub / "models--gpt2" / "blobs" / "10c66461", vocab);
    write(hub / "models--gpt2" / "merges-elsewhere", merges);
    std::filesystem::create_symlink("../../blobs/10c66461", snapshot / "vocab.json");
    std::filesystem::create_symlink("../../merges-elsewhere", snapshot / "merges.txt");
    CHECK_THROWS_WITH(BpeTokenizer::load(snapshot.string()),
                      Catch::Matchers::Contains("merges.txt") && Catch::Matchers::Contains("link out"));
    std::filesystem::remove(hub / "models--gpt2" / "merges-elsewhere");
    write(hub / "models--gpt2" / "blobs" / "5f2c", merges);
    std::filesystem::remove(snapshot / "merges.txt");
    std::filesystem::create_symlink("../../blobs/5f2c", snapshot / "merges.txt");
    CHECK(BpeTokenizer::load(snapshot.string()).vocab_size() == 50257);
    std::filesystem::remove_all(hub);
  }
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  expect("an empty folder", "holds neither");
  write(dir / "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\"}}");
  expect("a tokenizer.json of another model", "tokenizer.json");
  std::filesystem::remove_all(dir);
  expect("no folder", "not a folder");
}

TEST_CASE("train_bpe learns the most frequent pairs first and reads back as a tokenizer", "[bpe]") {
  const std::string text = "abab abab abab abc";
  const auto files = train_bpe(text, 260);  // 256 bytes, 3 merges, <|endoftext|>
  const BpeTokenizer learned = BpeTokenizer::from_files(files, "learned");
  CHECK(learned.vocab_size() == 260);
  // (a, b) occurs 7 times. Then (Ġ, ab) and (ab, ab) 3 times each: the tie goes to the smaller ids (Ġ is 32,
  // ab 256). Then (Ġab, ab) twice, more than any other pair.
  CHECK(files.at("merges.txt") == "#version: 0.2\na b\nĠ ab\nĠab ab\n");
  CHECK(learned.encode(" abab") == std::vector<int64_t>{258});
  CHECK(learned.decode(learned.encode(text)) == text);
  CHECK(train_bpe(text, 260) == files);  // the same text, the same files
  // Two merges that spell one token share its id: "ab"+"c" and "a"+"bc" would both be "abc".
  const auto shared = train_bpe("abc abc abc xbc xbc xbc xbc ab ab", 300);
  CHECK(BpeTokenizer::from_files(shared, "shared").vocab_size() <= 300);
  CHECK_THROWS_WITH(train_bpe(text, 256), Catch::Matchers::Contains("the 256 bytes and <|endoftext|>"));
}
