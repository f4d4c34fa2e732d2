// A program of one's own, against the installed library: a model qkv does
// not know (one attention layer over embeddings), its study page written with
// study::record and study::write_page (the page's scripts ship inside libqkv).
#include <cstdio>
#include <memory>

#include <nn/nn.h>
#include <study/page.h>

int main(int argc, char** argv) {
  using namespace qkv;
  if (argc != 2) return 2;
  manual_seed(0);
  struct Model : nn::Module {
    std::shared_ptr<nn::Embedding> embed = register_module("embed", std::make_shared<nn::Embedding>(10, 16));
    std::shared_ptr<nn::MultiHeadAttention> attn =
        register_module("attn", std::make_shared<nn::MultiHeadAttention>(16, 2));
    std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(16, 10));
    Tensor loss(const Tensor& ids, const Tensor& next) const {
      nn::MhaOptions causal;
      causal.causal = true;
      return nn::cross_entropy(head->forward(attn->forward(embed->forward(ids), causal).output), next);
    }
  } model;
  model.eval();
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 1, 4, 1, 5}, {1, 5});
  Tensor next = Tensor::from_vector(std::vector<int64_t>{1, 4, 1, 5, 9}, {1, 5});
  study::Study s = study::record([&] { return model.loss(ids, next); }, {"3", "1", "4", "1", "5"});
  const study::PageSummary page = study::write_page(argv[1], s, model, {.title = "my own model"});
  std::printf("wrote %s: %zu map, %zu bytes, a graph of %zu nodes\n", argv[1], s.maps.size(), page.bytes,
              page.graph_nodes);
  return s.maps.size() == 1 && s.maps[0].causal && page.bytes > 100000 ? 0 : 1;
}
