// The tasks whose answer is one label, for the encoder classifier, the ViT
// and the recommender: is a string of brackets balanced (brackets), which
// digit an 8×8 image shows (digits), and which item a user takes next
// (sessions). Each keeps its held-out examples apart from its training ones.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/generator.h"
#include "tasks.h"

namespace qkv::cli {

/// A task whose examples each have one right label. Classification
/// examples hold input = tokens or pixels, answer = {class}. A sessions
/// training example holds a history and, as its answer, the item after
/// each position; a held-out one the history and {the next item}.
class LabelTask {
 public:
  virtual ~LabelTask() = default;
  virtual const std::string& name() const = 0;
  /// Input ids, 0 padding (brackets, sessions), or pixel levels (digits).
  virtual int64_t vocab() const = 0;
  /// The labels scored: classes, or for sessions every item id (0 pads).
  virtual int64_t labels() const = 0;
  /// The longest input: tokens, a history's items, or an image's pixels.
  virtual int64_t max_input() const = 0;
  /// Whether the metric ranks items (hit rate, NDCG) instead of counting right classes.
  virtual bool ranks_items() const { return false; }
  /// A training example.
  virtual Example sample(Generator& gen) const = 0;
  /// Up to `count` held-out examples: fresh draws from `gen` for brackets,
  /// the fixed split for digits and sessions (the same at every call).
  virtual std::vector<Example> held_out(int64_t count, Generator& gen) const = 0;
  /// A prompt as an example: its input and, where the prompt gives or
  /// implies it, its one right label (else an empty answer). A sessions
  /// prompt is a history, its answer empty.
  virtual Example parse_prompt(const std::string& prompt) const = 0;
  virtual std::string label_text(int64_t label) const = 0;
  virtual std::string token_text(int64_t id) const = 0;
  /// The square image side of an image task (0 otherwise).
  virtual int64_t image_side() const { return 0; }
  /// Items to rank against the model: the most frequent in the training
  /// part, best first (sessions; empty otherwise).
  virtual std::vector<int64_t> popular_items() const { return {}; }
};

/// Whether `name` is one of these tasks.
bool is_label_task(const std::string& name);
/// The task; `data` is the digits CSV ("" for the bundled one), read only
/// when `read_data` (a checkpoint's model is described without its data;
/// `image_side` then says what its images are).
std::unique_ptr<LabelTask> make_label_task(const std::string& name, int64_t max_len, const std::string& data,
                                           bool read_data, int64_t image_side = 8);

/// The digits CSV qkv trains on without --data.
std::string default_digits_path();
/// The largest image CSV qkv reads.
inline constexpr int64_t kMaxImageCsvBytes = int64_t{64} << 20;

}  // namespace qkv::cli
