// Backprop through attention, made visible. A 4-word sentence goes through
// one causal multi-head attention layer step by step (Q, K, V, scores,
// masked weights, output); then the backward pass runs the same steps in
// reverse, per head: dL/dO, dL/dP, the softmax step dL/dS, dL/dQ, dL/dK,
// dL/dV, then the projections' gradients. Every printed gradient is
// checked twice: against its formula (computed here by hand from the
// forward values) and against float64 central differences of the loss.
// Exits 1 if any check disagrees; ctest runs it.
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>

#include "nn/nn.h"

using namespace qkv;
using namespace qkv::nn;

namespace {

const std::vector<std::string> kWords = {"the", "cat", "sat", "down"};
bool all_ok = true;

// Head h of a [1, heads, rows, cols] tensor, rows labelled by word; columns
// by word too when they are positions (keys), else by index.
void show(const std::string& title, const Tensor& t, int64_t h, bool columns_are_words) {
  int64_t rows = t.size(2), cols = t.size(3);
  std::printf("  %s\n        ", title.c_str());
  for (int64_t j = 0; j < cols; ++j)
    std::printf("%10s", columns_are_words ? kWords[j].c_str() : ("[" + std::to_string(j) + "]").c_str());
  std::printf("\n");
  for (int64_t i = 0; i < rows; ++i) {
    std::printf("  %-6s", kWords[i].c_str());
    for (int64_t j = 0; j < cols; ++j) std::printf("%10.5f", t.at({0, h, i, j}));
    std::printf("\n");
  }
}

// A gradient's two checks: the formula, and central differences of the loss
// as a function of that one intermediate (every other input held fixed).
void check(const std::string& name, const Tensor& autograd, const Tensor& formula,
           const std::function<Tensor()>& loss_of, const Tensor& leaf) {
  double formula_error = max(abs(autograd - formula)).item();
  GradcheckResult numeric = gradcheck_leaves(loss_of, {{name, leaf}});
  bool ok = formula_error < 1e-12 && numeric.ok;
  all_ok = all_ok && ok;
  std::printf("  %-3s formula vs autograd: max |diff| %.1e; finite differences: worst rel error %.1e  %s\n",
              name.c_str(), formula_error, numeric.worst_rel_error(), ok ? "ok" : "MISMATCH");
}

Tensor leaf(const Tensor& t) { return t.detach().clone().requires_grad_(); }

}  // namespace

int main() {
  manual_seed(4);
  const int64_t d_model = 4, heads = 2, head_dim = d_model / heads, n = 4;
  const double scale = 1 / std::sqrt(static_cast<double>(head_dim));

  // One embedding per word (float64, so the gradient checks are exact).
  Tensor x = Tensor::randn({1, n, d_model}, DType::Float64).requires_grad_();
  MultiHeadAttention mha(d_model, heads);
  mha.to(DType::Float64);
  std::cout << "sentence: the cat sat down -> x [1, 4, 4]\n" << x << "\n\n";

  // ---- forward ----
  // 1. Project to queries, keys and values, and split the heads: [1, heads, n, head_dim].
  auto split = [&](const Tensor& t) { return permute(reshape(t, {1, n, heads, head_dim}), {0, 2, 1, 3}); };
  auto merge = [&](const Tensor& t) { return reshape(permute(t, {0, 2, 1, 3}), {1, n, d_model}); };
  // K's bias is detached, as MultiHeadAttention does: softmax ignores it (see the end), and computed through
  // the graph its gradient would be rounding noise (about 1e-17 here) instead of the exact zero.
  Tensor q = split(mha.q_proj->forward(x)), v = split(mha.v_proj->forward(x));
  Tensor k = split(linear(x, mha.k_proj->weight, mha.k_proj->bias.detach()));
  std::cout << "Q = x Wq^T + bq, per head:\n" << q << "\nK:\n" << k << "\nV:\n" << v << "\n\n";

  // 2. Scores q·k / sqrt(head_dim): how well each query matches each key.
  Tensor scores = scaled_dot_score(q, k);
  std::cout << "S = Q K^T / sqrt(" << head_dim << "):\n" << scores << "\n\n";

  // 3. The causal mask (true = may attend) blocks later words; softmax turns rows into weights.
  Tensor mask = causal_mask(n, n);
  std::cout << "causal mask (true = may attend):\n" << mask << "\n";
  Tensor weights = softmax(apply_mask(scores, mask), -1);
  std::cout << "P = softmax(masked S), each row sums to 1, masked entries exactly 0:\n" << weights << "\n\n";

  // 4. Each query's output is its weighted mix of values; heads are merged and projected.
  Tensor mixed = matmul(weights, v);
  Tensor out = mha.out_proj->forward(merge(mixed));
  std::cout << "O = P V per head; output = merge(O) Wo^T + bo:\n" << out << "\n\n";

  MhaOptions causal;
  causal.causal = true;
  Tensor reference = mha.forward(x, causal).output;
  double largest = max(abs(out - reference)).item();
  std::printf("the same as MultiHeadAttention::forward: max difference %.1e\n\n", largest);
  all_ok = all_ok && largest < 1e-12;

  // ---- backward, step by step ----
  // The loss, and the same loss as a function of each intermediate alone:
  // the rest of the forward pass from there on, with everything else fixed.
  Tensor target = Tensor::randn({1, n, d_model}, DType::Float64);
  auto loss_from_O = [&](const Tensor& O) { return sum(mha.out_proj->forward(merge(O)) * target); };
  auto loss_from_P = [&](const Tensor& P, const Tensor& V) { return loss_from_O(matmul(P, V)); };
  auto loss_from_S = [&](const Tensor& S, const Tensor& V) { return loss_from_P(softmax(apply_mask(S, mask), -1), V); };
  auto loss_from_QKV = [&](const Tensor& Q, const Tensor& K, const Tensor& V) {
    return loss_from_S(scaled_dot_score(Q, K), V);
  };
  Tensor P = weights.detach(), V = v.detach(), Q = q.detach(), K = k.detach();
  std::printf("loss = sum(output * target) = %.6f\n\nbackward, per head (rows: the query word):\n\n",
              loss_from_O(mixed.detach()).item());

  // Each intermediate becomes a leaf; backward from the loss gives its gradient.
  Tensor O_leaf = leaf(mixed);
  loss_from_O(O_leaf).backward();
  Tensor dO = O_leaf.grad().clone();  // copies: the checks below run backward again
  Tensor P_leaf = leaf(P), V_leaf = leaf(V);
  loss_from_P(P_leaf, V_leaf).backward();
  Tensor dP = P_leaf.grad().clone(), dV_from_O = V_leaf.grad().clone();
  Tensor S_leaf = leaf(scores);
  loss_from_S(S_leaf, V).backward();
  Tensor dS = S_leaf.grad().clone();
  Tensor Q_leaf = leaf(Q), K_leaf = leaf(K), V2_leaf = leaf(V);
  loss_from_QKV(Q_leaf, K_leaf, V2_leaf).backward();
  Tensor dQ = Q_leaf.grad().clone(), dK = K_leaf.grad().clone(), dV = V2_leaf.grad().clone();

  // The formulas, from the forward values and the gradient one step later.
  Tensor dO_formula = split(matmul(reshape(target, {n, d_model}), mha.out_proj->weight));  // dL/dO = target Wo
  Tensor dP_formula = matmul(dO, V, false, true);                                          // dL/dP = dL/dO V^T
  Tensor dV_formula = matmul(P, dO, true, false);                                          // dL/dV = P^T dL/dO
  Tensor dS_formula = P * (dP - sum(dP * P, {-1}, true));                                  // softmax backward
  Tensor dQ_formula = matmul(dS, K) * scale;                                               // dL/dQ = dL/dS K / sqrt(d)
  Tensor dK_formula = matmul(dS, Q, true, false) * scale;  // dL/dK = dL/dS^T Q / sqrt(d)

  for (int64_t h = 0; h < heads; ++h) {
    std::printf("== head %lld ==\n", static_cast<long long>(h));
    show("dL/dO = target Wo, split by head  [query, channel]", dO, h, false);
    show("dL/dP = dL/dO V^T  [query, key]", dP, h, true);
    show("dL/dS = P * (dL/dP - rowsum(dL/dP * P))  [query, key]: the softmax step; masked keys get 0", dS, h, true);
    show("dL/dQ = dL/dS K / sqrt(d)  [query, channel]", dQ, h, false);
    show("dL/dK = dL/dS^T Q / sqrt(d)  [key, channel]", dK, h, false);
    show("dL/dV = P^T dL/dO  [key, channel]", dV, h, false);
    std::printf("\n");
  }
  std::printf("every one of them, all heads, against its formula and against central differences:\n");
  check(
      "dO", dO, dO_formula, [&] { return loss_from_O(O_leaf); }, O_leaf);
  check(
      "dP", dP, dP_formula, [&] { return loss_from_P(P_leaf, V_leaf); }, P_leaf);
  check(
      "dS", dS, dS_formula, [&] { return loss_from_S(S_leaf, V); }, S_leaf);
  check(
      "dQ", dQ, dQ_formula, [&] { return loss_from_QKV(Q_leaf, K_leaf, V2_leaf); }, Q_leaf);
  check(
      "dK", dK, dK_formula, [&] { return loss_from_QKV(Q_leaf, K_leaf, V2_leaf); }, K_leaf);
  check(
      "dV", dV, dV_formula, [&] { return loss_from_QKV(Q_leaf, K_leaf, V2_leaf); }, V2_leaf);
  // dL/dV through the whole layer equals the one from the weighted sum alone: V enters only there.
  all_ok = all_ok && max(abs(dV - dV_from_O)).item() < 1e-12;

  // ---- the projections ----
  Tensor loss = sum(out * target);
  loss.backward();
  std::printf("projections and input (dL/dWq = sum over positions of dL/dq^T x, and so on):\n");
  std::cout << "d loss / d x:\n" << x.grad() << "\n";
  for (auto& [name, p] : mha.named_parameters())
    std::cout << "d loss / d " << name << ":\n"
              << (p.grad().defined() ? p.grad() : Tensor::zeros(p.shape(), p.dtype())) << "\n";
  std::cout << "(k_proj.bias gets exactly zero: adding b to every key adds q.b to a whole row of scores,\n"
               " and softmax does not change when a row shifts; so it is detached, and its gradient is 0, not\n"
               " rounding noise.)\n";
  auto leaves = mha.named_parameters();
  leaves.emplace_back("x", x);
  GradcheckResult all = gradcheck_leaves([&] { return sum(mha.forward(x, causal).output * target); }, leaves);
  std::cout << "\nnumerical check (float64 central differences):\n" << all.summary();
  all_ok = all_ok && all.ok;
  std::printf("%s\n", all_ok ? "all gradients agree" : "MISMATCH");
  return all_ok ? 0 : 1;
}
