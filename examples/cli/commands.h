// The qkv program's commands; each returns the process exit code.
#pragma once

namespace qkv::cli {

int train(int argc, char** argv);
int eval(int argc, char** argv);
int sample(int argc, char** argv);
int attention(int argc, char** argv);
int gradcheck(int argc, char** argv);
int grads(int argc, char** argv);
int bench(int argc, char** argv);

}  // namespace qkv::cli
