// qkv eval: a checkpoint's held-out score, as its task measures it.
#include <chrono>
#include <cstdio>

#include <cxxopts.hpp>

#include "bounds.h"
#include "commands.h"
#include "common.h"

namespace qkv::cli {

int eval(int argc, char** argv) {
  cxxopts::Options options("qkv eval",
                           "Exact-match accuracy on fresh held-out examples, held-out text loss, a classifier's "
                           "accuracy and confusion matrix, or a recommender's HR@10 and NDCG@10 against the most "
                           "popular items.");
  options.custom_help("CHECKPOINT [OPTION...]");
  options.add_options()("checkpoint", "(required; or give it first) checkpoint file", cxxopts::value<std::string>(),
                        "FILE")(
      "examples",
      cat("held-out examples (tasks; digits and sessions use at most their fixed split) or windows (text), in ",
          range(1, kMaxExamples)),
      cxxopts::value<int64_t>()->default_value("1000"),
      "N")("seed", "seed of the held-out draw", cxxopts::value<uint64_t>()->default_value("2024"), "N")(
      "data",
      "text and digits models: the text or CSV to evaluate on (default: the bundled one, for models trained on it)",
      cxxopts::value<std::string>(),
      "FILE")("threads", "threads (0: one per idle core)", cxxopts::value<std::string>()->default_value("0"), "N")(
      "device", kDeviceHelp, cxxopts::value<std::string>()->default_value("cpu"), "DEVICE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  set_threads_option(args);
  const Device device = set_device_option(args["device"].as<std::string>());
  std::string path = required(args, "checkpoint");
  int64_t count = args["examples"].as<int64_t>();
  check_range("examples", count, 1, kMaxExamples);
  auto runner = load_runner(path);
  runner->to(device);
  use_data_flag(*runner, args, path);
  Generator gen(args["seed"].as<uint64_t>() ^ 0xe7a1ULL);
  // A million examples take a minute: say how far it got, after the first chunk and then at most ten times a second.
  std::chrono::steady_clock::time_point shown{};
  auto progress = [&](int64_t done, int64_t total, const char* units) {
    auto now = std::chrono::steady_clock::now();
    if (done < total && shown != std::chrono::steady_clock::time_point{} &&
        now - shown < std::chrono::milliseconds(100))
      return;
    shown = now;
    progress_line(done < total ? cat("eval: ", done, " of ", total, " ", units) : "");
  };
  runner->task().print_eval(*runner, path, count, gen, progress);
  return 0;
}

}  // namespace qkv::cli
