#include "nn/position.h"

#include <cmath>
#include <memory>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/shape.h"
#include "autograd/parallel.h"

namespace qkv::nn {

QKV_DECLARE_OP(rope);

namespace {

// cos and sin of every position's angle for each pair: [n][half] each, in double.
struct RopeTable {
  std::vector<double> cos, sin;
  RopeTable(int64_t n, int64_t half, int64_t offset, double base) : cos(n * half), sin(n * half) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(offset + t) * std::pow(base, -static_cast<double>(i) / half);
        cos[t * half + i] = std::cos(angle), sin[t * half + i] = std::sin(angle);
      }
  }
};

// Every head of x rotated by the table's angles (direction +1) or back (−1).
template <class T> void rotate_all(const T* x, T* y, const RopeTable& table, Shape shape, double direction) {
  const int64_t B = shape[0], n = shape[1], H = shape[2], half = shape[3] / 2;
  parallel_for(B * n, 4 * H * half, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const double* c = table.cos.data() + (row % n) * half;
      const double* s = table.sin.data() + (row % n) * half;
      for (int64_t h = 0; h < H; ++h) {
        const T* in = x + (row * H + h) * 2 * half;
        T* out = y + (row * H + h) * 2 * half;
        for (int64_t i = 0; i < half; ++i) {
          const double x1 = in[i], x2 = in[i + half], sn = direction * s[i];
          out[i] = static_cast<T>(x1 * c[i] - x2 * sn);
          out[i + half] = static_cast<T>(x2 * c[i] + x1 * sn);
        }
      }
    }
  });
}

// The same rotation of plain ops, for tensors off the CPU (no device kernel of its own yet).
Tensor rope_composed(const Tensor& x, const RopeTable& table, int64_t n, int64_t half) {
  Tensor c = Tensor::from_vector(table.cos, {1, n, 1, half}).to(x.dtype()).to(x.device());
  Tensor s = Tensor::from_vector(table.sin, {1, n, 1, half}).to(x.dtype()).to(x.device());
  Tensor x1 = narrow(x, 3, 0, half), x2 = narrow(x, 3, half, half);
  return concat({sub(mul(x1, c), mul(x2, s)), add(mul(x2, c), mul(x1, s))}, 3);
}

}  // namespace

// With a = (offset + t)·base^(−2i/d) and the pair (x1, x2) = (x[i], x[i + d/2]):
//   y1 = x1 cos a − x2 sin a,  y2 = x2 cos a + x1 sin a;  backward rotates g by −a
Tensor rope(const Tensor& x, int64_t offset, double base) {
  QKV_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && x.size(3) > 0, "rope: x must be [B, n, heads, head_dim] with an ",
            "even head_dim, got ", shape_str(x.shape()));
  QKV_CHECK(offset >= 0 && base > 1, "rope: offset ", offset, " must be >= 0 and base ", base, " > 1");
  const int64_t n = x.size(1), half = x.size(3) / 2;
  auto table = std::make_shared<RopeTable>(n, half, offset, base);
  if (!x.device().is_cpu()) return rope_composed(x, *table, n, half);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "rope", [&](auto zero) {
    rotate_all(x.data<decltype(zero)>(), y.data<decltype(zero)>(), *table, x.shape(), 1.0);
  });
  if (needs_grad({x}))
    record("rope", y, {x}, [table](const Tensor& g) -> std::vector<Tensor> {
      Tensor gx = Tensor::empty(g.shape(), g.dtype());
      dispatch_floating(g.dtype(), "rope", [&](auto zero) {
        rotate_all(g.data<decltype(zero)>(), gx.data<decltype(zero)>(), *table, g.shape(), -1.0);
      });
      return {gx};
    });
  return y;
}

}  // namespace qkv::nn
