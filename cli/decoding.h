// Decoding a model's answers: a sequence task's answer token by token, and
// text continued token by token (bytes or BPE ids), greedy or sampled, with a key/value cache
// where the kind keeps one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner.h"

namespace qkv::cli::decoding {

/// The index picked from `logits` (checked finite): the largest at
/// temperature 0 (or without a generator), else a draw from softmax(logits /
/// temperature) over the top_k largest (0: all).
int64_t pick(const Runner& runner, const std::vector<double>& logits, double temperature, int64_t top_k,
             Generator* gen);

/// Answers for a sequence task's inputs (batched by length); temperature 0 is greedy.
std::vector<std::vector<int64_t>> answer(Runner& runner, const std::vector<std::vector<int64_t>>& inputs,
                                         double temperature = 0, int64_t top_k = 0, Generator* gen = nullptr);

/// Continues a text model's prompt (its tokens: bytes, or a BPE model's ids) by max_new tokens: the new ones.
std::vector<int64_t> continue_text(Runner& runner, std::vector<int64_t> ids, int64_t max_new, double temperature,
                                   int64_t top_k, Generator& gen);

}  // namespace qkv::cli::decoding
