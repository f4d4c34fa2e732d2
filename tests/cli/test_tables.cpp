// The program's tables (cli/task.h, cli/kinds.h): every row is whole, and
// every model kind drives every task of every family it says it learns,
// through the driver abilities that family needs.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "kinds.h"
#include "runner.h"

using namespace qkv;
using namespace qkv::cli;

namespace {
// Whether the kind's driver has what a task of `family` asks of it.
bool drives(Runner& runner, TaskFamily family) {
  ModelDriver* driver = &runner.driver();
  switch (family) {
    case TaskFamily::Sequence: return dynamic_cast<SequenceDriver*>(driver) != nullptr;
    case TaskFamily::Text: return dynamic_cast<TextDriver*>(driver) != nullptr;
    default: return dynamic_cast<LabelDriver*>(driver) != nullptr;
  }
}
}  // namespace

TEST_CASE("tables: every task has a unique name, a kind that learns it, and a factory") {
  std::set<std::string> names;
  for (const TaskRow& task : task_table()) {
    INFO(task.name);
    CHECK(names.insert(task.name).second);
    CHECK(task.make != nullptr);
    CHECK(learns(default_kind(task), task));
    CHECK((task.data_is == nullptr) == (task.data_noun == nullptr));
    CHECK((!task.prompt_picks_data || task.data_is));
    CHECK(task_row(task.name).name == task.name);
  }
  CHECK(is_task(kDefaultTask));
  CHECK_THROWS_WITH(task_row("juggle"), Catch::Matchers::Contains("unknown task 'juggle' (copy, reverse"));
}

TEST_CASE("tables: every kind is the library's, once, and learns a task") {
  std::set<std::string> names;
  for (const KindRow& kind : kind_table()) {
    INFO(kind.name());
    CHECK(names.insert(kind.name()).second);
    CHECK(&nn::model_kind(kind.name()) == &kind.model());  // keyed once: the row points at the library's entry
    CHECK_FALSE(kind.learns.empty());
    CHECK(learns(kind, first_task(kind)));
  }
  CHECK(names.size() == nn::model_kind_names().size());
  CHECK_THROWS_WITH(kind_row("rnn"), Catch::Matchers::Contains("unknown model 'rnn' (gpt, seq2seq"));
}

TEST_CASE("tables: every kind trains every task it learns, and refuses the others in one line") {
  for (const KindRow& kind : kind_table())
    for (const TaskRow& task : task_table()) {
      INFO(kind.name() << " on " << task.name);
      ModelSpec spec = small_model_spec(kind.name());
      spec.task = task.name;
      spec.max_len = task.max_len_is ? 4 : spec.max_len;
      if (!learns(kind, task)) {
        CHECK_THROWS_WITH(Runner(spec), Catch::Matchers::Contains("--model " + kind.name() + " learns"));
        continue;
      }
      Generator gen(7);
      Runner runner(spec, &gen);
      CHECK(drives(runner, task.family));
      CHECK(runner.task().name() == task.name);
      CHECK(runner.spec().context > 0);
      const double loss = runner.task().fixed_batch_loss(runner, 2, gen)().item();
      CHECK(std::isfinite(loss));
      CHECK(loss > 0);
    }
}
