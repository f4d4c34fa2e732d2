// The page's neuron view: how each attention score is made from q and k,
// with dL/dq and dL/dk (study/neurons.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "study/study.h"

namespace qkv::study {

/// The neuron view's data: for the most important heads while 384 KiB
/// lasts (always one), each head's q [n_q, d] and k [n_k, d] as they
/// entered the score, dL/dq and dL/dk (float32, base64), the score's scale,
/// and which map ("map": its index in s.maps) and head they belong to.
/// Needs s's backward to have run.
nlohmann::json neuron_json(const Study& s);

/// What check_neurons found: the largest |softmax(scale·q·kᵀ) − P| and the
/// largest |dL/dq − scale·dS·k| (and the same for dL/dk) over its head's
/// largest gradient, over every map and head.
struct NeuronCheck {
  double worst_p = 0, worst_grad = 0;
  int64_t heads = 0, values = 0;
};

/// Recomputes every map's weights from the study's own q and k (with the
/// map's mask, `hidden` per map as masked_cells gives it), and dL/dq and
/// dL/dk from the map's dL/dP through softmax's backward: the page's neuron
/// view shows the numbers that make the map it stands beside.
NeuronCheck check_neurons(const Study& s, const std::vector<std::vector<bool>>& hidden);

}  // namespace qkv::study
