// Run as `mpiexec -n 2 data_parallel_check`: data parallelism must train
// exactly like one process. In float64, each rank trains a GPT on its half
// of every global batch (dist::average_gradients between backward and the
// clipped AdamW step) while also training a reference copy on the whole
// batch alone; after 5 steps the two agree to 1e-12 on every rank.
//
// The batches' examples have different numbers of counted (not ignored)
// target tokens, so a rank's mean is not the global mean: averaging plain
// per-rank means would be wrong. The check shows that it is (a control that
// must differ), then that weighting each rank's loss by its token share
// fixes it.
#include <cmath>
#include <cstdio>

#include "distributed/dist.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "train/trainer.h"

using namespace qkv;

namespace {

constexpr int64_t kBatch = 8, kT = 10, kVocab = 13, kSteps = 5;

struct Batch {
  Tensor ids, targets;  // [kBatch, kT]; targets -100 where ignored
};

Batch draw(Generator& gen) {
  std::vector<int64_t> ids(kBatch * kT), targets(kBatch * kT);
  for (int64_t b = 0; b < kBatch; ++b) {
    int64_t counted = 1 + static_cast<int64_t>(gen.below(kT));  // 1..kT counted positions, the rest ignored
    for (int64_t t = 0; t < kT; ++t) {
      ids[b * kT + t] = static_cast<int64_t>(gen.below(kVocab));
      targets[b * kT + t] = t < kT - counted ? -100 : static_cast<int64_t>(gen.below(kVocab));
    }
  }
  return {Tensor::from_vector(ids, {kBatch, kT}), Tensor::from_vector(targets, {kBatch, kT})};
}

Tensor rows(const Tensor& t, int64_t first, int64_t count) { return slice(t, 0, first, first + count); }

int64_t counted(const Tensor& targets) {
  int64_t n = 0;
  const int64_t* p = targets.data<int64_t>();
  for (int64_t i = 0; i < targets.numel(); ++i) n += p[i] != -100;
  return n;
}

std::unique_ptr<nn::GPT> model() {
  nn::GPTConfig c;
  c.vocab = kVocab, c.context = kT, c.width = 16, c.heads = 2, c.layers = 2;
  Generator init(1234);
  auto gpt = std::make_unique<nn::GPT>(c, &init);
  gpt->to(DType::Float64);
  return gpt;
}

// Trains a model for kSteps through the library's Trainer; with `parallel`,
// on this rank's slice with averaged gradients (`weighted`: each rank's loss
// times its token share; unweighted, the plain per-rank mean: share 1/N).
// Returns the largest norm seen before clipping, to show clipping acted.
double train_for_steps(nn::GPT& gpt, bool parallel, bool weighted) {
  optim::AdamOptions o;
  o.lr = 3e-2, o.weight_decay = 0.1;
  optim::AdamW opt(gpt.named_parameters(), o);
  optim::ConstantLR constant(3e-2);
  train::TrainerOptions options;
  options.steps = kSteps, options.eval_every = kSteps, options.clip = 0.5;
  options.data_parallel = parallel;  // the reference trains alone on every rank
  train::Trainer trainer(opt, constant, options);
  Generator data(99);  // the same global batches on every rank
  const int ranks = dist::world_size();
  const dist::Slice mine = dist::slice_of(kBatch, dist::rank(), ranks);
  trainer.loss = [&](int64_t) {
    Batch batch = draw(data);
    if (!parallel) return train::StepLoss{nn::cross_entropy(gpt.forward(batch.ids), batch.targets), 1, kBatch * kT};
    Tensor targets = rows(batch.targets, mine.first, mine.count);
    double share = static_cast<double>(counted(targets)) / static_cast<double>(counted(batch.targets));
    Tensor loss = nn::cross_entropy(gpt.forward(rows(batch.ids, mine.first, mine.count)), targets);
    return train::StepLoss{loss, weighted ? share : 1.0 / ranks, kBatch * kT};
  };
  double largest_norm = 0;
  trainer.on_step = [&](const train::Progress& p) { largest_norm = std::max(largest_norm, p.grad_norm); };
  trainer.run();
  return largest_norm;  // on_step runs where this process trains alone, or on rank 0
}

double max_difference(nn::GPT& a, nn::GPT& b, std::string* where = nullptr) {
  double worst = 0;
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const double *x = pa[i].second.data<double>(), *y = pb[i].second.data<double>();
    for (int64_t j = 0; j < pa[i].second.numel(); ++j)
      if (std::abs(x[j] - y[j]) > worst) {
        worst = std::abs(x[j] - y[j]);
        if (where) *where = pa[i].first;
      }
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  dist::init(&argc, &argv);
  int failures = 0;
  auto check = [&](bool ok, const char* what, double value) {
    if (dist::rank() == 0 || !ok)
      std::printf("rank %d: %s %s (%.3g)\n", dist::rank(), ok ? "ok:" : "FAIL:", what, value);
    failures += !ok;
  };
  if (dist::world_size() != 2) {
    std::printf("run me with 2 ranks (mpiexec -n 2), not %d\n", dist::world_size());
    dist::finalize();
    return 1;
  }
  set_num_threads(1);
  auto reference = model(), weighted = model(), plain = model();
  double norm = train_for_steps(*reference, false, false);
  train_for_steps(*weighted, true, true);
  train_for_steps(*plain, true, false);
  check(norm > 0.5, "clipping acted (largest gradient norm above the 0.5 limit)", norm);
  double control = max_difference(*reference, *plain);
  check(control > 1e-6, "the control (plain per-rank means) differs from one process", control);
  std::string where;
  double diff = max_difference(*reference, *weighted, &where);
  if (dist::rank() == 0) std::printf("largest difference in %s\n", where.c_str());
  check(diff <= 1e-12, "2 ranks x 4 examples match 1 process x 8 after 5 clipped AdamW steps (max |diff|)", diff);
  bool same = dist::same_on_all_ranks(dist::parameter_hash(weighted->parameters()));
  check(same, "both ranks hold bit-identical parameters", 0);
  std::vector<double> total{static_cast<double>(failures)};
  dist::sum(total);
  dist::finalize();
  return total[0] == 0 ? 0 : 1;
}
