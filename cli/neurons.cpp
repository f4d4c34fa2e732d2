// The page's neuron view (bertviz's third view, with gradients): for one
// layer, head, query and key, q and k by dimension, q ⊙ k and its scaled sum
// (the score), and dL/dq and dL/dk. Its data, and --check's proof that the
// data makes the map's own weights and gradients.
#include <algorithm>
#include <cmath>

#include "neurons.h"
#include "page.h"

namespace qkv::cli {

namespace {

// q, k and their gradients cost 16 bytes a token and dimension: heads get them, most important first, up to
// this many bytes (always one head).
constexpr size_t kNeuronBudget = size_t{3} << 17;

// Head h of a [1, heads, n, d] tensor, row-major [n, d].
std::vector<double> head_rows(const Tensor& t, int64_t h) {
  const int64_t n = t.size(-2), d = t.size(-1);
  std::vector<double> all = t.to_vector();
  return std::vector<double>(all.begin() + h * n * d, all.begin() + (h + 1) * n * d);
}

std::vector<double> grad_rows(const Tensor& t, int64_t h) {
  return t.grad().defined() ? head_rows(t.grad(), h) : std::vector<double>(t.size(-2) * t.size(-1), 0.0);
}

}  // namespace

nlohmann::json neuron_json(const Study& s) {
  nlohmann::json heads = nlohmann::json::array();
  size_t spent = 0;
  for (const auto& [k, h] : heads_by_importance(s.maps, true)) {
    const ScoreInputs& in = s.inputs.at(k);
    const size_t cost = static_cast<size_t>(in.q.size(-2) + in.k.size(-2)) * in.q.size(-1) * 8;
    if (!heads.empty() && spent + cost > kNeuronBudget) break;
    spent += cost;
    heads.push_back({{"map", k},
                     {"head", h},
                     {"d", in.q.size(-1)},
                     {"scale", in.scale},
                     {"q", float32_base64(head_rows(in.q, h))},
                     {"k", float32_base64(head_rows(in.k, h))},
                     {"dq", float32_base64(grad_rows(in.q, h))},
                     {"dk", float32_base64(grad_rows(in.k, h))}});
  }
  return {{"heads", heads}, {"heads_in_all", s.maps.size() * (s.maps.empty() ? 0 : s.maps[0].weights.size(-3))}};
}

// For each map and head: P = softmax(scale·q·kᵀ) under the map's mask and,
// with dS = P ⊙ (dL/dP − Σ_j P ⊙ dL/dP) (softmax's backward), dL/dq = scale·dS·k and dL/dk = scale·dSᵀ·q.
NeuronCheck check_neurons(const Study& s, const std::vector<std::vector<bool>>& hidden) {
  NeuronCheck c;
  for (size_t m = 0; m < s.maps.size(); ++m) {
    const Tensor& p = s.maps[m].weights;
    const ScoreInputs& in = s.inputs[m];
    const int64_t heads = p.size(-3), nq = p.size(-2), nk = p.size(-1), d = in.q.size(-1);
    const std::vector<double> P = p.to_vector(), G = p.grad().to_vector();
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<double> q = head_rows(in.q, h), k = head_rows(in.k, h), dq = grad_rows(in.q, h),
                                dk = grad_rows(in.k, h);
      std::vector<double> my_dq(nq * d, 0.0), my_dk(nk * d, 0.0);
      for (int64_t i = 0; i < nq; ++i) {
        std::vector<double> score(nk), row(nk);
        double top = -INFINITY, sum = 0, dot = 0;
        for (int64_t j = 0; j < nk; ++j) {
          const bool masked = !hidden[m].empty() && hidden[m][i * nk + j];
          double v = 0;
          for (int64_t e = 0; e < d; ++e) v += q[i * d + e] * k[j * d + e];
          score[j] = masked ? -INFINITY : in.scale * v;
          top = std::max(top, score[j]);
        }
        for (int64_t j = 0; j < nk; ++j) sum += row[j] = std::isinf(score[j]) ? 0 : std::exp(score[j] - top);
        const double* pr = &P[(h * nq + i) * nk];
        const double* gr = &G[(h * nq + i) * nk];
        for (int64_t j = 0; j < nk; ++j) {
          c.worst_p = std::max(c.worst_p, std::fabs(row[j] / sum - pr[j]));
          dot += pr[j] * gr[j];
        }
        for (int64_t j = 0; j < nk; ++j) {
          const double ds = pr[j] * (gr[j] - dot) * in.scale;
          for (int64_t e = 0; e < d; ++e) my_dq[i * d + e] += ds * k[j * d + e], my_dk[j * d + e] += ds * q[i * d + e];
        }
      }
      double top_grad = 0;
      for (double v : dq) top_grad = std::max(top_grad, std::fabs(v));
      for (double v : dk) top_grad = std::max(top_grad, std::fabs(v));
      for (size_t e = 0; e < dq.size(); ++e)
        c.worst_grad = std::max(c.worst_grad, std::fabs(my_dq[e] - dq[e]) / (top_grad + 1e-300));
      for (size_t e = 0; e < dk.size(); ++e)
        c.worst_grad = std::max(c.worst_grad, std::fabs(my_dk[e] - dk[e]) / (top_grad + 1e-300));
      c.heads += 1, c.values += static_cast<int64_t>(P.size() / heads + dq.size() + dk.size());
    }
  }
  return c;
}

}  // namespace qkv::cli
