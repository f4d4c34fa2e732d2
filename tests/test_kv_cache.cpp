// Generation with a key/value cache gives the logits of a full forward pass
// over the prefix, for full and sliding-window attention, pre- and post-LN.
#include <catch2/catch.hpp>

#include <cmath>

#include "compare.h"
#include "nn/nn.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::worst_difference;

TEST_CASE("a GPT with a key/value cache gives the logits of the full forward pass", "[kv_cache][models]") {
  for (const char* kind : {"full", "window:3"})
    for (bool post_ln : {false, true}) {
      INFO(kind << (post_ln ? ", post-LN" : ", pre-LN"));
      GPTConfig c;
      c.vocab = 11, c.context = 12, c.width = 8, c.heads = 2, c.layers = 2, c.post_ln = post_ln;
      c.attention = AttentionKind::parse(kind);
      Generator gen(2);
      GPT gpt(c, &gen);
      gpt.to(DType::Float64);
      gpt.eval();
      NoGradGuard no_grad;
      Tensor ids = Tensor::randint(0, 11, {2, 12}, &gen);
      Tensor full = gpt.forward(ids);
      KVCache cache = gpt.make_cache(2);
      // a prefix of 5, then one token at a time, then the rest
      std::vector<std::pair<int64_t, int64_t>> pieces{{0, 5}, {5, 1}, {6, 1}, {7, 5}};
      for (auto [start, length] : pieces) {
        Tensor logits = gpt.forward_cached(narrow(ids, 1, start, length), cache);
        Tensor expected = narrow(full, 1, start, length);
        REQUIRE(logits.shape() == expected.shape());
        CHECK(worst_difference(logits, expected) < 1e-12);
      }
      CHECK(cache.length == 12);
      CHECK_THROWS_WITH(gpt.forward_cached(narrow(ids, 1, 0, 1), cache),
                        Catch::Matchers::Contains("reached the context"));
    }
}

// The program sizes a cache by what decoding needs (a file's context of 2^20 once made 1 GB of zeros for a
// 3-digit prompt): make_cache(batch, positions) holds that many, 0 meaning the context.
TEST_CASE("a cache made for fewer positions than the context holds them and says when it is full",
          "[kv_cache][models]") {
  GPTConfig c;
  c.vocab = 7, c.context = 16, c.width = 4, c.heads = 2, c.layers = 1;
  Generator gen(3);
  GPT gpt(c, &gen);
  gpt.eval();
  NoGradGuard no_grad;
  CHECK(gpt.make_cache(2).capacity() == 16);
  KVCache small = gpt.make_cache(1, 5);
  CHECK(small.capacity() == 5);
  Tensor ids = Tensor::randint(0, 7, {1, 6}, &gen);
  Tensor full = gpt.forward(ids);
  CHECK(worst_difference(gpt.forward_cached(narrow(ids, 1, 0, 5), small), narrow(full, 1, 0, 5)) < 1e-5);
  CHECK_THROWS_WITH(gpt.forward_cached(narrow(ids, 1, 5, 1), small),
                    Catch::Matchers::Contains("reached the cache's 5 tokens (5 cached + 1 new)"));
  CHECK_THROWS_WITH(gpt.make_cache(1, 17), Catch::Matchers::Contains("a cache of 17 positions, the context is 16"));
}

TEST_CASE("a cache that does not fit the model is refused with its shape", "[kv_cache][models][errors]") {
  GPTConfig c;
  c.vocab = 5, c.context = 4, c.width = 4, c.heads = 2, c.layers = 1;
  GPT gpt(c);
  NoGradGuard no_grad;
  KVCache other(1, 1, 4, 1, 4);  // one head of width 4, the model has two of width 2
  CHECK_THROWS_WITH(gpt.forward_cached(Tensor::zeros({1, 2}, DType::Int64), other),
                    Catch::Matchers::Contains("does not fit"));
  KVCache two_layers(2, 1, 4, 2, 2);
  CHECK_THROWS_WITH(gpt.forward_cached(Tensor::zeros({1, 2}, DType::Int64), two_layers),
                    Catch::Matchers::Contains("a cache for 2 layers"));
  KVCache ok = gpt.make_cache(1);
  CHECK_THROWS_WITH(gpt.forward_cached(Tensor::zeros({2}, DType::Int64), ok),
                    Catch::Matchers::Contains("ids must be int64 [B, t]"));
}

TEST_CASE("linear attention keeps no cache, and says so", "[kv_cache][models]") {
  GPTConfig c;
  c.vocab = 5, c.context = 4, c.width = 4, c.heads = 1, c.layers = 1, c.attention = AttentionKind::parse("linear");
  GPT gpt(c);
  KVCache cache = gpt.make_cache(1);
  NoGradGuard no_grad;
  CHECK_THROWS_WITH(gpt.forward_cached(Tensor::zeros({1, 2}, DType::Int64), cache),
                    Catch::Matchers::Contains("linear"));
}

TEST_CASE("attention kinds parse and print", "[attention]") {
  CHECK(AttentionKind::parse("full").str() == "full");
  CHECK(AttentionKind::parse("window:32").str() == "window:32");
  CHECK(AttentionKind::parse("linear").str() == "linear");
  for (const char* bad : {"", "window:", "window:0", "window:-3", "window:3x", "Linear", "window:99999999999"})
    CHECK_THROWS_AS(AttentionKind::parse(bad), Error);
}
