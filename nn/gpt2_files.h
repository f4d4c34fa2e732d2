// GPT-2's own files, read and written as they are: a Hugging Face folder
// (config.json and model.safetensors, float32, float16 or bfloat16) becomes
// qkv's GPT, and a GPT becomes such a folder. GPT-2 is qkv's GPT (pre-LN,
// learned positions, GELU's tanh form, LayerNorm's eps 1e-5, the head tied to
// the token embedding) with different names and layouts: its Conv1D weights
// are stored [in, out], and one c_attn holds the query, key and value
// projections side by side. The tokenizer is the program's (cli/bpe.h).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "io/safetensors.h"
#include "nn/models.h"

namespace qkv::nn {

/// The model a folder's config.json describes, validated: GPT-2 (model_type
/// "gpt2" where given), sizes positive and within qkv's bounds, and nothing
/// qkv's GPT does not compute (another activation, an inner width other
/// than 4·n_embd, layer-scaled or unscaled attention, cross-attention, an
/// untied head, another LayerNorm eps). One-line errors name the file and field.
GPTConfig read_gpt2_config(const std::string& folder);

/// Whether `path` is a folder (after links): what the program reads as a
/// GPT-2 folder rather than as one of its own checkpoint files (a file);
/// what the folder holds is checked as it is read.
bool is_gpt2_folder(const std::string& path);

/// The folder's weights file, checked to exist: model.safetensors. A folder
/// with only pytorch_model.bin (a pickle, which can run code when loaded)
/// or another format is a one-line error saying to fetch the safetensors file.
std::string gpt2_weights_file(const std::string& folder);

/// Checks the weights file's header against `config` before reading any of
/// its data: every tensor present with its shape, in one naming style (the
/// hub's bare "h.0.attn.c_attn.weight" or GPT2LMHeadModel.state_dict()'s
/// "transformer.h.0..." with "lm_head.weight"), nothing unknown but GPT-2's
/// buffers (attn.bias, attn.masked_bias), a float dtype. Then builds the
/// GPT and reads the tensors into it one at a time, each finite (a NaN or
/// infinity throws NonFiniteParameter naming the tensor) and lm_head.weight,
/// where present, equal to wte.weight.
std::unique_ptr<GPT> load_gpt2(const std::string& folder, const GPTConfig& config);
/// The same into a GPT built already (a fine-tune's, which a program built
/// and sized first), whose sizes must be the folder's config.json's.
void load_gpt2_into(GPT& model, const std::string& folder);

/// Whether `path` begins as an llm.c GPT-2 checkpoint does (its magic number,
/// 20240326): what the program reads as one rather than as safetensors.
bool is_llmc_checkpoint(const std::string& path);

/// llm.c's GPT-2 checkpoint (train_gpt2.py's gpt2_124M.bin): a header of 256
/// int32 (magic 20240326; version 3, float32, or 5, bfloat16; max_seq_len,
/// vocab_size, num_layers, num_heads, channels, padded_vocab_size), then
/// every parameter in llm.c's order (wte padded to padded_vocab_size rows,
/// wpe, then per kind every layer's: ln_1, c_attn [3C, C], c_proj, ln_2,
/// c_fc, mlp.c_proj, each weight then bias; ln_f), nn.Linear's [out, in].
/// The header is bounded and the file's size must be exactly what it
/// describes before anything is allocated; each tensor is then read and
/// placed as for a Hugging Face folder (finite, or NonFiniteParameter).
/// The padding rows of wte are not read into the model.
std::unique_ptr<GPT> load_llmc(const std::string& path);
/// Only the header's sizes, checked as load_llmc checks them, with no weight read.
GPTConfig read_llmc_config(const std::string& path);

/// A GPT's tensors under GPT-2's names and in its layouts (the
/// state_dict naming, without the tied lm_head.weight): `of` gives, for each
/// of qkv's parameters, the tensor to write (the parameter itself, or its
/// gradient; an undefined one, a gradient that reached nothing, such as the
/// keys' bias's, is written as zeros), float32 or float64. `bare` drops the "transformer."
/// prefix, as the hub's files name them.
io::NamedTensors gpt2_tensors(const GPT& model,
                              const std::function<Tensor(const std::string& name, const Tensor& parameter)>& of,
                              bool bare = false);

/// The config.json of a GPT in GPT-2's words, as Hugging Face's GPT2Config
/// writes it.
std::string gpt2_config_json(const GPTConfig& config);

/// Writes a Hugging Face GPT-2 folder (config.json, model.safetensors in
/// float32 with the "format": "pt" metadata transformers asks for) that
/// GPT2LMHeadModel.from_pretrained reads; the folder is created if missing.
/// Each file is written atomically. The tokenizer's files are the caller's.
void save_gpt2(const std::string& folder, const GPT& model);

}  // namespace qkv::nn
