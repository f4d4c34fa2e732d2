// The files qkv reads, fuzzed through the commands that read them. One input
// is one file's bytes; QKV_FUZZ names what the file is:
//   checkpoint  qkv info FILE, then qkv eval --checkpoint FILE (2 examples)
//   resume      qkv train --resume FILE, one step past the file's own
//   log         qkv plot FILE (a --log file of JSON lines)
//   csvlog      qkv plot FILE.csv (a --log file in CSV)
//   text        qkv train --task text --data FILE, one step of a tiny model
//   digits      qkv train --task digits --data FILE, one step of a tiny model
//   gpt2config  a GPT-2 folder's config.json (beside the fixture's weights and
//               tokenizer): qkv info FOLDER, then qkv sample FOLDER
//   llmc        an llm.c GPT-2 checkpoint (GPT-2's tokenizer beside it):
//               qkv info FILE, then qkv sample FILE
// Each command must either finish or throw qkv::Error (its one-line error)
// naming the file, so that the user learns which file is bad (some errors
// once named only the flag of a value the checkpoint held: "--context 16 is
// too short ..."). Any other exception, an error that does not name the
// file, a crash, a sanitizer report, a leak, more than the fuzzer's memory
// or time limits, is a finding. Built two ways (tests/fuzz/README.md): with
// libfuzzer.cpp, clang's libFuzzer search (CMake option QKV_FUZZ), and with
// replay.cpp, which replays tests/fuzz/corpus/ in ctest in every build.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "autograd/error.h"
#include "commands.h"
#include "fuzz_files.h"
#include "io/metadata.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace {

// A folder of this process's own for the input and whatever the command
// writes. Never destroyed: qkv_fuzz_cleanup may run at exit, after statics.
const std::string& scratch() {
  static const std::string& dir = *new std::string([] {
    std::string d = (fs::temp_directory_path() / ("qkv-fuzz-" + std::to_string(::getpid()))).string();
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }());
  return dir;
}

int run(std::vector<std::string> words, int (*command)(int, char**)) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  return command(static_cast<int>(words.size()), argv.data());
}

// The step after the checkpoint's own, so that a resumed run trains once
// (a file that names no step gets 1: the command refuses it anyway).
std::string next_step(const std::string& path) {
  int64_t step = 0;
  try {
    auto meta = qkv::io::load_safetensors(path).metadata;
    if (meta.count("qkv.step") && qkv::io::parse_integer(meta["qkv.step"], step) && step >= 0 && step < INT64_MAX)
      return std::to_string(step + 1);
  } catch (const qkv::Error&) {
  }
  return "1";
}

// The training runs below: one step of a width-8 model on one thread, so
// that a run's time goes to reading its input.
const char* const kKinds = "checkpoint, resume, log, csvlog, text, digits, gpt2config or llmc";

const std::vector<std::string> kTiny = {"--dim",   "8", "--heads",      "2", "--layers",  "1", "--batch", "2",
                                        "--steps", "1", "--eval-every", "1", "--threads", "1"};

void one_input(const std::string& kind, const std::string& input) {
  using namespace qkv::cli;
  const std::string out = scratch() + "/out", log = scratch() + "/log.jsonl";
  fs::remove_all(out);
  fs::remove(log);
  fs::remove(out + ".csv");               // a new run's log beside its checkpoint
  fs::remove(out + ".best.safetensors");  // and its best evaluation's model
  auto with_tiny = [&](std::vector<std::string> words) {
    words.insert(words.end(), kTiny.begin(), kTiny.end());
    return words;
  };
  if (kind == "checkpoint") {
    run({"info", input}, info);
    run({"eval", "--checkpoint", input, "--examples", "2", "--threads", "1"}, eval);
  } else if (kind == "resume") {
    run({"train", "--resume", input, "--steps", next_step(input), "--save", out, "--threads", "1"}, train);
  } else if (kind == "log" || kind == "csvlog") {
    run({"plot", input, "--out", out}, plot);
  } else if (kind == "text") {
    run(with_tiny({"train", "--task", "text", "--data", input, "--context", "8", "--save", out, "--log", log}), train);
  } else if (kind == "digits") {
    run(with_tiny({"train", "--task", "digits", "--data", input, "--patch", "4", "--save", out}), train);
  } else if (kind == "gpt2config" || kind == "llmc") {
    const std::string model = kind == "llmc" ? input : fs::path(input).parent_path().string();
    run({"info", model}, info);
    run({"sample", model, "--prompt", "The quick", "--max-new", "2", "--threads", "1"}, sample);
  } else {
    std::fprintf(stderr, "fuzz_files: QKV_FUZZ=%s: not %s\n", kind.c_str(), kKinds);
    std::abort();
  }
}

}  // namespace

const char* qkv_fuzz_kind() {
  const char* kind = std::getenv("QKV_FUZZ");
  if (!kind || !*kind) {
    std::fprintf(stderr, "fuzz_files: set QKV_FUZZ to %s\n", kKinds);
    std::exit(2);
  }
  return kind;
}

// The file an input of `kind` is written to: a GPT-2 folder's config.json, beside the fixture's weights and
// GPT-2's tokenizer (copied once); an llm.c checkpoint beside GPT-2's tokenizer; else a file of its own.
static std::string input_path(const std::string& kind) {
  if (kind != "gpt2config" && kind != "llmc") return scratch() + (kind == "csvlog" ? "/input.csv" : "/input");
  const fs::path folder = fs::path(scratch()) / kind, fixture = fs::path(QKV_FIXTURE_DIR) / "gpt2";
  if (!fs::exists(folder / "vocab.json")) {
    fs::create_directories(folder);
    for (const char* name : {"vocab.json", "merges.txt"}) fs::copy_file(fixture / name, folder / name);
    if (kind == "gpt2config") fs::copy_file(fixture / "model.safetensors", folder / "model.safetensors");
  }
  return (folder / (kind == "gpt2config" ? "config.json" : "gpt2.bin")).string();
}

std::string qkv_fuzz_one(const std::string& kind, const uint8_t* data, size_t size) {
  const std::string input = input_path(kind);
  {
    std::FILE* f = std::fopen(input.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
      std::perror("fuzz_files: cannot write the input");
      std::abort();
    }
  }
  try {
    one_input(kind, input);
    return "";
  } catch (const qkv::Error& e) {  // the command's one-line error: the file was refused
    const std::string message = qkv::one_line(e.what());
    if (message.find(qkv::printable(input)) == std::string::npos) {
      std::fprintf(stderr, "fuzz_files: the error does not name the file: %s\n", message.c_str());
      std::abort();
    }
    return message;
  } catch (const std::exception& e) {  // what the program reports as "unexpected error": a missed check
    std::fprintf(stderr, "fuzz_files: not a qkv::Error: %s\n", e.what());
    std::abort();
  }
}

void qkv_fuzz_cleanup() { fs::remove_all(scratch()); }
