#include "nn/layers.h"

#include <cmath>

#include "autograd/ops/elementwise.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/shape.h"

namespace qkv::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Init init, Generator* gen)
    : in_(in_features), out_(out_features) {
  QKV_CHECK(in_features > 0 && out_features > 0, "Linear: sizes must be positive, got in ", in_features, ", out ",
            out_features);
  double bound = 0;
  Tensor w;
  switch (init) {
    case Init::Torch: bound = 1 / std::sqrt(static_cast<double>(in_)); break;
    case Init::XavierUniform: bound = std::sqrt(6.0 / static_cast<double>(in_ + out_)); break;
    case Init::KaimingUniform: bound = std::sqrt(6.0 / static_cast<double>(in_)); break;
    case Init::Normal002:  // (skipped draws are left unset: scaling them would only cost a pass)
      w = SkipInitGuard::active() ? Tensor::empty({out_, in_}) : Tensor::randn({out_, in_}, DType::Float32, gen) * 0.02;
      break;
  }
  weight = register_parameter(
      "weight", w.defined() ? w.detach() : Tensor::uniform({out_, in_}, -bound, bound, DType::Float32, gen));
  if (with_bias) {
    Tensor b =
        init == Init::Torch ? Tensor::uniform({out_}, -bound, bound, DType::Float32, gen) : Tensor::zeros({out_});
    bias = register_parameter("bias", b);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  auto scope = this->scope();  // names this module in graph pictures
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == in_, "Linear(", in_, " -> ", out_, "): input ", shape_str(x.shape()),
            " does not end in ", in_, " features");
  return qkv::linear(x, weight, bias);  // x·Wᵀ + b in one op: no transpose copy, no separate bias pass
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator* gen, double std)
    : num_(num_embeddings),
      dim_(dim),
      id_error_{cat("Embedding(", num_, ", ", dim_, "): id "), cat(" out of range [0, ", num_, ")")} {
  QKV_CHECK(num_embeddings > 0 && dim > 0, "Embedding: sizes must be positive, got ", num_embeddings, " x ", dim);
  // Skipped draws (a model about to be read from a file) are left unset: scaling them would only cost a pass.
  weight = register_parameter("weight", SkipInitGuard::active()
                                            ? Tensor::empty({num_, dim_})
                                            : (Tensor::randn({num_, dim_}, DType::Float32, gen) * std).detach());
}

namespace {
// The live EmbeddingEdit of this thread, if any, and how many calls it has seen.
struct EmbeddingEditState {
  std::function<Tensor(int64_t, const Tensor&)> edit;
  int64_t calls = 0;
};
thread_local EmbeddingEditState* embedding_edit = nullptr;
}  // namespace

EmbeddingEdit::EmbeddingEdit(std::function<Tensor(int64_t, const Tensor&)> edit) {
  QKV_CHECK(embedding_edit == nullptr, "EmbeddingEdit: one is already alive on this thread (edits do not nest)");
  embedding_edit = new EmbeddingEditState{std::move(edit), 0};
}

EmbeddingEdit::~EmbeddingEdit() {
  delete embedding_edit;
  embedding_edit = nullptr;
}

Tensor Embedding::forward(const Tensor& ids) const {
  auto scope = this->scope();  // names this module in graph pictures
  QKV_CHECK(ids.dtype() == DType::Int64, "Embedding(", num_, ", ", dim_, "): ids must be int64, got ",
            dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  Shape shape = ids.shape();
  shape.push_back(dim_);
  // index_select checks the ids in this layer's words: at once on the CPU, and
  // on a device in its kernel, raised at the next read (a copy here would wait).
  Tensor rows = reshape(index_select(weight, 0, reshape(ids, {-1}), id_error_), shape);
  if (!embedding_edit) return rows;
  Tensor edited = embedding_edit->edit(embedding_edit->calls++, rows);
  QKV_CHECK(edited.shape() == rows.shape(), "EmbeddingEdit: an edit must keep the shape ", shape_str(rows.shape()));
  return edited;
}

Tensor Embedding::range(int64_t start, int64_t count) const {
  auto scope = this->scope();
  QKV_CHECK(start >= 0 && count >= 0 && count <= num_ - start, "Embedding(", num_, ", ", dim_, "): ids ", start, " .. ",
            start + count - 1, " out of range [0, ", num_, ")");
  return narrow(weight, 0, start, count);
}

PatchEmbedding::PatchEmbedding(int64_t channels, int64_t patch, int64_t width, Generator* gen)
    : channels_(channels), patch_(patch) {
  QKV_CHECK(channels > 0 && patch > 0 && width > 0, "PatchEmbedding: sizes must be positive, got channels ", channels,
            ", patch ", patch, ", width ", width);
  proj = register_module("proj", std::make_shared<Linear>(channels * patch * patch, width, true, Init::Torch, gen));
}

Tensor PatchEmbedding::forward(const Tensor& images) const {
  auto scope = this->scope();  // names this module in graph pictures
  QKV_CHECK(images.dim() == 4 && images.size(1) == channels_, "PatchEmbedding(", channels_, " channels, patch ", patch_,
            "): images must be [B, ", channels_, ", H, W], got ", shape_str(images.shape()));
  return proj->forward(patchify(images, patch_));
}

Tensor ReLU::forward(const Tensor& x) const { return relu(x); }
Tensor GELU::forward(const Tensor& x) const { return tanh_ ? gelu_tanh(x) : gelu(x); }
Tensor Tanh::forward(const Tensor& x) const { return qkv::tanh(x); }

}  // namespace qkv::nn
