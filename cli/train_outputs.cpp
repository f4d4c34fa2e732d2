#include "train_outputs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common.h"
#include "distributed/dist.h"
#include "io/metadata.h"
#include "io/output.h"
#include "io/safetensors.h"

namespace qkv::cli {

namespace {

// A checkpoint's name without its .safetensors: its log and best model are named after it.
std::string stem_of(const std::string& checkpoint) {
  const std::string ending = ".safetensors";
  return checkpoint.size() > ending.size() &&
                 checkpoint.compare(checkpoint.size() - ending.size(), ending.size(), ending) == 0
             ? checkpoint.substr(0, checkpoint.size() - ending.size())
             : checkpoint;
}

// The first field of a log row: its step (CSV "12,..." or JSON '{"step":12,...'); -1 if none.
int64_t logged_step(const std::string& line) {
  size_t at = line.rfind("{\"step\":", 0) == 0 ? 8 : 0;
  int64_t step = 0;
  size_t end = line.find_first_of(",}", at);
  if (end == std::string::npos || !io::parse_integer(std::string_view(line).substr(at, end - at), step)) return -1;
  return step;
}

// On --resume, the log keeps only what led to the checkpoint: rows past its
// step (written before a crash or kill -9) and a cut-off last line (a full
// disk) go, so the resumed run's rows follow on without repeating steps.
// Returns the lines kept, and in `dropped` what goes. A file with any
// other line is not a qkv log: it is refused, never trimmed.
struct Dropped {
  int64_t past = 0;  // whole rows past the checkpoint's step
  bool cut = false;  // and a last row cut off mid-write
  bool any() const { return past > 0 || cut; }
  // "2 lines past the checkpoint's step 40 and a row cut off mid-write", each with its cause if `why`
  std::string said(int64_t step, bool why) const {
    std::string rows = past == 0 ? "" : cat(past, " line", past == 1 ? "" : "s", " past the checkpoint's step ", step);
    if (past > 0 && why) rows += " (written after it was saved)";
    std::string end = !cut  ? ""
                      : why ? "a row cut off mid-write (a full disk, or a kill while it wrote)"
                            : "a row cut off";
    return rows + (past > 0 && cut ? " and " : "") + end;
  }
};
std::string trimmed_log(const std::string& path, const std::string& who, int64_t step, Dropped& dropped) {
  std::string text = io::read_regular_file(path, int64_t{1} << 30, "log file");
  std::string kept;
  int64_t number = 0;
  dropped = {};
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    ++number;
    bool header = number == 1 && line.rfind("step,", 0) == 0;
    int64_t s = header ? 0 : logged_step(line);
    bool row_start =
        !line.empty() && (std::isdigit(static_cast<unsigned char>(line[0])) || line.rfind("{\"step\":", 0) == 0);
    if (end == std::string::npos) {  // no newline: a row cut off mid-write
      QKV_CHECK(row_start || header, who, ": line ", number,
                " is not a qkv log row; choose another --log (qkv rewrites a resumed run's log)");
      dropped.cut = true;
      break;
    }
    at = end + 1;
    QKV_CHECK(header || s >= 0, who, ": line ", number,
              " is not a qkv log row; choose another --log (qkv rewrites a resumed run's log)");
    if (header || s <= step)
      kept += line + "\n";
    else
      ++dropped.past;
  }
  return kept;
}

// Whether `path` is a regular file that is empty or begins as a qkv CSV log.
bool starts_as_log(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec))) return false;
  if (std::filesystem::file_size(path, ec) == 0 && !ec) return true;
  std::ifstream in(path, std::ios::binary);
  std::string head(23, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  return in && head == "step,loss,lr,grad_norm,";
}

// Whether two paths name one file (or, for a file not there yet, one path).
bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ec;
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec)) return std::filesystem::equivalent(a, b, ec);
  return std::filesystem::weakly_canonical(a, ec) == std::filesystem::weakly_canonical(b, ec);
}

// Returns whether `path` exists; a folder, link or device there is refused
// whatever the flags (--force would not help), `who` naming it ("--save F").
bool check_file_or_absent(const std::string& path, const std::string& who, const char* what) {
  std::error_code ec;
  auto status = std::filesystem::symlink_status(path, ec);
  QKV_CHECK(!std::filesystem::exists(status) || std::filesystem::is_regular_file(status), who, " is ",
            std::filesystem::is_directory(status) ? "a folder"
            : std::filesystem::is_symlink(status) ? "a symbolic link"
                                                  : "not a regular file",
            ": give ", what, " file name");
  return std::filesystem::exists(status);
}

// The checkpoint's path: --save, the resumed file, or the first free task[-N] (with its log and best free too).
std::string check_save(const cxxopts::ParseResult& args, const Run& run) {
  const bool force = args.count("force") > 0;
  std::string save =
      args.count("save") ? args["save"].as<std::string>()
      : run.resuming
          ? run.resume
          : fresh_stem(run.spec.task, {".safetensors", ".csv", ".best.safetensors"}, "--save") + ".safetensors";
  QKV_CHECK(!save.empty(), "--save needs a file name");
  if (dist::rank() != 0) return save;  // rank 0 alone saves and logs
  bool exists = check_file_or_absent(save, cat("--save ", printable(save)), "a checkpoint");
  bool continuing = run.resuming && same_file(save, run.resume);
  QKV_CHECK(!exists || continuing || force, printable(save),
            " already exists: choose another --save, continue its run "
            "with --resume ",
            printable(save), ", or replace it with --force");
  QKV_CHECK(!args.count("data") || !same_file(save, args["data"].as<std::string>()), "--save ", printable(save),
            " is this run's --data file: choose another --save");
  io::make_parent_folders(save, "--save");
  io::check_writable_target(save);
  return save;
}

// The same for the log, `who` naming it in errors ("--log F", or F for the log a checkpoint named). On
// --resume an existing log keeps only what led to the checkpoint (trimmed_log), and only if it is the
// run's own: the checkpoint records what its run's log held when it was saved, and any other file
// (another run's log, or this one changed since) would lose its rows past the step, or take this run's
// under its header. `named` (a log the checkpoint named, not the user): the digest is the file's own
// say-so, which a hostile checkpoint can forge (that of the empty text left by cutting every row of a
// user's CSV), so such a log is never rewritten: it must already be a qkv log's text, and end at the step.
void check_log(const cxxopts::ParseResult& args, const Run& run, const std::string& save, const std::string& log_path,
               const std::string& who, bool force, std::vector<std::string>& notes, bool named = false) {
  // The log is written to (and on --resume rewritten): never one of the run's other files.
  const std::string data = args.count("data") ? args["data"].as<std::string>() : "";
  for (const auto& [other, flag] :
       {std::pair{save, "--save"}, std::pair{run.resume, "--resume"}, std::pair{data, "--data"}})
    QKV_CHECK(!same_file(log_path, other), who, " is this run's ", flag, " file: choose another --log");
  const bool exists = check_file_or_absent(log_path, who, "a log");
  // Resuming continues its log; a fresh run never mixes itself into an old one.
  QKV_CHECK(!exists || run.resuming || force, who, " already exists: choose another file, or replace it with --force");
  io::make_parent_folders(log_path, "--log");
  // A new log is created in its folder (with --force, a temporary renamed into place; io::GrowingFile).
  io::check_writable_target(log_path, /*probe=*/!(run.resuming && exists));
  if (!run.resuming || !exists) return;
  QKV_CHECK(::access(log_path.c_str(), W_OK) == 0, who, " cannot be written: ", std::strerror(errno));
  Dropped dropped;
  const std::string kept = trimmed_log(log_path, who, run.resumed_step, dropped);
  if (named) {
    const bool shaped = kept.rfind(train::is_csv_log(log_path) ? "step,loss,lr,grad_norm," : "{\"step\":", 0) == 0;
    QKV_CHECK(shaped, who, " does not begin as a qkv log does");
    QKV_CHECK(!dropped.any(), who, " holds ", dropped.said(run.resumed_step, false), " (give --log ",
              printable(log_path), " to cut ", dropped.past + dropped.cut == 1 ? "it" : "them", " and continue it)");
  }
  auto digest = run.resumed.metadata.find("qkv.log.digest");
  QKV_CHECK(force || digest != run.resumed.metadata.end(), who, ": ", printable(run.resume),
            " records no digest of its log (saved by qkv before 2026-11-25): give --log a new file, or continue "
            "this one anyway with --force");
  QKV_CHECK(force || digest->second == train::log_digest(kept), who, " is not the log of the run that saved ",
            printable(run.resume), " (or it changed since): give --log a new file, or continue it anyway with --force");
  if (dropped.any()) {
    io::write_file(log_path, kept);
    notes.push_back(cat(printable(log_path), ": dropped ", dropped.said(run.resumed_step, true)));
  }
}

// The log a run writes: --log; a new run's NAME.csv beside its checkpoint; or, resuming into its own
// checkpoint without --log, the log that checkpoint's run wrote (log_beside: validated before it is
// followed), if it is that run's own (check_log). Otherwise none, with a note: a branch saved elsewhere,
// or a log that is not there, writable, or the run's own, is left alone.
std::string log_file(const cxxopts::ParseResult& args, const Run& run, const std::string& save, bool& replace,
                     std::vector<std::string>& notes) {
  replace = args.count("force") > 0;
  if (args.count("no-log")) return "";
  if (args.count("log")) {
    const std::string path = args["log"].as<std::string>();
    QKV_CHECK(!path.empty(), "--log needs a file name");
    if (dist::rank() == 0)
      check_log(args, run, save, path, cat("--log ", printable(path)), args.count("force") > 0, notes);
    return path;
  }
  if (!run.resuming) {
    const std::string path = io::name_beside(stem_of(save), ".csv");
    if (dist::rank() != 0) return path;
    // A qkv log (or an empty file) there with no checkpoint beside it is what a run that failed before
    // saving left: replaced.
    const bool leftover = !std::filesystem::exists(save) && starts_as_log(path);
    replace = replace || leftover;
    if (leftover)
      notes.push_back(cat("note: ", printable(path), " is the log of a run that saved no checkpoint: replaced"));
    check_log(args, run, save, path,
              cat("the log ", printable(path), " (beside the checkpoint; or give --log FILE or --no-log)"),
              args.count("force") > 0 || leftover, notes);
    return path;
  }
  if (dist::rank() != 0) return "";
  std::string why, path = log_beside(run.resume, run.resumed.metadata, why);
  if (path.empty()) {
    if (run.resumed.metadata.count("qkv.log"))
      notes.push_back(cat("note: ", why, ": it is not continued (give --log FILE)"));
    return "";
  }
  try {
    QKV_CHECK(same_file(save, run.resume), "this run saves into ", printable(save), ", not ", printable(run.resume),
              " (a branch)");
    check_log(args, run, save, path, printable(path), /*force=*/false, notes, /*named=*/true);
    return path;
  } catch (const Error& e) {  // the reason may already say which --log to give
    const bool advised = std::string(e.what()).find("--log") != std::string::npos;
    notes.push_back(cat("note: the run's log is not continued: ", e.what(), advised ? "" : " (give --log FILE)"));
    return "";
  }
}

// The best evaluation's model: NAME.best.safetensors unless --no-best. Resuming into the run's own
// checkpoint continues its best file; any other file there is another run's (replaced only with --force).
std::string check_best(const cxxopts::ParseResult& args, const Run& run, const std::string& save) {
  if (args.count("no-best") || dist::rank() != 0) return "";
  const std::string best = io::name_beside(stem_of(save), ".best.safetensors");
  const std::string who = cat("the best model's file ", printable(best));
  const bool exists = check_file_or_absent(best, who, "a checkpoint");
  const bool continuing = run.resuming && same_file(save, run.resume);
  QKV_CHECK(!exists || continuing || args.count("force"), who,
            " already exists (another run's?): choose another --save, give --no-best, or replace it with --force");
  io::check_writable_target(best);
  return best;
}

}  // namespace

RunOutputs check_outputs(const cxxopts::ParseResult& args, const Run& run) {
  RunOutputs out;
  out.save = check_save(args, run);
  out.log = log_file(args, run, out.save, out.replace_log, out.notes);
  out.best = check_best(args, run, out.save);
  out.continuing = run.resuming && same_file(out.save, run.resume);
  QKV_CHECK(out.best.empty() || !same_file(out.best, out.log), "--log ", printable(out.log),
            " is where the best model goes: choose another --log");
  return out;
}

SaveTarget::SaveTarget(std::string path, bool force, bool ours_now) : path_(std::move(path)), force_(force) {
  if (ours_now) saved();
}

void SaveTarget::saved() {
  struct stat st;
  known_ = ::stat(path_.c_str(), &st) == 0;
  device_ = known_ ? st.st_dev : 0, inode_ = known_ ? st.st_ino : 0;
}

io::Existing SaveTarget::next() const {
  if (force_) return io::Existing::Replace;
  struct stat st;
  const bool ours = known_ && ::stat(path_.c_str(), &st) == 0 && st.st_dev == device_ && st.st_ino == inode_;
  return ours ? io::Existing::Replace : io::Existing::Keep;
}

BestModel::BestModel(std::string path, bool resuming) : path_(std::move(path)) {
  if (path_.empty() || !resuming || !std::filesystem::exists(path_)) return;
  // The best so far, as the run's best file records it (a file that records none is replaced at the next evaluation).
  try {
    const auto meta = io::load_safetensors(path_).metadata;
    double metric = io::parse_number(meta.at("qkv.best.metric"), "qkv.best.metric");
    int64_t step = -1;
    if (std::isfinite(metric) && io::parse_integer(meta.at("qkv.best.step"), step) && step >= 0)
      metric_ = metric, step_ = step;
  } catch (const std::exception&) {
  }
}

void BestModel::offer(const train::Evaluation& e, int64_t step,
                      const std::function<void(const std::map<std::string, std::string>&)>& save) {
  if (path_.empty() || !std::isfinite(e.metric)) return;
  if (kept() && (e.higher_is_better ? e.metric <= metric_ : e.metric >= metric_)) return;
  save({{"qkv.best.metric", io::exact_number(e.metric)}, {"qkv.best.step", std::to_string(step)}});
  metric_ = e.metric, step_ = step;
}

}  // namespace qkv::cli
