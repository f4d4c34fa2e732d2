// qkv sample: a checkpoint's answer to a prompt, as its task reads it.
#include <cstdio>

#include <cxxopts.hpp>

#include "bounds.h"
#include "commands.h"
#include "common.h"

namespace qkv::cli {

int sample(int argc, char** argv) {
  cxxopts::Options options("qkv sample",
                           "Answer a prompt (tasks), continue it (text), classify it (brackets, digits) or "
                           "recommend the next items (sessions).");
  options.custom_help("CHECKPOINT --prompt TEXT [OPTION...]");
  options.add_options()("checkpoint", "(required; or give it first) checkpoint file", cxxopts::value<std::string>(),
                        "FILE")(
      "prompt",
      "(required) input, e.g. 123456 for reverse, 123+45 for add, any text for text, ([]) for brackets, a held-out "
      "image's "
      "number or 64 comma-separated pixels for digits, item ids '12 13 14' for sessions",
      cxxopts::value<std::string>(),
      "TEXT")("temperature", "0: greedy; else sample softmax(logits / T)", cxxopts::value<double>()->default_value("0"),
              "T")("top-k", "sample among the k likeliest (0: all)", cxxopts::value<int64_t>()->default_value("0"),
                   "K")("max-new", "bytes to generate (text)", cxxopts::value<int64_t>()->default_value("200"), "N")(
      "seed", "sampling seed", cxxopts::value<uint64_t>()->default_value("1"), "N")(
      "no-cache", "recompute the whole prefix for every token instead of keeping keys and values (GPT)")(
      "data", kDigitsDataHelp, cxxopts::value<std::string>(), "FILE")(
      "threads", "threads (0: one per idle core)", cxxopts::value<std::string>()->default_value("0"), "N")(
      "device", kDeviceHelp, cxxopts::value<std::string>()->default_value("cpu"), "DEVICE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  set_threads_option(args);
  const Device device = set_device_option(args["device"].as<std::string>());
  std::string path = required(args, "checkpoint"), prompt = required(args, "prompt");
  double temperature = args["temperature"].as<double>();
  int64_t top_k = args["top-k"].as<int64_t>(), max_new = args["max-new"].as<int64_t>();
  QKV_CHECK(temperature >= 0, "--temperature must be >= 0, got ", temperature);
  QKV_CHECK(top_k >= 0, "--top-k must be >= 0, got ", top_k);
  QKV_CHECK(!args.count("top-k") || temperature > 0, "--top-k limits sampling: it needs --temperature above 0");
  check_range("max-new", max_new, 0, 100000);
  auto runner = load_runner(path);
  runner->to(device);
  use_digits_data(*runner, args, path);
  runner->set_use_cache(!args.count("no-cache"));
  Generator gen(args["seed"].as<uint64_t>());
  runner->task().print_sample(*runner, prompt, {temperature, top_k, max_new, &gen});
  return 0;
}

}  // namespace qkv::cli
