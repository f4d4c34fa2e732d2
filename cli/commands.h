// The qkv program's commands, one file each (the table of them is
// program.cpp's); each returns the process exit code.
#pragma once

namespace qkv::cli {

/// The whole program: the command in argv[1] with its flags; returns the exit status.
int program(int argc, char** argv);

int train(int argc, char** argv);         // train.cpp: a model on a task, to a checkpoint
int eval(int argc, char** argv);          // eval.cpp: a checkpoint's held-out score
int sample(int argc, char** argv);        // sample.cpp: a checkpoint's answer to a prompt
int attention(int argc, char** argv);     // attention.cpp: every map and head as SVG and a page
int gradcheck(int argc, char** argv);     // gradcheck.cpp: every gradient against central differences
int grads(int argc, char** argv);         // grads.cpp: a checkpoint's gradients on one input
int graph(int argc, char** argv);         // graph.cpp: the autograd graph of one forward and backward, as DOT and SVG
int explore(int argc, char** argv);       // explore.cpp: one page to study a trained model on a prompt
int info(int argc, char** argv);          // info.cpp: what a checkpoint holds, or (--system) this machine
int plot(int argc, char** argv);          // plot.cpp: --log files as HTML charts
int export_model(int argc, char** argv);  // export.cpp: a checkpoint's model as a Hugging Face GPT-2 folder
int tokenize(int argc, char** argv);      // tokenize.cpp: a BPE tokenizer folder's ids for a text, or the text of ids
int bench(int argc, char** argv);         // bench.cpp: tokens/s of training steps on the CPU or a device

}  // namespace qkv::cli
