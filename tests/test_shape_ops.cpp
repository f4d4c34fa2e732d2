// Shape ops: values against hand-written results, storage sharing, masks and
// indices of other dtypes, and the errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "autograd/autograd.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {
Tensor counting(Shape s) { return reshape(Tensor::arange(static_cast<double>(numel(s)), DType::Float64), s); }
Tensor idx(std::vector<int64_t> v, Shape s) { return Tensor::from_vector(v, s); }
Tensor mask(std::vector<bool> v, Shape s) { return Tensor::from_vector(v, s); }
}  // namespace

TEST_CASE("reshape shares storage and infers -1", "[shape]") {
  Tensor x = counting({2, 3});
  Tensor r = reshape(x, {3, -1});
  CHECK(r.shape() == Shape{3, 2});
  r.set({0, 0}, 42);
  CHECK(x.at({0, 0}) == 42);
  CHECK(view(x, {-1}).shape() == Shape{6});
  CHECK(unsqueeze(x, 0).shape() == Shape{1, 2, 3});
  CHECK(unsqueeze(x, -1).shape() == Shape{2, 3, 1});
  CHECK(squeeze(unsqueeze(x, 1), 1).shape() == Shape{2, 3});
  CHECK_THROWS_WITH(reshape(x, {4, -1}), Contains("reshape: cannot view [2, 3] as [4, -1]"));
  CHECK_THROWS_WITH(reshape(x, {-1, -1}), Contains("more than one -1"));
  CHECK_THROWS_WITH(reshape(x, {5}), Contains("[2, 3]") && Contains("[5]"));
  CHECK(squeeze(x, 0).shape() == Shape{2, 3});  // not size 1: unchanged, as in torch
}

TEST_CASE("permute and transpose reorder dims", "[shape]") {
  Tensor x = counting({2, 3, 4});
  Tensor p = permute(x, {2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) CHECK(p.at({k, i, j}) == x.at({i, j, k}));
  Tensor t = transpose(counting({2, 3}), 0, 1);
  CHECK(t.to_vector() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_WITH(permute(x, {0, 1}), Contains("permute: 2 dims given for a tensor of shape [2, 3, 4]"));
  CHECK_THROWS_WITH(permute(x, {0, 1, 1}), Contains("permute: dim 1 repeated"));
  CHECK_THROWS_WITH(transpose(x, 0, 3), Contains("transpose: dim 3 out of range"));
  // unsqueeze and stack take a dim of the result: the range, not the input's rank (which once misled).
  CHECK_THROWS_WITH(unsqueeze(Tensor::zeros({2}), 3), Contains("unsqueeze: dim 3 out of range [-2, 1]"));
  CHECK_THROWS_WITH(transpose(Tensor::scalar(1.0), 0, 0),
                    Contains("transpose: dim 0 given for a tensor with no dimensions"));
}

// torch takes dim -1 or 0 of a 0-d tensor in reductions, softmax and squeeze (the tensor as one element).
TEST_CASE("reductions, softmax and squeeze take dim 0 or -1 of a 0-d tensor, as torch", "[shape][reduce]") {
  Tensor s = Tensor::scalar(3.0, DType::Float64).requires_grad_();
  for (int64_t d : {0, -1}) {
    CHECK(sum(s, {d}).item() == 3);
    CHECK(sum(s, {d}, true).dim() == 0);
    CHECK(mean(s, {d}).item() == 3);
    CHECK(max(s, {d}).item() == 3);
    CHECK(softmax(s, d).item() == 1);
    CHECK(log_softmax(s, d).item() == 0);
    CHECK(squeeze(s, d).dim() == 0);
  }
  sum(mul(softmax(s, 0), 2.0) + sum(s, {0}) * 5.0).backward();
  CHECK(s.grad().item() == 5);  // softmax of one element is constant
  CHECK_THROWS_WITH(sum(s, {1}), Contains("sum: dim 1 out of range [-1, 0] (a 0-d tensor)"));
  CHECK_THROWS_WITH(softmax(s, -2), Contains("softmax: dim -2 out of range [-1, 0]"));
}

TEST_CASE("narrow and slice take windows", "[shape]") {
  Tensor x = counting({3, 4});
  CHECK(narrow(x, 1, 1, 2).to_vector() == std::vector<double>{1, 2, 5, 6, 9, 10});
  CHECK(slice(x, 0, -1, 99).to_vector() == std::vector<double>{8, 9, 10, 11});
  CHECK(slice(x, 1, -3, -1).to_vector() == std::vector<double>{1, 2, 5, 6, 9, 10});
  CHECK(slice(x, 1, 3, 1).numel() == 0);
  CHECK(narrow(x, 1, -2, 2).to_vector() == std::vector<double>{2, 3, 6, 7, 10, 11});  // negative start, as torch
  CHECK_THROWS_WITH(narrow(x, 1, 3, 2), Contains("narrow: window of 2 from 3 out of range for dim 1 of [3, 4]"));
  CHECK_THROWS_WITH(narrow(x, 0, 2, INT64_MAX), Contains("out of range"));
}

TEST_CASE("concat and stack join tensors", "[shape]") {
  Tensor a = counting({2, 1}), b = counting({2, 2});
  CHECK(concat({a, b}, 1).to_vector() == std::vector<double>{0, 0, 1, 1, 2, 3});
  CHECK(concat({a, a}, 0).shape() == Shape{4, 1});
  Tensor s = stack({a, a * 2.0}, 0);
  CHECK(s.shape() == Shape{2, 2, 1});
  CHECK(s.to_vector() == std::vector<double>{0, 1, 0, 2});
  CHECK(stack({a, a}, -1).shape() == Shape{2, 1, 2});
  CHECK_THROWS_WITH(concat({a, counting({3, 1})}, 1), Contains("concat: along dim 1 shapes [2, 1] float64 and [3, 1]"));
  CHECK_THROWS_WITH(stack({a, b}, 0), Contains("stack: shapes [2, 1] and [2, 2] differ"));
  CHECK_THROWS_WITH(concat({}, 0), Contains("concat: no tensors"));
}

TEST_CASE("narrow and concat copy large blocks in pieces, the same for any thread count", "[shape][threads]") {
  // One block of 3·40000 floats (480 KB, several 16 KB pieces) when narrowing dim 0; many when narrowing dim 1.
  Tensor x = reshape(Tensor::arange(5 * 3 * 40000), {5, 3, 40000});
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Tensor a = narrow(x, 0, 1, 3), b = narrow(x, 2, 7, 39990);
    Tensor joined = concat({a, narrow(x, 0, 0, 1)}, 0);
    set_num_threads(0);
    bool same = true;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 40000; k += 97) {
          same = same && a.at({i, j, k}) == x.at({i + 1, j, k}) && joined.at({i, j, k}) == x.at({i + 1, j, k});
          if (k < 39990) same = same && b.at({i, j, k}) == x.at({i, j, k + 7});
        }
    for (int64_t k = 0; k < 40000; k += 13) same = same && joined.at({3, 2, k}) == x.at({0, 2, k});
    CHECK(a.at({2, 2, 39999}) == x.at({3, 2, 39999}));  // the last piece's last element
    CHECK(same);
  }
}

TEST_CASE("expand broadcasts, for floats and for bool masks", "[shape]") {
  Tensor x = counting({3, 1});
  Tensor e = expand(x, {2, 3, 2});
  CHECK(e.shape() == Shape{2, 3, 2});
  CHECK(e.at({1, 2, 1}) == 2);
  CHECK(expand(x, {-1, 4}).shape() == Shape{3, 4});
  Tensor m = expand(mask({true, false}, {1, 2}), {3, 2});
  CHECK(m.dtype() == DType::Bool);
  CHECK(m.to_vector() == std::vector<double>{1, 0, 1, 0, 1, 0});
  CHECK_THROWS_WITH(expand(x, {3, 2, 2}), Contains("expand: cannot expand [3, 1] to [3, 2, 2]"));
  CHECK_THROWS_WITH(expand(x, {1}), Contains("fewer dims"));
}

TEST_CASE("index_select and gather pick entries and repeats add gradients", "[shape]") {
  Tensor table = counting({4, 2}).detach().requires_grad_();
  Tensor rows = index_select(table, 0, idx({3, 0, 3}, {3}));
  CHECK(rows.to_vector() == std::vector<double>{6, 7, 0, 1, 6, 7});
  sum(rows).backward();
  CHECK(table.grad().to_vector() == std::vector<double>{1, 1, 0, 0, 0, 0, 2, 2});
  CHECK(index_select(counting({2, 3}), 1, idx({2, 0}, {2})).to_vector() == std::vector<double>{2, 0, 5, 3});

  Tensor x = counting({2, 3});
  Tensor g = gather(x, 1, idx({2, 2, 0, 1}, {2, 2}));  // torch.gather semantics
  CHECK(g.to_vector() == std::vector<double>{2, 2, 3, 4});
  CHECK(gather(x, 0, idx({1, 0, 1}, {1, 3})).to_vector() == std::vector<double>{3, 1, 5});

  CHECK_THROWS_WITH(index_select(x, 0, idx({2}, {1})),
                    Contains("index_select: index 2 out of range for dim 0 of [2, 3]"));
  CHECK_THROWS_WITH(index_select(x, 0, Tensor::zeros({1})), Contains("index must be int64"));
  CHECK_THROWS_WITH(gather(x, 1, idx({0, 3}, {1, 2})), Contains("gather: index 3 out of range for dim 1 of [2, 3]"));
  CHECK_THROWS_WITH(gather(x, 1, idx({0, 0, 0}, {3, 1})), Contains("gather: index [3, 1] does not fit x [2, 3]"));
  CHECK_THROWS_WITH(index_select(x, 0, idx({-1}, {1})), Contains("index -1 out of range"));
}

TEST_CASE("masked_fill and where follow the mask (true means fill, or take a)", "[shape]") {
  Tensor x = counting({2, 2});
  Tensor filled = masked_fill(x, mask({true, false}, {1, 2}), -1);
  CHECK(filled.to_vector() == std::vector<double>{-1, 1, -1, 3});
  Tensor w = where(mask({false, true}, {2, 1}), x, Tensor::scalar(9, DType::Float64));
  CHECK(w.to_vector() == std::vector<double>{9, 9, 2, 3});
  CHECK_THROWS_WITH(masked_fill(x, Tensor::ones({2, 2}), 0), Contains("masked_fill: mask must be bool, got float32"));
  CHECK_THROWS_WITH(masked_fill(x, mask({true, false, true}, {3}), 0), Contains("masked_fill: shapes [2, 2] and [3]"));
  CHECK_THROWS_WITH(where(mask({true}, {1}), x, Tensor::ones({2})), Contains("where: dtypes differ"));
}

TEST_CASE("index_select takes a 0-d index and backward ignores later edits to the index", "[shape]") {
  Tensor x = counting({3, 2});
  Tensor row = index_select(x, 0, Tensor::scalar(2, DType::Int64));  // torch keeps the dim: [1, 2]
  CHECK(row.shape() == Shape{1, 2});
  CHECK(row.to_vector() == std::vector<double>{4, 5});
  CHECK(index_select(x, 1, Tensor::scalar(0, DType::Int64)).shape() == Shape{3, 1});
  Tensor table = counting({3, 2}).detach().requires_grad_();
  Tensor index = idx({1}, {1});
  Tensor picked = gather(table, 0, idx({2, 0}, {1, 2})) + index_select(table, 0, index);
  index.set({0}, 1000);  // a reused buffer: backward must still use 1
  sum(picked).backward();
  CHECK(table.grad().to_vector() == std::vector<double>{0, 1, 1, 1, 1, 0});
}

TEST_CASE("sizes that overflow int64 are rejected, not wrapped", "[shape][errors]") {
  CHECK_THROWS_AS(Tensor::zeros({int64_t{1} << 32, int64_t{1} << 32}), Error);
  CHECK_THROWS_AS(reshape(Tensor::zeros({0}), {int64_t{1} << 32, int64_t{1} << 32, 4}), Error);
  CHECK_THROWS_WITH(Tensor::arange(0, std::numeric_limits<double>::infinity()), Contains("arange"));
  CHECK_THROWS_WITH(Tensor::arange(5, 0, 1), Contains("arange: step 1 leads away from 0"));  // torch refuses it too
  CHECK(Tensor::arange(5, 0, -2).to_vector() == std::vector<double>{5, 3, 1});
  CHECK(Tensor::arange(3, 3).numel() == 0);
  CHECK_THROWS_WITH(Tensor::from_vector<double>({std::nan("")}).to(DType::Int64), Contains("int64"));
}

TEST_CASE("patchify cuts images into flattened patches, channel-major like a Conv2d weight", "[shape][patchify]") {
  Tensor x = counting({1, 2, 4, 4});  // x[0, c, r, k] = 16c + 4r + k
  Tensor p = patchify(x, 2);
  REQUIRE(p.shape() == Shape{1, 4, 8});
  // Patch 1 is rows 0-1, columns 2-3; its row holds channel 0's four pixels, then channel 1's.
  std::vector<double> want{2, 3, 6, 7, 18, 19, 22, 23};
  for (int64_t k = 0; k < 8; ++k) CHECK(p.at({0, 1, k}) == want[k]);
  CHECK(p.at({0, 2, 0}) == 8);  // patch (1, 0) starts at row 2, column 0
  // A permutation: the gradient puts every element back where it came from.
  Tensor leaf = counting({2, 1, 2, 6}).requires_grad_();
  Tensor g = counting({2, 3, 4});
  sum(mul(patchify(leaf, 2), g)).backward();
  CHECK(patchify(leaf.grad(), 2).to_vector() == g.to_vector());
  CHECK_THROWS_WITH(patchify(counting({2, 4, 4}), 2), Contains("patchify: images must be [B, C, H, W], got [2, 4, 4]"));
  CHECK_THROWS_WITH(patchify(counting({1, 1, 4, 6}), 4), Contains("patchify: patch 4 does not tile images of 4 x 6"));
}
