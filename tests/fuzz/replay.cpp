// fuzz_replay KIND PATH...: runs each file (each file of a folder, by name)
// through fuzz_files.cpp's commands for KIND, as libFuzzer would, in any
// build: ctest replays tests/fuzz/corpus/KIND/ (the seeds and every finding,
// once fixed) this way. A file whose name starts with "ok-" (a seed: a real
// file of its kind) must run, not be refused: were every input refused (a
// flag the harness passes gone stale, say), the fuzzer would test nothing. One
// named "refused-" (an edge written by hand) must be refused.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_files.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_replay KIND FILE...\n");
    return 2;
  }
  setenv("QKV_FUZZ", argv[1], 1);
  const std::string kind = qkv_fuzz_kind();
  if (!std::freopen("/dev/null", "w", stdout)) return 1;
  std::vector<std::string> files;
  for (int i = 2; i < argc; ++i) {
    std::error_code ec;
    if (!std::filesystem::is_directory(argv[i], ec)) {
      files.push_back(argv[i]);
      continue;
    }
    std::vector<std::string> inside;
    for (const auto& entry : std::filesystem::directory_iterator(argv[i]))
      if (entry.is_regular_file()) inside.push_back(entry.path().string());
    std::sort(inside.begin(), inside.end());
    files.insert(files.end(), inside.begin(), inside.end());
  }
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_replay: no files in %s\n", argv[2]);
    return 1;
  }
  size_t refusals = 0;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "fuzz_replay: cannot read %s\n", file.c_str());
      return 1;
    }
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string refused = qkv_fuzz_one(kind, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    const std::string name = std::filesystem::path(file).filename().string();
    const bool must_run = name.rfind("ok-", 0) == 0, must_refuse = name.rfind("refused-", 0) == 0;
    if (!refused.empty()) ++refusals;
    if (must_run && !refused.empty()) {
      std::fprintf(stderr, "fuzz_replay: %s was refused, but a file named ok-* must run: %s\n", file.c_str(),
                   refused.c_str());
      return 1;
    }
    if (must_refuse && refused.empty()) {
      std::fprintf(stderr, "fuzz_replay: %s ran, but a file named refused-* must be refused\n", file.c_str());
      return 1;
    }
    if (std::getenv("QKV_FUZZ_VERBOSE"))
      std::fprintf(stderr, "%s: %s\n", file.c_str(), refused.empty() ? "ran" : refused.c_str());
  }
  qkv_fuzz_cleanup();
  std::fprintf(stderr, "fuzz_replay %s: %zu files: %zu ran, %zu were refused with a qkv::Error\n", argv[1],
               files.size(), files.size() - refusals, refusals);
  return 0;
}
