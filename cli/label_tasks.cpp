#include "label_tasks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "autograd/error.h"
#include "bounds.h"
#include "io/metadata.h"
#include "io/safetensors.h"
#include "kinds.h"
#include "model_spec.h"
#include "runner.h"

namespace qkv::cli {

namespace {

// ---- brackets: is a string of four kinds of brackets balanced? ----

// Token 0 pads; brackets are 1 + their place here (openers at even places).
constexpr char kBrackets[] = "()[]{}<>";

bool balanced(const std::vector<int64_t>& tokens) {
  std::vector<int64_t> open;
  for (int64_t t : tokens) {
    int64_t place = t - 1;
    if (place % 2 == 0) {
      open.push_back(place);
    } else {
      if (open.empty() || open.back() != place - 1) return false;
      open.pop_back();
    }
  }
  return open.empty();
}

class BracketsTask : public LabelTask {
 public:
  BracketsTask(const TaskRow& row, int64_t max_len) : LabelTask(row), max_len_(max_len) {
    QKV_CHECK(max_len >= 2, "--max-len must be at least 2 for brackets (one pair), got ", max_len);
  }
  int64_t vocab() const override { return 9; }
  int64_t labels() const override { return 2; }
  int64_t max_input() const override { return max_len_; }

  // Half balanced, half not, at even lengths 2..max_len (an odd length would
  // give the answer away). A negative is a balanced string with two brackets
  // of different kinds or directions swapped: every kind still opens as often
  // as it closes, so counting cannot tell; only the nesting can.
  Example sample(Generator& gen) const override {
    Example e;
    const bool positive = gen.below(2) == 1;
    const int64_t length = 2 * (1 + static_cast<int64_t>(gen.below(max_len_ / 2)));
    e.input = random_balanced(length, gen);
    if (!positive) swap_to_unbalanced(e.input, gen);
    e.answer = {positive ? 1 : 0};
    return e;
  }
  std::vector<Example> held_out(int64_t count, Generator& gen) const override {
    std::vector<Example> out;
    for (int64_t i = 0; i < count; ++i) out.push_back(sample(gen));
    return out;
  }
  Example parse_prompt(const std::string& prompt) const override {
    Example e;
    for (char c : prompt) {
      if (c == ' ') continue;
      const char* at = std::strchr(kBrackets, c);
      QKV_CHECK(c != '\0' && at, "prompt '", printable(prompt), "' has '", printable(std::string(1, c)),
                "', which is not a bracket (the brackets task reads ()[]{}<>)");
      e.input.push_back(1 + (at - kBrackets));
    }
    QKV_CHECK(!e.input.empty(), "empty prompt");
    QKV_CHECK(static_cast<int64_t>(e.input.size()) <= max_len_, "the model was trained on up to ", max_len_,
              " brackets, got ", e.input.size());
    e.answer = {balanced(e.input) ? 1 : 0};
    return e;
  }
  std::string label_text(int64_t label) const override { return label == 1 ? "balanced" : "unbalanced"; }
  std::string token_text(int64_t id) const override {
    return id >= 1 && id <= 8 ? std::string(1, kBrackets[id - 1]) : "_";
  }
  std::string describe(const ModelSpec& spec) const override {
    return cat("brackets, up to ", spec.max_len, " brackets, ", spec.pooling, " pooling");
  }

 private:
  // A random balanced string: open while pairs remain (or nothing is open), close otherwise, half and half.
  static std::vector<int64_t> random_balanced(int64_t length, Generator& gen) {
    std::vector<int64_t> out, open;
    int64_t opens_left = length / 2;
    while (static_cast<int64_t>(out.size()) < length) {
      bool open_now = opens_left > 0 && (open.empty() || gen.below(2) == 0);
      if (open_now) {
        int64_t kind = static_cast<int64_t>(gen.below(4));
        open.push_back(kind);
        out.push_back(1 + 2 * kind);
        --opens_left;
      } else {
        out.push_back(2 + 2 * open.back());
        open.pop_back();
      }
    }
    return out;
  }
  // Swaps two different brackets until the string is unbalanced (a swap can
  // keep it balanced: (()()) -> ((())). "()" always breaks at its one swap.
  static void swap_to_unbalanced(std::vector<int64_t>& s, Generator& gen) {
    const int64_t n = static_cast<int64_t>(s.size());
    for (int tries = 0; tries < 1000; ++tries) {
      int64_t i = static_cast<int64_t>(gen.below(n)), j = static_cast<int64_t>(gen.below(n));
      if (s[i] == s[j]) continue;
      std::swap(s[i], s[j]);
      if (!balanced(s)) return;
      std::swap(s[i], s[j]);
    }
    std::swap(s.front(), s.back());  // ")...(" is never balanced
  }

  int64_t max_len_;
};

// ---- digits: which digit an 8x8 image of 17 grey levels shows ----

constexpr int64_t kLevels = 17, kDigitClasses = 10, kMaxSide = 64;

// One strict non-negative integer of at most `high`; false otherwise.
bool small_integer(std::string_view text, int64_t high, int64_t& out) {
  if (text.empty() || text.size() > 6) return false;
  out = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  return out <= high;
}

// Lines ended by CR LF or by CR alone, ended by LF.
std::string lf_line_ends(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r') {
      out += text[i];
    } else if (i + 1 == text.size() || text[i + 1] != '\n') {
      out += '\n';
    }
  }
  return out;
}

class DigitsTask : public LabelTask {
 public:
  DigitsTask(const TaskRow& row, const std::string& path, bool read, int64_t side)
      : LabelTask(row), path_(path.empty() ? default_digits_path() : path), side_(side) {
    if (read) load();
  }
  int64_t vocab() const override { return kLevels; }
  int64_t labels() const override { return kDigitClasses; }
  int64_t max_input() const override { return side_ * side_; }
  int64_t image_side() const override { return side_; }

  // A training image, shifted by up to one pixel each way (zeros come in at
  // the edge): 1,438 images are few for a ViT, and a digit moved by a pixel
  // is the same digit. Without it held-out accuracy stalled near 96%.
  Example sample(Generator& gen) const override {
    need_data();
    Example e = train_[gen.below(train_.size())];
    if (gen.below(2) == 0) return e;  // half the time as it is
    const int64_t dy = static_cast<int64_t>(gen.below(3)) - 1, dx = static_cast<int64_t>(gen.below(3)) - 1;
    std::vector<int64_t> moved(e.input.size(), 0);
    for (int64_t r = 0; r < side_; ++r)
      for (int64_t c = 0; c < side_; ++c) {
        int64_t from_r = r - dy, from_c = c - dx;
        if (from_r >= 0 && from_r < side_ && from_c >= 0 && from_c < side_)
          moved[r * side_ + c] = e.input[from_r * side_ + from_c];
      }
    e.input = std::move(moved);
    return e;
  }
  std::vector<Example> held_out(int64_t count, Generator&) const override {
    need_data();
    return std::vector<Example>(held_.begin(), held_.begin() + std::min<int64_t>(count, held_.size()));
  }
  // "N": held-out image N with its label; or side² comma-separated pixels, optionally then the label.
  Example parse_prompt(const std::string& prompt) const override {
    int64_t index = 0;
    if (prompt.find(',') == std::string::npos) {
      QKV_CHECK(!held_.empty(), "prompt '", printable(prompt),
                "': this model trained on its own --data, not loaded here: give the image's ", side_ * side_,
                " pixels separated by commas, or give that CSV with --data FILE");
      QKV_CHECK(small_integer(prompt, static_cast<int64_t>(held_.size()) - 1, index), "prompt '", printable(prompt),
                "': give a held-out image's number in [0, ", held_.size() - 1, "], or its ", side_ * side_,
                " pixels separated by commas");
      return held_[index];
    }
    return parse_row(prompt, "prompt", true);
  }
  std::string label_text(int64_t label) const override { return std::to_string(label); }
  std::string token_text(int64_t id) const override { return std::to_string(id); }
  std::string example_prompt(Generator&) const override { return "0"; }  // held-out image 0
  std::string describe(const ModelSpec& spec) const override {
    return cat("digits, ", spec.image, " x ", spec.image, " images in ", spec.patch, " x ", spec.patch, " patches, ",
               spec.classes, " classes, trained on ",
               spec.data.empty() ? "the bundled digits" : ("'" + printable(spec.data) + "'"));
  }
  // Another CSV than the one the model was described with: its images must be the model's size.
  void use_data(const std::string& path, const ModelSpec& spec) override {
    path_ = path.empty() ? default_digits_path() : path;
    train_.clear(), held_.clear();
    load();
    QKV_CHECK(side_ == spec.image, "--data file '", printable(path), "' holds images of ", side_, " x ", side_,
              "; this model reads ", spec.image, " x ", spec.image);
  }

 private:
  void need_data() const { QKV_CHECK(!train_.empty(), "the digits model has no images loaded (--data FILE)"); }
  // A CSV row: side² pixels in [0, 16], then (unless optional) the label in [0, 9].
  Example parse_row(std::string_view line, const std::string& where, bool label_optional) const {
    Example e;
    size_t at = 0;
    std::vector<int64_t> values;
    while (true) {
      size_t comma = line.find(',', at);
      std::string_view field = line.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
      while (!field.empty() && (field.back() == ' ' || field.back() == '\r')) field.remove_suffix(1);
      int64_t v = 0;
      QKV_CHECK(small_integer(field, 1 << 20, v), where, ", value ", values.size() + 1, ": '",
                printable(std::string(field), 20), "' is not a non-negative integer");
      values.push_back(v);
      QKV_CHECK(static_cast<int64_t>(values.size()) <= side_ * side_ + 1, where, " has more than ", side_ * side_ + 1,
                " values (", side_ * side_, " pixels and the label)");
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    const int64_t pixels = side_ * side_, n = static_cast<int64_t>(values.size());
    QKV_CHECK(n == pixels + 1 || (label_optional && n == pixels), where, " has ", n, " values; a row holds ", pixels,
              " pixels and the label");
    for (int64_t i = 0; i < pixels; ++i)
      QKV_CHECK(values[i] < kLevels, where, ", pixel ", i + 1, " is ", values[i], ", outside [0, ", kLevels - 1, "]");
    e.input.assign(values.begin(), values.begin() + pixels);
    if (n == pixels + 1) {
      QKV_CHECK(values[pixels] < kDigitClasses, where, ": label ", values[pixels], " is outside [0, ",
                kDigitClasses - 1, "]");
      e.answer = {values[pixels]};
    }
    return e;
  }
  void load() {
    const std::string file = printable(path_);
    std::string text = io::read_regular_file(path_, kMaxImageCsvBytes, "digits CSV file");
    if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // a UTF-8 byte-order mark, as spreadsheets write
    text = lf_line_ends(text);  // a spreadsheet's CR LF, or an old Mac's CR alone, as the log reader takes them
    QKV_CHECK(!text.empty(), file, ": empty (a digits CSV holds one image a line: its pixels, then the label)");
    // The first row's width fixes the image: side² pixels and the label.
    size_t first_end = text.find('\n');
    std::string_view first = std::string_view(text).substr(0, first_end);
    int64_t width = 1 + static_cast<int64_t>(std::count(first.begin(), first.end(), ','));
    int64_t side = 1;
    while ((side + 1) * (side + 1) <= width - 1 && side < kMaxSide) ++side;
    QKV_CHECK(width >= 5 && side * side == width - 1, file, ": line 1 has ", width,
              " values; a row is a square image's pixels (8 x 8 = 64 for digits, up to ", kMaxSide, " x ", kMaxSide,
              ") and then the label");
    side_ = side;
    int64_t line = 0;
    for (size_t at = 0; at < text.size();) {
      size_t end = text.find('\n', at);
      std::string_view row = std::string_view(text).substr(at, end == std::string::npos ? std::string::npos : end - at);
      at = end == std::string::npos ? text.size() : end + 1;
      ++line;
      if (row.empty() || row == "\r") continue;
      Example e = parse_row(row, cat(file, ": line ", line), false);
      // Every fifth image is held out: a fixed split, about the same share of each digit.
      (static_cast<int64_t>(train_.size() + held_.size()) % 5 == 4 ? held_ : train_).push_back(std::move(e));
    }
    QKV_CHECK(held_.size() >= 1, file, ": ", train_.size(),
              " images; qkv holds out every fifth, so it needs at least 5");
  }

  std::string path_;
  int64_t side_ = 8;
  std::vector<Example> train_, held_;
};

// ---- sessions: users moving between genres of items ----

// 200 items in 10 genres of 20; 1,000 users. Each user starts in a random
// genre; after an item it stays in the genre with probability 0.7 (and then
// takes the genre's next item with probability 0.6, any of the genre's items
// otherwise), moves to the next genre with 0.2 and to any genre with 0.1,
// taking any of that genre's items. Every item is about as popular as any
// other, so knowing the history is what helps.
constexpr int64_t kGenres = 10, kPerGenre = 20, kItems = kGenres * kPerGenre, kUsers = 1000;
constexpr uint64_t kSessionsSeed = 0x5e5510a5ULL;  // the users are the same in every run: the task's own seed

class SessionsTask : public LabelTask {
 public:
  SessionsTask(const TaskRow& row, int64_t max_len) : LabelTask(row), max_len_(max_len) {
    QKV_CHECK(max_len >= 4, "--max-len must be at least 4 for sessions (a history to learn from, one held out), got ",
              max_len);
    Generator gen(kSessionsSeed);
    for (int64_t u = 0; u < kUsers; ++u) {
      // 4 to max_len + 1 items: the model reads up to max_len of them, the last is held out.
      int64_t length = 4 + static_cast<int64_t>(gen.below(max_len - 2));
      std::vector<int64_t> h;
      int64_t genre = static_cast<int64_t>(gen.below(kGenres)), in_genre = static_cast<int64_t>(gen.below(kPerGenre));
      for (int64_t t = 0; t < length; ++t) {
        if (t > 0) {
          double r = gen.uniform();
          if (r < 0.7) {
            in_genre = gen.uniform() < 0.6 ? (in_genre + 1) % kPerGenre : static_cast<int64_t>(gen.below(kPerGenre));
          } else {
            genre = r < 0.9 ? (genre + 1) % kGenres : static_cast<int64_t>(gen.below(kGenres));
            in_genre = static_cast<int64_t>(gen.below(kPerGenre));
          }
        }
        h.push_back(1 + genre * kPerGenre + in_genre);
      }
      histories_.push_back(std::move(h));
    }
  }
  int64_t vocab() const override { return kItems + 1; }
  int64_t labels() const override { return kItems + 1; }
  int64_t max_input() const override { return max_len_; }
  bool ranks_items() const override { return true; }

  // A user's history without its held-out last item: the item after each position is learnt.
  Example sample(Generator& gen) const override {
    const std::vector<int64_t>& h = histories_[gen.below(histories_.size())];
    Example e;
    e.input.assign(h.begin(), h.end() - 2);
    e.answer.assign(h.begin() + 1, h.end() - 1);
    return e;
  }
  // Each user's last item, after the rest of the history.
  std::vector<Example> held_out(int64_t count, Generator&) const override {
    std::vector<Example> out;
    for (int64_t u = 0; u < std::min<int64_t>(count, kUsers); ++u) {
      const std::vector<int64_t>& h = histories_[u];
      out.push_back({std::vector<int64_t>(h.begin(), h.end() - 1), {h.back()}});
    }
    return out;
  }
  // A history: item ids separated by spaces or commas.
  Example parse_prompt(const std::string& prompt) const override {
    Example e;
    std::string word;
    auto flush = [&] {
      if (word.empty()) return;
      int64_t id = 0;
      QKV_CHECK(small_integer(word, kItems, id) && id >= 1, "prompt '", printable(prompt), "': '", printable(word),
                "' is not an item (1 to ", kItems, ")");
      e.input.push_back(id);
      word.clear();
    };
    for (char c : prompt) {
      if (c == ' ' || c == ',')
        flush();
      else
        word += c;
    }
    flush();
    QKV_CHECK(!e.input.empty(), "empty prompt (give a history of item ids, e.g. '12 13 14')");
    QKV_CHECK(static_cast<int64_t>(e.input.size()) <= max_len_, "the model reads histories of up to ", max_len_,
              " items, got ", e.input.size());
    return e;
  }
  std::string label_text(int64_t label) const override {
    return cat("item ", label, " (genre ", (label - 1) / kPerGenre, ")");
  }
  std::string token_text(int64_t id) const override { return id == 0 ? "_" : std::to_string(id); }
  std::string describe(const ModelSpec& spec) const override {
    return cat("sessions, histories of up to ", spec.max_len, " items");
  }
  std::vector<int64_t> popular_items() const override {
    std::vector<int64_t> count(kItems + 1, 0), order;
    for (const auto& h : histories_)
      for (size_t t = 0; t + 1 < h.size(); ++t) ++count[h[t]];  // the training part: all but the last item
    for (int64_t i = 1; i <= kItems; ++i) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return count[a] > count[b]; });
    return order;
  }

 private:
  int64_t max_len_;
  std::vector<std::vector<int64_t>> histories_;
};

}  // namespace

std::unique_ptr<Task> make_brackets_task(const TaskRow& row, const ModelSpec& spec, bool) {
  check_range("max-len", spec.max_len, 1, kMaxInputLength);
  return std::make_unique<BracketsTask>(row, spec.max_len);
}

std::unique_ptr<Task> make_digits_task(const TaskRow& row, const ModelSpec& spec, bool read_data) {
  check_range("max-len", spec.max_len, 1, kMaxInputLength);
  return std::make_unique<DigitsTask>(row, spec.data, read_data, spec.image > 0 ? spec.image : 8);
}

std::unique_ptr<Task> make_sessions_task(const TaskRow& row, const ModelSpec& spec, bool) {
  check_range("max-len", spec.max_len, 1, kMaxInputLength);
  return std::make_unique<SessionsTask>(row, spec.max_len);
}

std::string default_digits_path() { return data_dir() + "/digits.csv"; }

}  // namespace qkv::cli
