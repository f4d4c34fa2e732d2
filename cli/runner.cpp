#include "runner.h"

#include <algorithm>
#include <cmath>

#include "bounds.h"

namespace qkv::cli {

std::unique_ptr<Task> resolve_spec(ModelSpec& spec, bool read_data) {
  // A checkpoint's description can still fail the task's own checks (a
  // context too short for it, a max_len under the task's least): the error
  // then names the file, and the data (the user's, never the file's) is
  // read once the description has passed, so its errors name only the data.
  const bool from_file = !spec.source.empty();
  std::unique_ptr<Task> task;
  try {
    const KindRow& kind = kind_row(spec.model);
    spec.check_sizes();
    nn::AttentionKind::parse(spec.attention);
    const TaskRow& row = task_row(spec.task);
    QKV_CHECK(learns(kind, row), "--model ", spec.model, " learns ",
              task_names([&](const TaskRow& t) { return learns(kind, t); }, ", "), "; the ", spec.task,
              " task trains --model ", default_kind(row).name());
    const bool read_now = read_data && !from_file;
    task = row.make(row, spec, read_now);
    task->resolve(spec, kind, read_now);
  } catch (const Error& e) {
    if (!from_file) throw;
    throw bad_description(printable(spec.source), e.what());
  }
  if (from_file && read_data && task->row().data_is) task->use_data(spec.data, spec);
  return task;
}

Runner::Runner(ModelSpec spec, Generator* init, bool read_data, const std::function<void(const ModelSpec&)>& check)
    : spec_(std::move(spec)), kind_(kind_row(spec_.model)), task_(resolve_spec(spec_, read_data)) {
  check_fits_in_memory(4.0 * static_cast<double>(spec_.parameter_count()),
                       cat("a model of ", spec_.parameter_count(), " parameters"),
                       "use a smaller --dim, --layers or --context");
  if (check) check(spec_);
  // The library builds the kind; this program then drives it through its row of the kind table.
  driver_ = kind_.drive(kind_.model().build(spec_, init));
}

Runner::Runner(ModelSpec spec, std::unique_ptr<nn::Module> model, bool read_data)
    : spec_(std::move(spec)), kind_(kind_row(spec_.model)), task_(resolve_spec(spec_, read_data)) {
  QKV_CHECK(model->num_parameters() == spec_.parameter_count(), "Runner: a model of ", model->num_parameters(),
            " parameters for a spec of ", spec_.parameter_count());
  driver_ = kind_.drive(std::move(model));
}

void Runner::use_data(const std::string& path) { task_->use_data(path, spec_); }

bool Runner::uses_cache() const {
  return driver_->keeps_cache() && use_cache_ && spec_.attention != "linear";  // linear attention keeps none
}

// Sized by what decoding needs, not by the context: a file's context of 2^20 once
// made a 3-digit prompt allocate 1 GB (and eval 138 GB) of zeros.
std::unique_ptr<nn::KVCache> Runner::cache_for(int64_t batch, int64_t positions) {
  if (!uses_cache()) return nullptr;
  positions = std::min(positions, spec_.context);
  if (device().is_cpu())  // (a device's memory is its allocator's to refuse)
    check_fits_in_memory(
        2.0 * 4 * static_cast<double>(spec_.layers) * static_cast<double>(batch) * static_cast<double>(positions) *
            static_cast<double>(spec_.width),
        cat(spec_.source.empty() ? std::string("this model") : printable(spec_.source), ": its key/value cache for ",
            batch, " sequence", batch == 1 ? "" : "s", " of ", positions, " tokens"),
        "use a shorter --prompt or a smaller --max-new, or a machine with more memory");
  return driver_->make_cache(batch, positions);
}

nn::Module& Runner::module() { return driver_->module(); }

void Runner::to(Device device) { module().to(device); }

Tensor Runner::loss(const std::vector<Example>& batch) {
  std::vector<Tensor> weights;
  Tensor loss = driver_->task_loss(batch, entropy_weight_ != 0 ? &weights : nullptr);
  return with_entropy(loss, weights);
}

Tensor Runner::with_entropy(const Tensor& loss, const std::vector<Tensor>& weights) {
  if (entropy_weight_ == 0) return loss;
  Tensor entropy = nn::attention_entropy(weights);
  last_entropy_ = entropy.item();
  return add(loss, mul(entropy, entropy_weight_));
}

Tensor Runner::text_loss(const TextTokens& text, int64_t batch, Generator& gen, int64_t first, int64_t count) {
  if (count < 0) count = batch - first;
  QKV_CHECK(first >= 0 && count > 0 && first + count <= batch, "text_loss: windows [", first, ", ", first + count,
            ") of ", batch);
  int64_t T = spec_.context, span = static_cast<int64_t>(text.size()) - T - 1;
  std::vector<int64_t> x(count * T), y(count * T);
  for (int64_t b = 0; b < batch; ++b) {  // every window is drawn, so the stream does not depend on the slice
    int64_t start = span > 0 ? static_cast<int64_t>(gen.below(span + 1)) : 0;
    if (b < first || b >= first + count) continue;
    for (int64_t t = 0; t < T; ++t) {
      x[(b - first) * T + t] = text[start + t];
      y[(b - first) * T + t] = text[start + t + 1];
    }
  }
  std::vector<Tensor> weights;
  Tensor loss = driver_as<TextDriver>().text_loss(ids_for(module(), x, {count, T}), ids_for(module(), y, {count, T}),
                                                  entropy_weight_ != 0 ? &weights : nullptr);
  return with_entropy(loss, weights);
}

void Runner::check_outputs(const double* values, size_t n, size_t row) const {
  // Weights near float's limit pass the load's finiteness check and overflow here: garbage, not an answer.
  // (-inf is a score that rules an entry out, but a row of nothing else rules out everything.)
  for (size_t i = 0; i < n; ++i) QKV_CHECK(!std::isnan(values[i]) && values[i] != INFINITY, not_finite(values[i]));
  for (size_t at = 0; row > 0 && at < n; at += row)
    QKV_CHECK(*std::max_element(values + at, values + std::min(n, at + row)) > -INFINITY, not_finite(-INFINITY));
}

std::string Runner::not_finite(double value) const {
  if (spec_.source.empty()) return cat("the model's outputs reach ", value, ": its weights overflow float32");
  return cat(printable(spec_.source), ": its outputs reach ", value,
             ": weights this large overflow float32 (the file does not hold a usable model)");
}

}  // namespace qkv::cli
