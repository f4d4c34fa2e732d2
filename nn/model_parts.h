// What the models in nn/ build themselves from, beside the layers: size
// checks and the token-plus-position input. Internal to nn/'s model files.
#pragma once

#include <memory>

#include "nn/layers.h"
#include "nn/transformer.h"

namespace qkv::nn {

/// Throws "<model>: vocab V, context T, ... must all be positive" or
/// "width W is not divisible by heads H".
void check_model_sizes(const char* model, int64_t vocab, int64_t context, int64_t width, int64_t heads);

/// tok(ids) + pos(0..T-1) (tok(ids) alone without a table), after checking
/// ids int64 [B, T] with T <= context (errors name `who`).
Tensor token_and_position(const char* who, const Embedding& tok, const Embedding* pos, int64_t context,
                          const Tensor& ids);

/// A learned table of `positions` rows where the parts' position encoding keeps one (else null).
std::shared_ptr<Embedding> position_table(const BlockParts& parts, int64_t positions, int64_t width, Generator* gen);

/// `layers` blocks of one configuration, each drawing its weights from `gen`
/// in turn: what every model stacks.
std::shared_ptr<ModuleList<TransformerBlock>> block_stack(int64_t layers, const BlockConfig& block, Generator* gen);

}  // namespace qkv::nn
