// qkv tokenize: a GPT-2-style tokenizer folder's ids for a text, or the text of ids.
#include <cstdio>
#include <sstream>

#include <cxxopts.hpp>

#include "bpe.h"
#include "commands.h"
#include "common.h"
#include "io/safetensors.h"

namespace qkv::cli {

namespace {

// "15496 995" -> {15496, 995}; anything but ids separated by whitespace is refused.
std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
    }
    QKV_CHECK(used == word.size() && id >= 0, "--decode: '", printable(word, 40),
              "' is not a token id (give ids separated by spaces)");
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

int tokenize(int argc, char** argv) {
  cxxopts::Options options("qkv tokenize",
                           "Token ids of a text with a GPT-2-style byte-level BPE tokenizer (a folder with "
                           "vocab.json and merges.txt, or tokenizer.json), or with --decode the text of ids.");
  options.custom_help("--tokenizer DIR (--text TEXT | --data FILE) [OPTION...]");
  options.add_options()("tokenizer", "(required) the tokenizer's folder", cxxopts::value<std::string>(), "DIR")(
      "text", "the text (with --decode: ids separated by spaces)", cxxopts::value<std::string>(), "TEXT")(
      "data", "a file whose bytes are the text (at most 64 MiB)", cxxopts::value<std::string>(), "FILE")(
      "decode", "print the text of the ids in --text")("special",
                                                       "read special tokens' text (<|endoftext|>) as those tokens");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  const std::string folder = required(args, "tokenizer");
  QKV_CHECK(args.count("text") + args.count("data") == 1,
            "give the text with --text TEXT or --data FILE (one of them)");
  QKV_CHECK(!args.count("decode") || args.count("text"), "--decode reads ids from --text");
  const BpeTokenizer t = BpeTokenizer::load(folder);
  if (args.count("decode")) {
    const std::string text = t.decode(parse_ids(args["text"].as<std::string>()));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
    return 0;
  }
  const std::string text =
      args.count("text") ? args["text"].as<std::string>()
                         : io::read_regular_file(args["data"].as<std::string>(), int64_t{64} << 20, "--data file");
  std::string line;
  for (int64_t id : t.encode(text, args.count("special") > 0)) line += (line.empty() ? "" : " ") + std::to_string(id);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace qkv::cli
