// qkv tokenize: a GPT-2-style tokenizer folder's ids for a text, or the text of ids.
#include <cstdio>
#include <sstream>

#include <cxxopts.hpp>

#include "bpe.h"
#include "commands.h"
#include "common.h"
#include "io/output.h"
#include "io/safetensors.h"
#include "text_task.h"

namespace qkv::cli {

namespace {

constexpr int64_t kMaxTrainedVocab = int64_t{1} << 16;  // --train's bound: ids stay small, merges minutes at most

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

// --train: a tokenizer folder learned from --data (bpe.h's train_bpe), written whole or not at all.
int train_tokenizer(const cxxopts::ParseResult& args) {
  for (const char* flag : {"tokenizer", "text", "decode", "special"})
    QKV_CHECK(!args.count(flag), "--", flag, " does not go with --train (it learns a tokenizer from --data)");
  QKV_CHECK(args.count("data") && args.count("out") && args.count("vocab-size"),
            "--train needs --data FILE, --vocab-size N and --out DIR");
  const int64_t vocab_size = args["vocab-size"].as<int64_t>();
  QKV_CHECK(vocab_size >= 257 && vocab_size <= kMaxTrainedVocab, "--vocab-size must be in [257, ", kMaxTrainedVocab,
            "] (the 256 bytes and <|endoftext|> at least), got ", vocab_size);
  const std::string data = args["data"].as<std::string>(), out = args["out"].as<std::string>();
  stop_if_parse_only();
  io::OutputFolder folder(out, "--out", args.count("force") > 0, {".json", ".txt"}, "--force");
  const std::string text = io::read_regular_file(data, kMaxTextBytes, "--data file");
  const auto files = train_bpe(text, vocab_size, [](int64_t done, int64_t most) {
    progress_line(cat("learning merges: ", done, " of up to ", most, " new tokens"));
  });
  progress_line("");
  for (const auto& [name, contents] : files) folder.write(name, contents);
  folder.commit();
  const BpeTokenizer learned = BpeTokenizer::load(out);  // read back as any folder is: the files are right
  const int64_t ids = static_cast<int64_t>(learned.encode(text).size());
  std::printf(
      "wrote %s: vocab.json and merges.txt, %lld tokens; '%s' is %lld tokens for its %zu bytes (%.2f bytes a token)\n",
      printable(out).c_str(), static_cast<long long>(learned.vocab_size()), printable(data).c_str(),
      static_cast<long long>(ids), text.size(), static_cast<double>(text.size()) / std::max<int64_t>(ids, 1));
  return 0;
}

}  // namespace

int tokenize(int argc, char** argv) {
  cxxopts::Options options("qkv tokenize",
                           "Token ids of a text with a GPT-2-style byte-level BPE tokenizer (a folder with "
                           "vocab.json and merges.txt, or tokenizer.json), or with --decode the text of ids.");
  options.custom_help(
      "--tokenizer DIR (--text TEXT | --data FILE) [OPTION...]  |  --train --data FILE --vocab-size N --out DIR");
  options.add_options()("tokenizer", "(required but for --train) the tokenizer's folder", cxxopts::value<std::string>(),
                        "DIR")("text", "the text (with --decode: ids separated by spaces)",
                               cxxopts::value<std::string>(), "TEXT")(
      "data", "a file whose bytes are the text (at most 64 MiB)", cxxopts::value<std::string>(), "FILE")(
      "decode", "print the text of the ids in --text")("special",
                                                       "read special tokens' text (<|endoftext|>) as those tokens")(
      "train", "learn a tokenizer from --data: GPT-2-style merges, written to --out as vocab.json and merges.txt")(
      "vocab-size",
      cat("--train: the tokens to learn, in [257, ", kMaxTrainedVocab, "] (256 bytes, merges, <|endoftext|>)"),
      cxxopts::value<int64_t>(), "N")("out", "--train: the tokenizer folder to write", cxxopts::value<std::string>(),
                                      "DIR")("force", "--train: replace a folder an earlier --train wrote");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  if (args.count("train")) return train_tokenizer(args);
  for (const char* flag : {"vocab-size", "out", "force"}) QKV_CHECK(!args.count(flag), "--", flag, " is for --train");
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
