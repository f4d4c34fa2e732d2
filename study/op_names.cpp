// What a reader calls each op the engine records (op_names.h).
#include "study/op_names.h"

#include <map>

namespace qkv::study {

std::string readable_op(const std::string& op, const std::string& scope, bool causal_model) {
  if (op == "masked_fill") {
    // Causal: a GPT's or recommender's attention, and a Seq2Seq decoder's self-attention.
    bool causal = scope.find("cross_attn") == std::string::npos && (causal_model || scope.rfind("decoder", 0) == 0);
    bool padding = !causal;
    return padding ? "padding mask" : "causal mask";
  }
  static const std::map<std::string, std::string> names{{"mul_scalar", "scale"},
                                                        {"matmul", "matmul"},
                                                        {"linear", "linear (x·Wᵀ + b)"},
                                                        {"add", "add"},
                                                        {"softmax", "softmax"},
                                                        {"gelu_tanh", "GELU"},
                                                        {"layer_norm", "layer norm"},
                                                        {"index_select", "lookup"},
                                                        {"cross_entropy", "cross-entropy"},
                                                        {"permute", "permute"},
                                                        {"reshape", "reshape"},
                                                        {"concat", "concat"},
                                                        {"expand", "expand"},
                                                        {"narrow", "narrow"},
                                                        {"dropout", "dropout"},
                                                        {"patchify", "patches"},
                                                        {"masked_mean", "mean over tokens"}};
  auto it = names.find(op);
  if (it != names.end()) return it->second;
  std::string text = op;
  for (char& c : text)
    if (c == '_') c = ' ';
  return text;
}

}  // namespace qkv::study
