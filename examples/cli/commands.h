// The qkv program's commands; each returns the process exit code.
#pragma once

namespace qkv::cli {

/// --threads: n > 0 threads, or 0 for as many as there are idle cores now
/// (all of them on a quiet machine; fewer beside a busy process).
void set_threads_option(int n);

int train(int argc, char** argv);
int eval(int argc, char** argv);
int sample(int argc, char** argv);
int attention(int argc, char** argv);
int gradcheck(int argc, char** argv);
int grads(int argc, char** argv);
int info(int argc, char** argv);
/// qkv plot (examples/cli/report.cpp): a --log file as HTML charts.
int plot(int argc, char** argv);
int bench(int argc, char** argv);

}  // namespace qkv::cli
