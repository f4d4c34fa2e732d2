// The page's neuron view (bertviz's third view, with gradients): for one
// layer, head, query and key, q and k by dimension, q ⊙ k and its scaled sum
// (the score), and dL/dq and dL/dk. Its data, and --check's proof that the
// data makes the map's own weights and gradients.
#include <algorithm>
#include <cmath>

#include "study/neurons.h"
#include "study/page_data.h"

namespace qkv::study {

namespace {

// q, k and their gradients cost 16 bytes a token and dimension: heads get them, most important first, up to
// this many bytes (always one head).
constexpr size_t kNeuronBudget = size_t{3} << 17;

// One attention call's q and k ([1, heads, n, d]) and their gradients (zeros without a backward), read once.
struct CallVectors {
  std::vector<double> q, k, dq, dk;
  int64_t nq, nk, d;
  explicit CallVectors(const ScoreInputs& in)
      : q(in.q.to_vector()), k(in.k.to_vector()), nq(in.q.size(-2)), nk(in.k.size(-2)), d(in.q.size(-1)) {
    dq = in.q.grad().defined() ? in.q.grad().to_vector() : std::vector<double>(q.size(), 0.0);
    dk = in.k.grad().defined() ? in.k.grad().to_vector() : std::vector<double>(k.size(), 0.0);
  }
  // Head h's rows of one of them, row-major [n, d].
  std::vector<double> head(const std::vector<double>& all, int64_t n, int64_t h) const {
    return std::vector<double>(all.begin() + h * n * d, all.begin() + (h + 1) * n * d);
  }
};

}  // namespace

nlohmann::json neuron_json(const Study& s) {
  nlohmann::json heads = nlohmann::json::array();
  size_t spent = 0;
  for (const auto& [k, h] : heads_by_importance(s.maps, head_gates(s.maps))) {
    const ScoreInputs& in = s.inputs.at(k);
    if (!in.q.defined()) continue;  // a call that did not score by the scaled dot product
    const size_t cost = static_cast<size_t>(in.q.size(-2) + in.k.size(-2)) * in.q.size(-1) * 8;
    if (!heads.empty() && spent + cost > kNeuronBudget) break;
    spent += cost;
    const CallVectors v(in);
    heads.push_back({{"map", k},
                     {"head", h},
                     {"d", in.q.size(-1)},
                     {"scale", in.scale},
                     {"q", float32_base64(v.head(v.q, v.nq, h))},
                     {"k", float32_base64(v.head(v.k, v.nk, h))},
                     {"dq", float32_base64(v.head(v.dq, v.nq, h))},
                     {"dk", float32_base64(v.head(v.dk, v.nk, h))}});
  }
  return {{"heads", heads}, {"heads_in_all", s.maps.size() * (s.maps.empty() ? 0 : s.maps[0].weights.size(-3))}};
}

// For each map and head: P = softmax(scale·q·kᵀ) under the map's mask and,
// with dS = P ⊙ (dL/dP − Σ_j P ⊙ dL/dP) (softmax's backward), dL/dq = scale·dS·k and dL/dk = scale·dSᵀ·q.
NeuronCheck check_neurons(const Study& s, const std::vector<std::vector<bool>>& hidden) {
  NeuronCheck c;
  for (size_t m = 0; m < s.maps.size(); ++m) {
    const Tensor& p = s.maps[m].weights;
    const ScoreInputs& in = s.inputs.at(m);
    if (!in.q.defined()) continue;
    const int64_t heads = p.size(-3), nq = p.size(-2), nk = p.size(-1), d = in.q.size(-1);
    const std::vector<double> P = p.to_vector(), G = p.grad().to_vector();
    const CallVectors call(in);
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<double> q = call.head(call.q, nq, h), k = call.head(call.k, nk, h),
                                dq = call.head(call.dq, nq, h), dk = call.head(call.dk, nk, h);
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

}  // namespace qkv::study
