// What qkv's pictures call the ops the engine records: the page's graph
// view and qkv graph's DOT use the same names ("scale" for mul_scalar,
// "causal mask" or "padding mask" for masked_fill).
#pragma once

#include <string>

namespace qkv::study {

/// The readable name of engine op `op` recorded in module `scope`;
/// `causal_model`: the model's self-attention is causal (a GPT's, a
/// recommender's), which tells a causal mask from a padding mask.
std::string readable_op(const std::string& op, const std::string& scope, bool causal_model);

}  // namespace qkv::study
