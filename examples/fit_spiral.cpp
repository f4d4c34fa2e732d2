// A two-layer classifier for three interleaved spirals, trained with plain
// SGD on qkv tensors: the smallest complete training loop (forward, loss,
// backward, update) a reader can follow end to end.
#include <cmath>
#include <cstdio>
#include <numbers>

#include "autograd/autograd.h"

using namespace qkv;

int main() {
  manual_seed(1);
  const int64_t per_class = 100, classes = 3, hidden = 64, steps = 1500;
  const double lr = 0.5;

  // Points along three spirals with a little noise; the label is the spiral.
  Tensor points = Tensor::empty({per_class * classes, 2});
  std::vector<int64_t> labels;
  for (int64_t c = 0; c < classes; ++c)
    for (int64_t i = 0; i < per_class; ++i) {
      double r = static_cast<double>(i) / per_class;
      double angle = 4.0 * (c + r) + 0.2 * default_generator().normal();
      points.set({c * per_class + i, 0}, r * std::sin(angle));
      points.set({c * per_class + i, 1}, r * std::cos(angle));
      labels.push_back(c);
    }
  Tensor targets = Tensor::from_vector(labels, {per_class * classes, 1});

  Tensor w1 = (Tensor::randn({2, hidden}) * std::sqrt(2.0 / 2)).detach().requires_grad_();
  Tensor b1 = Tensor::zeros({hidden}).requires_grad_();
  Tensor w2 = (Tensor::randn({hidden, classes}) * std::sqrt(1.0 / hidden)).detach().requires_grad_();
  Tensor b2 = Tensor::zeros({classes}).requires_grad_();

  double accuracy = 0, first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step <= steps; ++step) {
    Tensor logits = matmul(relu(matmul(points, w1) + b1), w2) + b2;
    // Cross-entropy: the mean negative log-probability of the right class.
    Tensor loss = -mean(gather(log_softmax(logits, -1), 1, targets));
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->zero_grad();
    loss.backward();
    {
      NoGradGuard no_grad;
      for (Tensor* p : {&w1, &b1, &w2, &b2}) {
        float* value = p->data<float>();
        const float* grad = p->grad().data<float>();
        for (int64_t i = 0; i < p->numel(); ++i) value[i] -= static_cast<float>(lr) * grad[i];
      }
    }
    if (step % 250 == 0) {
      Tensor predicted = logits.detach();
      int64_t correct = 0;
      for (int64_t i = 0; i < predicted.size(0); ++i) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; ++c)
          if (predicted.at({i, c}) > predicted.at({i, best})) best = c;
        correct += best == labels[i];
      }
      accuracy = static_cast<double>(correct) / static_cast<double>(predicted.size(0));
      std::printf("step %5lld  loss %.4f  accuracy %.1f%%\n", static_cast<long long>(step), loss.item(),
                  100 * accuracy);
    }
    if (step == 0) first_loss = loss.item();
    last_loss = loss.item();
  }
  // The example checks itself (ctest runs it): the spirals are not linearly
  // separable, so 95% means the hidden layer learnt; the loss must have fallen.
  bool ok = accuracy >= 0.95 && last_loss < first_loss / 5;
  std::printf("%s: accuracy %.1f%% (need 95%%), loss %.4f -> %.4f (need a fifth or less)\n", ok ? "ok" : "FAILED",
              100 * accuracy, first_loss, last_loss);
  return ok ? 0 : 1;
}
