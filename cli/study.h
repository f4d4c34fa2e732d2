// A prompt's attention maps, to draw them (qkv attention) or to study them
// with their gradients (qkv explore): the library's study (study/study.h)
// of a checkpoint's model on a prompt, its maps labelled as the model reads
// its tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner.h"
#include "study/study.h"

namespace qkv::cli {

using study::AttentionMap;
using study::ScoreInputs;
using study::Study;
using study::token_attribution;

/// The study's loss with token t's embedding scaled by `scale` (no graph):
/// what --check differentiates to check token_attribution.
double loss_with_token_scaled(Runner& runner, const std::string& prompt, int64_t t, double scale);

/// Every attention map of the model on a prompt (for a task model: the
/// prompt and the model's own answer). A GPT gives one per layer; a
/// Seq2Seq the encoder's self-attention, the decoder's self-attention and
/// its cross-attention to the source, per layer.
std::vector<AttentionMap> attention_maps(Runner& runner, const std::string& prompt);

/// The prompt's loss (Task::prompt_example) and every attention map of its
/// forward (study::record, then labelled by the model's driver), ready for
/// loss.backward().
Study study(Runner& runner, const std::string& prompt);

/// The window of a model's window:W attention, 0 for full attention.
int64_t attention_window(const ModelSpec& spec);

}  // namespace qkv::cli
