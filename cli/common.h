// What the program's commands share: flag parsing, loading a checkpoint's
// model, the options every command takes the same way, and progress lines.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "io/output.h"
#include "runner.h"

namespace qkv::cli {

/// Parses argv (adding --help); prints the help and returns false when it was asked for.
bool parse(cxxopts::Options& options, int argc, char** argv, cxxopts::ParseResult& args);

/// Thrown once a command's flags have parsed when QKV_PARSE_ONLY is set:
/// the program then exits 0 without doing the work. The suite runs every
/// command the README and docs/ show this way, so they cannot go stale.
struct ParsedOnly {};
/// Throws ParsedOnly when QKV_PARSE_ONLY is set (after a command's own parsing).
void stop_if_parse_only();
/// The value of a string flag that must be given.
std::string required(const cxxopts::ParseResult& args, const char* name);
/// --data for a command that reads a digits prompt: a held-out image's number picks from this CSV (a model
/// trained on a CSV of its own records only its path, which qkv never opens on a file's say-so). Refused
/// for any other model.
inline constexpr const char* kDigitsDataHelp =
    "digits: the CSV a held-out image's number picks from (a model trained on its own --data)";
void use_digits_data(Runner& runner, const cxxopts::ParseResult& args, const std::string& path);
/// --data for a command that evaluates a model on its data (eval, gradcheck): a text or digits checkpoint
/// reads the file --data names, or the bundled one if it trained on that: never a path taken from the
/// checkpoint. Other models take no --data.
void use_data_flag(Runner& runner, const cxxopts::ParseResult& args, const std::string& path);
/// What a command's commit does with a target that appeared after its checks: with --force it is
/// replaced, as asked; without, it stays and the result is kept beside it (io::Existing).
inline io::Existing existing_for(const cxxopts::ParseResult& args) {
  return args.count("force") ? io::Existing::Replace : io::Existing::Keep;
}
/// --attention's value parsed; its error names the flag.
nn::AttentionKind attention_flag(const std::string& text);
/// One flag per row of nn::part_choices() (--norm, --mlp), in `group`, and the parts they name (unknown
/// names throw, and so does any of them where no fresh model is built: `fresh_model` false).
void add_part_options(cxxopts::Options& options, const std::string& group);
nn::BlockParts part_flags(const cxxopts::ParseResult& args, bool fresh_model = true);
/// A checkpoint's model with its parameters loaded, in eval mode (optimizer
/// state ignored); `metadata`, when given, receives the file's metadata.
std::unique_ptr<Runner> load_runner(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);
/// The loss of one input: for a text model the next-byte cross-entropy of
/// `text` (2 bytes or more), for a task model the cross-entropy of the
/// correct answer to the input `text`. `what` receives a description.
Tensor input_loss(Runner& runner, const std::string& text, std::string* what = nullptr);

/// On a terminal, `line` on stderr in place of the previous one: a long
/// command's progress (bench's steps, eval's examples); "" erases it.
/// Nothing when stderr is a file or a pipe, or on ranks past the first.
void progress_line(const std::string& line);

/// The first free name among base + ending, base-2 + ending, ... (a new
/// run's checkpoint, a new page); `flag` names the option that picks one.
std::string fresh_name(const std::string& base, const std::string& ending, const char* flag);
/// The first of base, base-2, ... with which every one of `endings` names no file yet.
std::string fresh_stem(const std::string& base, const std::vector<std::string>& endings, const char* flag);

/// The run's log by the name train recorded in a checkpoint's metadata
/// (qkv.log), validated before anything follows it: a name with no folder in
/// it, of a regular file beside the checkpoint, not a link. Returns its path,
/// or "" with `why` saying why not.
std::string log_beside(const std::string& checkpoint, const std::map<std::string, std::string>& metadata,
                       std::string& why);

/// --threads (a string flag, parsed strictly): n > 0 threads, or 0 for as many
/// as there are idle cores now (all of them on a quiet machine; fewer beside a
/// busy process); more than the cores with a warning. Returns the count the
/// OpenMP runtime really gives (its thread limit may be lower: a note says so).
int set_threads_option(const cxxopts::ParseResult& args);
/// Starts the OpenMP pool's threads with SIGINT, SIGTERM and SIGHUP blocked, so an interrupt's handler
/// runs on the main thread (which then stops), never beside it while it goes on writing files.
void start_pool_without_signals();
/// The same for a count the program chose (bench --profile's).
int set_thread_count(int64_t n);

/// --device: the CPU, or a CUDA device this build and machine have; any
/// other is a one-line error that says what is missing (CUDA in this build,
/// a GPU, that GPU).
Device set_device_option(const std::string& name);
inline constexpr const char* kDeviceHelp = "cpu, cuda or cuda:N (CUDA builds; see docs/devices.md)";

}  // namespace qkv::cli
