// Backprop through attention, made visible: a 4-token sentence goes through
// one causal multi-head attention layer step by step (Q, K, V, scores,
// masked weights, output), then every gradient is printed and checked
// against finite differences. Exits 1 if the layer-by-layer recomputation
// or the numerical check disagrees.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "nn/nn.h"

using namespace qkv;
using namespace qkv::nn;

int main() {
  manual_seed(4);
  const std::vector<std::string> words = {"the", "cat", "sat", "down"};
  const int64_t d_model = 4, heads = 2, head_dim = d_model / heads, n = 4;

  // One embedding per word (float64, so the gradient check is exact).
  Tensor x = Tensor::randn({1, n, d_model}, DType::Float64).requires_grad_();
  MultiHeadAttention mha(d_model, heads);
  mha.to(DType::Float64);
  std::cout << "sentence: the cat sat down -> x [1, 4, 4]\n" << x << "\n\n";

  // 1. Project to queries, keys and values, and split the heads: [1, heads, n, head_dim].
  auto split = [&](const Tensor& t) { return permute(reshape(t, {1, n, heads, head_dim}), {0, 2, 1, 3}); };
  Tensor q = split(mha.q_proj->forward(x)), k = split(mha.k_proj->forward(x)), v = split(mha.v_proj->forward(x));
  std::cout << "Q = x Wq^T + bq, per head:\n" << q << "\nK:\n" << k << "\nV:\n" << v << "\n\n";

  // 2. Scores q·k / sqrt(head_dim): how well each query matches each key.
  Tensor scores = scaled_dot_score(q, k);
  std::cout << "scores = Q K^T / sqrt(" << head_dim << "):\n" << scores << "\n\n";

  // 3. The causal mask (true = may attend) blocks later words; softmax turns rows into weights.
  Tensor mask = causal_mask(n, n);
  std::cout << "causal mask (true = may attend):\n" << mask << "\n";
  Tensor weights = softmax(apply_mask(scores, mask), -1);
  std::cout << "weights = softmax(masked scores), each row sums to 1, masked entries exactly 0:\n" << weights << "\n\n";

  // 4. Each query's output is its weighted mix of values; heads are merged and projected.
  Tensor mixed = matmul(weights, v);
  Tensor out = mha.out_proj->forward(reshape(permute(mixed, {0, 2, 1, 3}), {1, n, d_model}));
  std::cout << "output = (weights V) merged, then Wo:\n" << out << "\n\n";

  MhaOptions causal;
  causal.causal = true;
  Tensor reference = mha.forward(x, causal).output;
  double largest = max(abs(out - reference)).item();
  std::printf("the same as MultiHeadAttention::forward: max difference %.1e\n\n", largest);

  // 5. A loss and every gradient.
  Tensor target = Tensor::randn({1, n, d_model}, DType::Float64);
  Tensor loss = sum(out * target);
  loss.backward();
  std::printf("loss = sum(output * target) = %.6f\n\ngradients:\n", loss.item());
  std::cout << "d loss / d x:\n" << x.grad() << "\n";
  for (auto& [name, p] : mha.named_parameters()) std::cout << "d loss / d " << name << ":\n" << p.grad() << "\n";
  std::cout << "(k_proj.bias gets exactly zero: adding b to every key adds q.b to a whole row of scores,\n"
               " and softmax does not change when a row shifts.)\n";

  // 6. Every one of them against central differences.
  auto leaves = mha.named_parameters();
  leaves.emplace_back("x", x);
  GradcheckResult check = gradcheck_leaves(
      [&] { return sum(mha.forward(x, causal).output * target); }, leaves);
  std::cout << "\nnumerical check (float64 central differences):\n" << check.summary();
  bool ok = check.ok && largest < 1e-12;
  std::printf("%s\n", ok ? "all gradients agree" : "MISMATCH");
  return ok ? 0 : 1;
}
