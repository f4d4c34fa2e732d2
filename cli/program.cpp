// qkv: train, evaluate, sample and inspect small attention models. The
// program itself; main.cpp calls it (and the tests' stand-in build calls it
// with a stand-in GPU installed).
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <cxxopts.hpp>

#include "autograd/cpu.h"
#include "autograd/error.h"
#include "autograd/simd.h"
#include "commands.h"
#include "common.h"
#include "distributed/dist.h"
#include "io/output.h"
#include "nn/checkpoint.h"
#include "nn/plugin.h"

namespace {
// The commands, once: the usage text, the dispatch and the unknown-command
// message are all read from this table.
struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;
};
const Command kCommands[] = {
    {"train", qkv::cli::train, "train a model on a task (reverse by default) and save a checkpoint"},
    {"eval", qkv::cli::eval, "exact-match accuracy (tasks) or held-out loss (text) of a checkpoint"},
    {"sample", qkv::cli::sample, "answer a prompt, or continue text, with a checkpoint"},
    {"attention", qkv::cli::attention, "draw every layer's and head's attention for a prompt (SVG)"},
    {"gradcheck", qkv::cli::gradcheck, "compare every parameter's gradient with finite differences"},
    {"grads", qkv::cli::grads, "a checkpoint's gradient norms (per head) on one input, and a safetensors file of them"},
    {"explore", qkv::cli::explore,
     "one offline HTML page to study a model on a prompt: attention with dL/dP, the graph, the curves"},
    {"graph", qkv::cli::graph, "draw the autograd graph of one forward and backward (Graphviz DOT and SVG)"},
    {"info", qkv::cli::info, "what a checkpoint holds: model, task, training settings, step (--system: this machine)"},
    {"plot", qkv::cli::plot, "a --log file as an HTML page of charts"},
    {"export", qkv::cli::export_model, "a gpt checkpoint as a Hugging Face GPT-2 folder (--format hf)"},
    {"tokenize", qkv::cli::tokenize,
     "token ids of a text with a GPT-2-style BPE tokenizer folder, or (--decode) the text of ids"},
    {"bench", qkv::cli::bench, "time full training steps of a standard configuration"},
};

std::string usage() {
  std::string text =
      "usage: qkv <command> [options]     (qkv help <command>, or qkv <command> --help, for its options; qkv "
      "--version)\n\ncommands:\n";
  const std::string tail =
      "\nany command: --plugin FILE loads the parts of a shared library built with QKV_PLUGIN (nn/plugin.h)\n";
  for (const Command& c : kCommands) {
    std::string name = c.name;
    text += "  " + name + std::string(12 - name.size(), ' ') + c.summary + "\n";
  }
  return text + tail;
}

// cxxopts names the value it could not parse (‘abc’), not its flag: find the
// flag in argv (--lr abc, or --lr=abc) and name it first.
std::string with_flag(const std::string& message, int argc, char** argv) {
  const std::string open = "\u2018", close = "\u2019";
  size_t a = message.find(open), b = message.find(close);
  if (a == std::string::npos || b == std::string::npos || b < a) return message;
  std::string value = message.substr(a + open.size(), b - a - open.size());
  for (int i = 2; i < argc; ++i) {
    std::string word = argv[i];
    if (word == value && i > 2 && argv[i - 1][0] == '-') return std::string(argv[i - 1]) + ": " + message;
    size_t eq = word.find('=');
    if (word.rfind("--", 0) == 0 && eq != std::string::npos && word.substr(eq + 1) == value)
      return word.substr(0, eq) + ": " + message;
  }
  return message;
}

std::string command_names() {
  std::string names;
  for (const Command& c : kCommands) names += (names.empty() ? "" : ", ") + std::string(c.name);
  return names;
}

// SIGINT, SIGTERM or SIGHUP during a command that writes files (all but train, which stops at the end of
// its step and saves): its temporaries go, the previous result stays whole, and the signal ends it.
void on_interrupt(int sig) {
  qkv::io::remove_temporaries_now();
  static const char kMessage[] = "\nqkv: interrupted: nothing written, the previous result left whole\n";
  ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  (void)ignored;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// --plugin FILE (any command, any number): each loaded before the command reads its flags, so that the
// parts it registers are values of --norm and the like, and of the checkpoints that use them. Removed
// from argv; returns the count left. Nothing else loads a library: only a file named here.
int load_plugins(int argc, char** argv) {
  int kept = 2;  // the program and the command
  for (int i = 2; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--plugin" || word.rfind("--plugin=", 0) == 0) {
      QKV_CHECK(word != "--plugin" || i + 1 < argc, "--plugin needs a file name");
      const std::string file = word == "--plugin" ? argv[++i] : word.substr(9);
      if (!std::getenv("QKV_PARSE_ONLY")) qkv::nn::load_plugin(file);  // a docs check parses flags only
      continue;
    }
    argv[kept++] = argv[i];
  }
  argv[kept] = nullptr;
  return kept;
}

// Runs one command; an error on one rank of several ends the whole job.
int run(const std::string& command, int argc, char** argv) {
  const std::string name = qkv::printable(command, 40);  // argv[1] is the user's: shown escaped
  const int ranks = qkv::dist::world_size();
  auto failed = [&](int code) {
    qkv::io::remove_folders_made();         // made for outputs this run will not write
    if (ranks > 1) qkv::dist::abort(code);  // the other ranks would wait for this one forever
    return code;
  };
  const std::string who = ranks > 1 ? " (rank " + std::to_string(qkv::dist::rank()) + ")" : "";
  // MPI starts only for train and bench; any other command under a launcher
  // would run N times side by side: each rank refuses, rank 0 says why.
  if (command != "train" && command != "bench" && qkv::dist::launched_ranks() > 1) {
    if (qkv::dist::launched_rank() == 0)
      std::fprintf(stderr,
                   "qkv %s: runs in one process: start it without mpirun (only train and bench run on several)\n",
                   name.c_str());
    return 2;
  }
  if (command != "train")
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_interrupt);
  qkv::cli::start_pool_without_signals();
  try {
    qkv::simd::active_isa();  // a bad QKV_SIMD is a one-line error before any work
    argc = load_plugins(argc, argv);
    for (const Command& c : kCommands)
      if (command == c.name) return c.run(argc - 1, argv + 1);
    std::fprintf(stderr, "qkv: unknown command '%s' (%s; see qkv --help)\n", name.c_str(), command_names().c_str());
    return 2;
  } catch (const qkv::cli::ParsedOnly&) {
    return 0;  // QKV_PARSE_ONLY: the flags parsed
  } catch (const cxxopts::exceptions::exception& e) {
    // A usage error (exit 2, as getopt's programs do): an unknown flag, a
    // missing or malformed value. cxxopts quotes the user's own words: they
    // pass through the one printer too, its curly quotes made plain.
    std::string message = with_flag(e.what(), argc, argv);
    for (const std::string quote : {"\u2018", "\u2019"})
      for (size_t at; (at = message.find(quote)) != std::string::npos;) message.replace(at, quote.size(), "'");
    std::fprintf(stderr, "qkv %s%s: error: %s (see qkv %s --help)\n", name.c_str(), who.c_str(),
                 qkv::one_line(message).c_str(), name.c_str());
    return failed(2);
  } catch (const qkv::nn::NonFiniteParameter& e) {  // the library says what is wrong; the program, what to do
    std::fprintf(stderr, "qkv %s%s: error: %s\n", name.c_str(), who.c_str(),
                 qkv::one_line(std::string(e.what()) + " (train again, with a lower --lr)").c_str());
    return failed(1);
  } catch (const qkv::Error& e) {
    std::fprintf(stderr, "qkv %s%s: error: %s\n", name.c_str(), who.c_str(), qkv::one_line(e.what()).c_str());
    return failed(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv %s%s: unexpected error: %s\n", name.c_str(), who.c_str(),
                 qkv::one_line(e.what()).c_str());
    return failed(1);
  }
}
}  // namespace

int qkv::cli::program(int argc, char** argv) {
  // A file-size limit (ulimit -f, set by batch schedulers) is an ordinary write error that names the file,
  // not SIGXFSZ's silent death (exit 153) with the temporaries left beside their targets.
  std::signal(SIGXFSZ, SIG_IGN);
  // OpenMP threads spin for a while before they sleep (libgomp: 300,000
  // turns), which made a busy machine crawl: with one other busy process,
  // `train` ran 7-20x slower than with --threads 1. Sleeping at once
  // (passive) costs a futex wake-up per parallel loop: token-by-token
  // sampling ran 5x slower. A short spin (about 30-100 us) keeps both fast,
  // and --threads 0 starts only as many threads as there are idle cores.
  // libgomp reads these once, when it loads: set and start again, once
  // only, and never over the user's own choice.
  const bool set_spin =
      !std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && setenv("GOMP_SPINCOUNT", "30000", 1) == 0;
  bool restart = set_spin, set_core = false;
  // OpenBLAS picks its kernels from the CPU models it knows, and runs SSE3
  // kernels on a newer CPU (4x slower on a 2023 Xeon). It reads
  // OPENBLAS_CORETYPE when it loads too: name the kernels the CPU's feature
  // flags allow, and start again (autograd/cpu.h).
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    std::string core = qkv::cpu::blas_core(), better = qkv::cpu::better_blas_core(core, qkv::cpu::features());
    if (!better.empty() && setenv("OPENBLAS_CORETYPE", better.c_str(), 1) == 0 &&
        setenv(qkv::cpu::kReplacedCoreVariable, core.c_str(), 1) == 0)
      restart = set_core = true;
  }
  if (restart) {
    execv("/proc/self/exe", argv);
    // Still here: the restart failed (under qemu-user the kernel cannot start the guest binary itself: ENOEXEC).
    // This process goes on with the choices it loaded with, and says none of the restart's.
    if (set_spin) unsetenv("GOMP_SPINCOUNT");
    if (set_core) unsetenv("OPENBLAS_CORETYPE"), unsetenv(qkv::cpu::kReplacedCoreVariable);
  }
  if (argc >= 2 && !std::strcmp(argv[1], "--version")) {
    std::printf("qkv %s (%s MPI)\n", QKV_VERSION, qkv::dist::built_with_mpi() ? "with" : "without");
    return 0;
  }
  if (argc >= 3 && !std::strcmp(argv[1], "help") && std::strcmp(argv[2], "help")) {  // qkv help CMD: CMD --help
    if (argc > 3) {
      std::fprintf(stderr, "qkv help: one command at a time, got '%s' after '%s'\n",
                   qkv::printable(argv[3], 40).c_str(), qkv::printable(argv[2], 40).c_str());
      return 2;
    }
    char flag[] = "--help";
    char* help[] = {argv[0], argv[2], flag, nullptr};
    return run(argv[2], 3, help);
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(usage().c_str(), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  // Under mpirun, train and bench run data parallel (distributed/dist.h).
  if (command == "train" || command == "bench") qkv::dist::init(&argc, &argv);
  int code = run(command, argc, argv);
  // A full disk or a closed pipe must not end in exit 0.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "qkv %s: cannot write the output: %s\n", command.c_str(), std::strerror(errno));
    code = code == 0 ? 1 : code;
  }
  qkv::dist::finalize();
  return code;
}
