#include <autograd/autograd.h>

#include <iostream>

int main() {
  using namespace qkv;
  manual_seed(0);
  Tensor x = Tensor::randn({2, 3});
  Tensor w = Tensor::randn({3, 4}).requires_grad_();

  Tensor y = softmax(matmul(x, w), -1);  // y = softmax(x @ w)
  Tensor loss = sum(y * y);
  loss.backward();
  std::cout << w.grad() << "\n";
}
