// The library's training loop (train/trainer.h): the budget, the target, a
// stop request, the non-finite check and the log, on a model small enough
// to train in milliseconds.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "nn/nn.h"
#include "optim/optim.h"
#include "train/trainer.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {

struct Setup {
  nn::GPT gpt{nn::GPTConfig{.vocab = 5, .context = 4, .width = 8, .heads = 2, .layers = 1}};
  optim::AdamW opt{gpt.named_parameters(), {.lr = 1e-2}};
  optim::ConstantLR schedule{1e-2};
  Tensor x = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 1, 2, 3, 4}, {2, 4});
  Tensor y = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 2, 3, 4, 0}, {2, 4});
  std::unique_ptr<train::Trainer> make(train::TrainerOptions o) {
    auto t = std::make_unique<train::Trainer>(opt, schedule, std::move(o));
    t->loss = [this](int64_t) { return train::StepLoss{nn::cross_entropy(gpt.forward(x), y), 1, 8}; };
    return t;
  }
};

}  // namespace

TEST_CASE("trainer: runs to its budget, stops at its target, and saves at the end") {
  Setup s;
  int saves = 0, evaluations = 0;
  auto t = s.make({.steps = 12, .eval_every = 4});
  t->save = [&] { ++saves; };
  t->evaluate = [&](int64_t step) {
    ++evaluations;
    return train::Evaluation{static_cast<double>(step), true, step >= 8, "step"};
  };
  train::Outcome out = t->run();
  CHECK(out.reason == train::Outcome::Target);
  CHECK(out.steps == 8);
  CHECK(evaluations == 2);
  CHECK(out.best_metric == 8);
  CHECK(saves == 1);
  CHECK(t->saved_step() == 8);
  // The same optimizer goes on to the budget (a resumed run).
  auto more = s.make({.steps = 12, .eval_every = 100});
  CHECK(more->run().steps == 12);
}

TEST_CASE("trainer: a stop request ends the run after its step, and is spent") {
  Setup s;
  auto t = s.make({.steps = 50, .eval_every = 100});
  t->on_step = [](const train::Progress& p) {
    if (p.step == 3) train::Trainer::request_stop();  // as a SIGINT handler would
  };
  train::Outcome out = t->run();
  CHECK(out.reason == train::Outcome::Stopped);
  CHECK(out.steps == 4);  // the request is seen at the next step's end
  CHECK_FALSE(train::Trainer::stop_requested());
  auto again = s.make({.steps = 10, .eval_every = 100});
  CHECK(again->run().reason == train::Outcome::Budget);  // a later run is not stopped by the old request
}

TEST_CASE("trainer: a non-finite loss throws before the update, without saving") {
  Setup s;
  auto t = s.make({.steps = 5, .eval_every = 100});
  int saves = 0;
  t->save = [&] { ++saves; };
  t->loss = [&](int64_t step) {
    Tensor loss = nn::cross_entropy(s.gpt.forward(s.x), s.y);
    return train::StepLoss{step == 2 ? loss * NAN : loss, 1, 8};
  };
  // The library's own advice, naming no flag of a program (which passes its own).
  CHECK_THROWS_WITH(t->run(),
                    Contains("the loss is nan at step 3") &&
                        Contains("training stopped without saving, and this run has saved nothing yet") &&
                        Catch::Matchers::EndsWith(". Try a lower learning rate or a limit on the gradient norm"));
  CHECK(s.opt.steps() == 2);
  CHECK(saves == 0);
  // Resumed from one file and saving to another: the message names the file that holds the steps.
  auto resumed = s.make({.steps = 5, .eval_every = 100});
  resumed->save = [&] { ++saves; };
  resumed->loss = [&](int64_t) { return train::StepLoss{nn::cross_entropy(s.gpt.forward(s.x), s.y) * NAN, 1, 8}; };
  resumed->save_name = "new.safetensors";
  resumed->set_saved_step(2, "resumed.safetensors");
  CHECK_THROWS_WITH(resumed->run(),
                    Contains("the loss is nan at step 3") &&
                        Contains("training stopped without saving; resumed.safetensors still holds step 2"));
  CHECK(saves == 0);
}

// A finite loss and norm, and still an update to inf: lr 1e300 once saved a file of inf and exited 0,
// replacing the last good checkpoint.
TEST_CASE("trainer: weights an update made non-finite are never saved") {
  Setup s;
  optim::SGD sgd(s.gpt.named_parameters(), {1e-2});
  optim::ConstantLR huge{1e300};
  train::Trainer t(sgd, huge, {.steps = 5, .eval_every = 100, .save_every = 1});
  t.loss = [&](int64_t) { return train::StepLoss{nn::cross_entropy(s.gpt.forward(s.x), s.y), 1, 8}; };
  int saves = 0;
  t.save = [&] { ++saves; };
  t.save_name = "run.safetensors";
  t.set_saved_step(0, "");
  CHECK_THROWS_WITH(t.run(), Contains("' holds ") && Contains(" after step 1 (lr 1e+300): ") &&
                                 Contains("training stopped without saving; run.safetensors still holds step 0"));
  CHECK(saves == 0);
}

TEST_CASE("trainer: the log has a header and one row per step, with each layer's norms") {
  Setup s;
  std::string path = (std::filesystem::temp_directory_path() / "qkv_trainer_log.csv").string();
  std::remove(path.c_str());
  auto t = s.make({.steps = 6, .eval_every = 3, .log = path});
  t->evaluate = [](int64_t) { return train::Evaluation{0.5, true, false, "half"}; };
  t->run();
  std::ifstream in(path);
  std::string header, line;
  std::getline(in, header);
  CHECK(header ==
        "step,loss,lr,grad_norm,tokens_per_s,eval_accuracy,eval_loss,grad_norm.other,update_ratio.other,"
        "grad_norm.blocks.0,update_ratio.blocks.0");
  int rows = 0, evaluated = 0;
  while (std::getline(in, line)) ++rows, evaluated += line.find(",0.5,") != std::string::npos;
  CHECK(rows == 6);
  CHECK(evaluated == 2);
  std::remove(path.c_str());
}

TEST_CASE("trainer: log_digest is what the log holds, continued across an appending run") {
  Setup s;
  std::string path = (std::filesystem::temp_directory_path() / "qkv_trainer_digest.jsonl").string();
  std::remove(path.c_str());
  auto read = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto first = s.make({.steps = 3, .log = path});
  CHECK(first->log_digest() == train::log_digest(""));  // opened, nothing written yet (JSON lines: no header)
  first->run();
  const std::string three = read();
  CHECK(first->log_digest() == train::log_digest(three));
  auto resumed = s.make({.steps = 5, .log = path, .append_log = true});
  resumed->run();
  CHECK(read().size() > three.size());
  CHECK(resumed->log_digest() == train::log_digest(read()));
  CHECK(train::log_digest("ab") != train::log_digest("ba"));
  CHECK(train::log_digest("") == "0:cbf29ce484222325");  // FNV-1a's offset basis
  CHECK(s.make({.steps = 1})->log_digest().empty());     // no log
  std::remove(path.c_str());
}

// The log was an ofstream opened after the checks: it followed a link planted at its name meanwhile (and
// truncated the link's target), and cut a hard-linked file's other name with it. Two runs started at once
// on one new name both passed the CLI's checks, and the second's rename dropped the first's log.
TEST_CASE("trainer: a new log replaces what is at its name only when asked, an appended one is never a link's target") {
  Setup s;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "qkv_trainer_log_links";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [](const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; };
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  write(dir / "other.txt", "keep me\n");
  fs::create_hard_link(dir / "other.txt", dir / "hard.csv");
  CHECK_THROWS_WITH(s.make({.steps = 2, .log = (dir / "hard.csv").string()}),
                    Contains("refusing to replace " + (dir / "hard.csv").string() + ": it already exists"));
  CHECK(read(dir / "hard.csv") == "keep me\n");
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 2);  // no temporary left
  s.make({.steps = 2, .log = (dir / "hard.csv").string(), .replace_log = true})->run();
  CHECK(read(dir / "other.txt") == "keep me\n");
  CHECK(read(dir / "hard.csv").rfind("step,loss", 0) == 0);
  fs::create_symlink(dir / "other.txt", dir / "link.csv");
  s.make({.steps = 3, .log = (dir / "link.csv").string(), .replace_log = true})->run();  // a file of its own
  CHECK(read(dir / "other.txt") == "keep me\n");
  CHECK_FALSE(fs::is_symlink(dir / "link.csv"));
  fs::create_symlink(dir / "other.txt", dir / "appended.csv");
  CHECK_THROWS_WITH(s.make({.steps = 4, .log = (dir / "appended.csv").string(), .append_log = true}),
                    Contains("appended.csv: it is a symbolic link"));
  CHECK(read(dir / "other.txt") == "keep me\n");
  fs::create_hard_link(dir / "other.txt", dir / "twice.csv");  // appending would grow other.txt too
  CHECK_THROWS_WITH(s.make({.steps = 4, .log = (dir / "twice.csv").string(), .append_log = true}),
                    Contains("twice.csv: it has 1 other name (hard links)"));
  CHECK(read(dir / "other.txt") == "keep me\n");
  fs::remove_all(dir);
}
