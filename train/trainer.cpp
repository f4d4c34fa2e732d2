#include "train/trainer.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "autograd/error.h"
#include "autograd/ops/elementwise.h"
#include "distributed/dist.h"
#include "io/metadata.h"
#include "io/output.h"
#include "io/safetensors.h"

namespace qkv::train {

namespace {

std::atomic<bool> stop_flag{false};  // lock-free: set from a signal handler

std::string digest_text(int64_t bytes, uint64_t hash) {
  char text[48];
  std::snprintf(text, sizeof text, "%lld:%016llx", static_cast<long long>(bytes),
                static_cast<unsigned long long>(hash));
  return text;
}

// A number for a log line: JSON has no NaN or infinity, so those are null.
std::string log_number(double v) { return std::isfinite(v) ? io::exact_number(v) : "null"; }

}  // namespace

// The per-step log: one row per step, each layer's gradient norm (before
// clipping) and update ratio ||Δθ|| / ||θ|| after the common columns.
struct Trainer::Log {
  // Parameters grouped by block ("blocks.3", "encoder.0", ...; embeddings and
  // final norms are "other"), for per-layer gradient flow in the log. A member
  // type, not an unnamed-namespace one: the sanitizer pass's unity build
  // includes this file, and GCC warns of such a field there (-Wsubobject-linkage).
  struct LayerGroups {
    std::vector<std::string> names;  // in first-seen order
    std::vector<size_t> of;          // group of each parameter
    explicit LayerGroups(const optim::NamedTensors& params) {
      for (const auto& [name, p] : params) {
        std::string group = "other";
        for (const char* prefix : {"blocks.", "encoder.", "decoder."})
          if (name.rfind(prefix, 0) == 0) group = name.substr(0, name.find('.', std::strlen(prefix)));
        auto it = std::find(names.begin(), names.end(), group);
        of.push_back(static_cast<size_t>(it - names.begin()));
        if (it == names.end()) names.push_back(group);
      }
    }
    // Per group: sqrt of the summed squares of tensor(i) over its parameters.
    template <class F> std::vector<double> norms(size_t count, F&& tensor) const {
      std::vector<double> sq(names.size(), 0.0);
      for (size_t i = 0; i < count; ++i) {
        Tensor t = tensor(i);
        if (!t.defined()) continue;
        for (double v : t.to_vector()) sq[of[i]] += v * v;
      }
      for (double& v : sq) v = std::sqrt(v);
      return sq;
    }
  };

  std::unique_ptr<io::GrowingFile> file;
  std::string path;
  bool csv = false;
  LayerGroups groups;
  std::vector<double> layer_grad;
  std::vector<Tensor> before;
  int64_t bytes = 0;                // written and flushed so far (an appended-to file's own bytes included)
  uint64_t hash = io::kFnv1aStart;  // their FNV-1a (io::fnv1a), continued text by text

  Log(const TrainerOptions& o, const optim::NamedTensors& params) : path(o.log), groups(params) {
    csv = is_csv_log(path);
    std::string text;  // an appended log's bytes open the digest (bounded as any log)
    using Mode = io::GrowingFile::Mode;
    file = std::make_unique<io::GrowingFile>(path,
                                             o.append_log    ? Mode::append
                                             : o.replace_log ? Mode::replace
                                                             : Mode::create,
                                             int64_t{1} << 30, &text);
    bytes = static_cast<int64_t>(text.size()), hash = io::fnv1a(text, hash);
    if (csv && bytes == 0) {
      std::string header = cat("step,loss,lr,grad_norm,tokens_per_s,eval_accuracy,eval_loss",
                               o.extra_log_column ? "," + o.extra_log_name : "");
      for (const std::string& g : groups.names) header += ",grad_norm." + g + ",update_ratio." + g;
      write(header + "\n");
    }
  }
  // Writes `text` and counts it once it is flushed whole; false if it was not.
  bool write(const std::string& text) {
    if (!file->write(text)) return false;
    bytes += static_cast<int64_t>(text.size()), hash = io::fnv1a(text, hash);
    return true;
  }
  // Before clipping and the update: the gradients' norms and the parameters as they are.
  void before_update(const optim::NamedTensors& params) {
    layer_grad = groups.norms(params.size(), [&](size_t i) { return params[i].second.grad(); });
    before.clear();
    for (const auto& [name, p] : params) before.push_back(p.detach().clone());
  }
  // Returns false when the row could not be written (a full disk).
  bool row(const optim::NamedTensors& params, int64_t step, double loss, double lr, double norm, double rate,
           const Evaluation* evaluation, const std::string& extra_name, const std::string& extra) {
    std::vector<double> moved =
        groups.norms(params.size(), [&](size_t i) { return params[i].second.detach() - before[i]; });
    std::vector<double> size = groups.norms(params.size(), [&](size_t i) { return before[i]; });
    std::string layers_csv, layers_json;
    for (size_t g = 0; g < groups.names.size(); ++g) {
      double ratio = size[g] > 0 ? moved[g] / size[g] : 0.0;
      layers_csv += "," + log_number(layer_grad[g]) + "," + log_number(ratio);
      layers_json += ",\"grad_norm." + groups.names[g] + "\":" + log_number(layer_grad[g]) + ",\"update_ratio." +
                     groups.names[g] + "\":" + log_number(ratio);
    }
    std::string acc = evaluation && evaluation->higher_is_better ? log_number(evaluation->metric) : "";
    std::string held = !evaluation                                ? ""
                       : !evaluation->higher_is_better            ? log_number(evaluation->metric)
                       : std::isfinite(evaluation->held_out_loss) ? log_number(evaluation->held_out_loss)
                                                                  : "";
    if (csv)
      return write(cat(step, ",", log_number(loss), ",", log_number(lr), ",", log_number(norm), ",", log_number(rate),
                       ",", acc, ",", held, extra.empty() ? "" : "," + extra, layers_csv, "\n"));
    return write(cat("{\"step\":", step, ",\"loss\":", log_number(loss), ",\"lr\":", log_number(lr),
                     ",\"grad_norm\":", log_number(norm), ",\"tokens_per_s\":", log_number(rate),
                     acc.empty() ? "" : ",\"eval_accuracy\":" + acc, held.empty() ? "" : ",\"eval_loss\":" + held,
                     extra.empty() ? "" : ",\"" + extra_name + "\":" + extra, layers_json, "}\n"));
  }
};

Trainer::Trainer(optim::Optimizer& optimizer, const optim::Schedule& schedule, TrainerOptions options)
    : optimizer_(optimizer), schedule_(schedule), o_(std::move(options)) {
  QKV_CHECK(o_.eval_every > 0, "Trainer: eval_every must be positive, got ", o_.eval_every);
  QKV_CHECK(o_.steps >= 0 && o_.save_every >= 0 && o_.clip >= 0, "Trainer: steps, save_every and clip must be >= 0");
  for (const auto& [name, p] : optimizer_.params()) tensors_.push_back(p);
  if (!o_.log.empty() && leads()) log_ = std::make_unique<Log>(o_, optimizer_.params());
}

Trainer::~Trainer() = default;

std::map<std::string, std::string> Trainer::settings(std::map<std::string, std::string> others) const {
  others["steps"] = std::to_string(o_.steps);
  others["eval-every"] = std::to_string(o_.eval_every);
  others["save-every"] = std::to_string(o_.save_every);
  others["clip"] = io::exact_number(o_.clip);
  return others;
}

bool Trainer::leads() const { return !o_.data_parallel || dist::rank() == 0; }

void Trainer::request_stop() { stop_flag.store(true); }
bool Trainer::stop_requested() { return stop_flag.load(); }

std::string Trainer::unsaved() const {
  return cat("training stopped without saving",
             saved_step_ >= 0 ? cat("; ", printable(saved_file_.empty() ? save_name : saved_file_),
                                    " still holds step ", saved_step_)
                              : std::string(", and this run has saved nothing yet"));
}

void Trainer::save_now() {
  // Every rank checks (they hold the same weights, and `save` may be set on rank 0 alone), so all stop together.
  if (save || (o_.data_parallel && dist::world_size() > 1)) {
    // A finite loss and gradient norm can still take an update to inf (a huge rate, a bad moment): a file of
    // NaN would replace the last good checkpoint, which every command then refuses.
    for (const auto& [name, p] : optimizer_.params())
      if (int64_t at = first_non_finite(p); at >= 0)
        throw Error(cat("parameter '", name, "' holds ", p.to(Device::cpu()).to_vector()[at], " after step ",
                        optimizer_.steps(), " (lr ", optimizer_.lr(), "): ", unsaved(), o_.divergence_advice));
  }
  if (save && leads()) save();
  saved_step_ = optimizer_.steps();
  saved_file_.clear();  // now in save_name
}

StepLoss Trainer::take_gradients(int64_t step, int ranks) {
  optimizer_.set_lr(schedule_.lr(step));
  optimizer_.zero_grad();
  StepLoss part = loss(step);
  // This rank's mean times its share of the loss terms times the rank
  // count: the ranks' average gradient is then the global batch's.
  if (ranks > 1) {
    (part.loss * (part.share * ranks)).backward();
    dist::average_gradients(tensors_);
  } else {
    part.loss.backward();
  }
  return part;
}

double Trainer::agree_on_loss(const StepLoss& part, int ranks, bool& stop) const {
  // One all-reduce agrees on the global loss and on stopping: a signal
  // reaches the ranks at different moments, and all must stop at one step.
  std::vector<double> shared{part.loss.item() * part.share, stop_requested() ? 1.0 : 0.0};
  if (ranks > 1) dist::sum(shared);
  stop = shared[1] > 0;
  return shared[0];
}

void Trainer::check_finite(double value, double norm, int64_t step) const {
  if (!std::isfinite(value) || !std::isfinite(norm)) {
    // Stepping on would fill the model with NaN; saving would replace the last good checkpoint with it.
    throw Error(cat("the ", std::isfinite(value) ? "gradient norm" : "loss", " is ",
                    std::isfinite(value) ? norm : value, " at step ", step + 1, " (lr ", optimizer_.lr(),
                    "): ", unsaved(), o_.divergence_advice));
  }
}

bool Trainer::evaluate_step(Progress& p, Evaluation& evaluation, Outcome& out, int ranks) {
  bool reached = false;
  if (ranks > 1) {
    // Cheap insurance that data parallelism works: every rank's parameters, bit for bit.
    QKV_CHECK(dist::same_on_all_ranks(dist::parameter_hash(tensors_)), "the ranks' parameters differ after step ",
              p.step, ": the ranks no longer train the same model (a rank's arithmetic or data differs)");
  }
  if (leads() && evaluate) {
    try {
      evaluation = evaluate(p.step);
    } catch (const Error& e) {  // outputs that overflow, say: the weights are not worth saving either
      throw Error(cat("evaluating step ", p.step, ": ", e.what(), "; ", unsaved()));
    }
    out.last_metric = evaluation.metric;
    reached = evaluation.reached;
    bool better =
        evaluation.higher_is_better ? !(evaluation.metric <= out.best_metric) : !(evaluation.metric >= out.best_metric);
    if (better) out.best_metric = evaluation.metric, out.best_step = p.step;
    p.evaluation = &evaluation;
  }
  if (ranks > 1) reached = dist::broadcast_value(reached) != 0;  // rank 0 evaluated
  return reached;
}

void Trainer::write_log_row(const Progress& p, double value, double norm) {
  std::string extra = o_.extra_log_column && extra_log_value ? log_number(extra_log_value()) : "";
  errno = 0;
  if (!log_->row(optimizer_.params(), p.step, value, p.lr, norm, p.tokens_per_s, p.evaluation, o_.extra_log_name,
                 extra)) {
    // A full disk: the model is worth more than the log. Save it (that may
    // fail too, and says so), then stop; a resumed run trims the cut-off line.
    std::string reason = errno != 0 ? std::strerror(errno) : "a write failed (disk full?)";
    save_now();
    throw Error(cat("cannot write ", o_.log_label, " ", printable(log_->path), ": ", reason, "; saved step ",
                    optimizer_.steps(), " to ", printable(save_name), o_.log_failure_advice));
  }
}

Outcome Trainer::run() {
  QKV_CHECK(static_cast<bool>(loss), "Trainer: no loss function set");
  const int ranks = o_.data_parallel ? dist::world_size() : 1;
  Outcome out;
  auto started = std::chrono::steady_clock::now();
  const int64_t first_step = optimizer_.steps(), total = o_.steps;
  int64_t tokens = 0;
  double smoothed = 0;
  bool stop = false, reached = false;
  while (optimizer_.steps() < total && !stop && !reached) {
    const int64_t step = optimizer_.steps();
    const StepLoss part = take_gradients(step, ranks);
    if (log_) log_->before_update(optimizer_.params());
    // The norm before clipping, measured also without clipping; the clip is made in the update's pass.
    const optim::ClipFactor clip = optim::clip_factor(optimizer_.params(), o_.clip > 0 ? o_.clip : INFINITY);
    const double norm = clip.norm, value = agree_on_loss(part, ranks, stop);
    check_finite(value, norm, step);
    optimizer_.step(clip.factor);
    tokens += part.tokens;
    smoothed = step == first_step ? value : 0.95 * smoothed + 0.05 * value;
    Progress p;
    p.step = optimizer_.steps(), p.total = total, p.loss = value, p.smoothed = smoothed, p.lr = optimizer_.lr();
    p.grad_norm = norm;
    p.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    p.tokens_per_s = static_cast<double>(tokens) / std::max(p.elapsed_s, 1e-9);
    p.eta_s = p.elapsed_s / static_cast<double>(p.step - first_step) * static_cast<double>(total - p.step);

    Evaluation evaluation;
    if (p.step % o_.eval_every == 0 || p.step == total) reached = evaluate_step(p, evaluation, out, ranks);
    if (log_) write_log_row(p, value, norm);
    if (on_step && leads()) on_step(p);
    if (o_.save_every > 0 && p.step % o_.save_every == 0) save_now();
  }
  save_now();
  out.steps = optimizer_.steps();
  out.reason = stop ? Outcome::Stopped : reached ? Outcome::Target : Outcome::Budget;
  if (stop) stop_flag.store(false);  // the request is spent: a later run in this process starts afresh
  out.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (log_) {
    QKV_CHECK(log_->file->finish(), "cannot write ", o_.log_label, " '", printable(log_->path),
              "': ", std::strerror(errno));
  }
  return out;
}

bool is_csv_log(const std::string& path) {
  return path.size() >= 4 &&
         (path.compare(path.size() - 4, 4, ".csv") == 0 || path.compare(path.size() - 4, 4, ".CSV") == 0);
}

std::string log_digest(std::string_view text) {
  return digest_text(static_cast<int64_t>(text.size()), io::fnv1a(text));
}

std::string Trainer::log_digest() const { return log_ ? digest_text(log_->bytes, log_->hash) : ""; }

std::string duration(double seconds) {
  if (!std::isfinite(seconds) || seconds > 99 * 86400.0) return "> 99 days";
  long long t = static_cast<long long>(std::max(seconds, 0.0) + 0.5);
  char text[48];
  if (t < 60)
    std::snprintf(text, sizeof text, "%llds", t);
  else if (t < 3600)
    std::snprintf(text, sizeof text, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(text, sizeof text, "%lldh%02lldm", t / 3600, t / 60 % 60);
  return text;
}

std::string progress_line(const Progress& p, bool eta_is_bound) {
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld  avg loss %.4f  lr %.2e  %.0f tok/s  %s elapsed  ETA %s%s",
                static_cast<long long>(p.step), static_cast<long long>(p.total), p.smoothed, p.lr, p.tokens_per_s,
                duration(p.elapsed_s).c_str(), eta_is_bound ? "≤ " : "", duration(p.eta_s).c_str());
  return line;
}

}  // namespace qkv::train
