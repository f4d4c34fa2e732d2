// Basic layers: Linear, Embedding, and activation modules.
#pragma once

#include "autograd/generator.h"
#include "autograd/ops/shape.h"
#include "nn/module.h"

#include <functional>
#include <memory>

namespace qkv::nn {

/// How Linear draws its initial weights (seeded by the generator given).
enum class Init {
  Torch,           // PyTorch's default: weight and bias ~ U(±1/√in)
  XavierUniform,   // Glorot: weight ~ U(±√(6/(in+out))), bias 0
  KaimingUniform,  // He, for ReLU: weight ~ U(±√(6/in)), bias 0
  Normal002,       // GPT-2: weight ~ N(0, 0.02²), bias 0
};

/// y = x·Wᵀ + b over the last dim; weight [out, in], bias [out] (as in PyTorch).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Init init = Init::Torch,
         Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Tensor weight, bias;  // bias undefined when disabled

 private:
  int64_t in_, out_;
};

/// A lookup table: ids (int64, any shape) -> rows of weight [num, dim],
/// shaped ids.shape + [dim]. Gradients of repeated ids add up.
class Embedding : public Module {
 public:
  /// weight ~ N(0, std²); std 1 as in torch, GPT-2 uses 0.02.
  Embedding(int64_t num_embeddings, int64_t dim, Generator* gen = nullptr, double std = 1.0);
  Tensor forward(const Tensor& ids) const;
  Tensor operator()(const Tensor& ids) const { return forward(ids); }
  /// The embeddings of ids start, ..., start + count - 1, [count, dim]: the
  /// same values and gradients as forward(arange(start, start + count)),
  /// taken as a slice of the weight, so positions need no index tensor (on a
  /// device, none is made on the host, copied over and checked).
  Tensor range(int64_t start, int64_t count) const;
  Tensor weight;

 private:
  int64_t num_, dim_;
  IndexError id_error_;  // "Embedding(n, d): id ... out of range [0, n)", made once
};

/// While one is alive, every Embedding::forward on this thread returns
/// edit(k, rows) instead of its rows (k counts the calls since the edit
/// began, from 0). What a study keeps the input embeddings with (to read
/// dL/de after backward, for token attribution) and intervenes with (a
/// token's embedding scaled, for the finite-difference check). Edits do not
/// nest. Embedding::range (positions) is not edited.
class EmbeddingEdit {
 public:
  explicit EmbeddingEdit(std::function<Tensor(int64_t call, const Tensor& rows)> edit);
  ~EmbeddingEdit();
  EmbeddingEdit(const EmbeddingEdit&) = delete;
  EmbeddingEdit& operator=(const EmbeddingEdit&) = delete;
};

/// A Vision Transformer's patch embedding: images [B, C, H, W] -> one token
/// per p×p patch [B, (H/p)·(W/p), width], the Linear `proj` applied to each
/// flattened patch (patchify's layout): the same as PyTorch's
/// Conv2d(C, width, kernel_size=p, stride=p) with its weight viewed [width, C·p·p].
class PatchEmbedding : public Module {
 public:
  PatchEmbedding(int64_t channels, int64_t patch, int64_t width, Generator* gen = nullptr);
  Tensor forward(const Tensor& images) const;
  Tensor operator()(const Tensor& images) const { return forward(images); }
  int64_t patch() const { return patch_; }
  std::shared_ptr<Linear> proj;

 private:
  int64_t channels_, patch_;
};

/// Activations as modules, for models built from parts.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

class GELU : public Module {
 public:
  /// tanh_approximation: GPT-2's form (torch approximate='tanh'); otherwise exact erf.
  explicit GELU(bool tanh_approximation = false) : tanh_(tanh_approximation) {}
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }

 private:
  bool tanh_;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

}  // namespace qkv::nn
