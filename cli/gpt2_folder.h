// A Hugging Face GPT-2 folder (or an llm.c GPT-2 checkpoint) as the program
// reads it wherever a checkpoint is accepted: its model is the gpt kind (nn/gpt2_files.h reads the weights)
// on the text task, whose tokens are the folder's own BPE tokenizer (bpe.h).
#pragma once

#include <memory>
#include <string>

#include "model_spec.h"
#include "runner.h"

namespace qkv::cli {

/// The spec of the model a GPT-2 folder holds, from its config.json (checked
/// and bounded): a gpt reading the text task in the folder's tokens.
ModelSpec gpt2_folder_spec(const std::string& folder);

/// The folder's model, loaded and in eval mode: its size checked against
/// this machine's memory before the weights are read, the tokenizer read
/// from the folder. A folder without config.json is refused in one line.
std::unique_ptr<Runner> load_gpt2_folder(const std::string& folder);

/// `qkv info` of a GPT-2 folder: the model, its tokenizer and its files.
void print_gpt2_folder_info(const std::string& folder);

/// The same for an llm.c checkpoint (nn::load_llmc), whose tokens are
/// GPT-2's: the tokenizer is read from the folder the file lies in
/// (vocab.json and merges.txt, or tokenizer.json: llm.c's own
/// gpt2_tokenizer.bin holds no merges), with that folder's rules.
ModelSpec llmc_spec(const std::string& path);
std::unique_ptr<Runner> load_llmc_file(const std::string& path);
void print_llmc_info(const std::string& path);

}  // namespace qkv::cli
