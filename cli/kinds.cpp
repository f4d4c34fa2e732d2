#include "kinds.h"

#include <algorithm>

#include "model_spec.h"

namespace qkv::cli {

namespace {

void nothing(ModelSpec&, const Task&) {}
void nothing_small(ModelSpec&) {}

// A ViT's image is its task's, cut into patches of 2 x 2 unless --patch says otherwise.
void fill_vit(ModelSpec& spec, const Task& task) {
  if (spec.image == 0) spec.image = task.image_side();
  if (spec.patch == 0) spec.patch = 2;
}

const std::vector<KindRow> kKinds = {
    {nn::gpt_kind,
     "GPT",
     "",
     1,
     "; rows are the queries, columns the keys: each token attends only to itself and those before it (causal; "
     "with window:W attention, only the W before it)",
     {TaskFamily::Sequence, TaskFamily::Text},
     /*causal=*/true,
     /*scores_classes=*/false,
     /*fixed_context=*/false,
     /*fused_head=*/true,
     nullptr,
     // input SEP answer EOS, the last not fed
     [](const nn::ModelShape&, const Task& t) { return t.max_input() + t.max_answer() + 1; },
     nothing,
     nothing_small,
     drive_gpt},
    {nn::seq2seq_kind,
     "Seq2Seq",
     " per side",
     3,
     "; cross-attention rows are the decoder's tokens (its start mark, then the answer), columns the input's",
     {TaskFamily::Sequence},
     false,
     false,
     false,
     false,
     nullptr,
     // the encoder reads the input; the decoder SEP answer
     [](const nn::ModelShape&, const Task& t) { return std::max(t.max_input(), t.max_answer() + 1); },
     nothing,
     nothing_small,
     drive_seq2seq},
    {nn::encoder_kind,
     "Encoder classifier",
     "",
     1,
     "; row and column 0 are the [CLS] token, whose final state is classified",
     {TaskFamily::TokenLabel},
     false,
     true,
     false,
     false,
     "pooling",
     [](const nn::ModelShape& s, const Task& t) { return t.max_input() + (s.pooling == "cls" ? 1 : 0); },
     nothing,
     nothing_small,
     drive_encoder},
    {nn::vit_kind,
     "ViT",
     "",
     1,
     "; row and column 0 are the [CLS] token, the others the image's patches in reading order; the [CLS] row is "
     "also drawn over the image itself",
     {TaskFamily::ImageLabel},
     false,
     true,
     true,
     false,
     "patch",
     [](const nn::ModelShape& s, const Task& t) {
       int64_t per_row = s.patch > 0 ? t.image_side() / s.patch : 0;
       return per_row * per_row + 1;
     },
     fill_vit,
     // 4 patches of 4 x 4: small enough to check entry by entry
     [](ModelSpec& spec) { spec.patch = 4; },
     drive_vit},
    {nn::recommender_kind,
     "Recommender",
     "",
     1,
     "; each item attends to the items before it (causal)",
     {TaskFamily::NextItem},
     true,
     false,
     false,
     false,
     nullptr,
     [](const nn::ModelShape&, const Task& t) { return t.max_input(); },
     nothing,
     nothing_small,
     drive_recommender},
};

}  // namespace

const std::vector<KindRow>& kind_table() { return kKinds; }

std::string kind_names(const char* separator) {
  std::string names;
  for (const KindRow& k : kKinds) names += (names.empty() ? "" : separator) + k.name();
  return names;
}

bool is_kind(const std::string& kind) {
  return std::any_of(kKinds.begin(), kKinds.end(), [&](const KindRow& k) { return kind == k.name(); });
}

const KindRow& kind_row(const std::string& kind) {
  for (const KindRow& k : kKinds)
    if (kind == k.name()) return k;
  throw Error(cat("unknown model '", printable(kind), "' (", kind_names(), ")"));
}

bool learns(const KindRow& kind, const TaskRow& task) {
  return std::find(kind.learns.begin(), kind.learns.end(), task.family) != kind.learns.end();
}

const KindRow& default_kind(const TaskRow& task) {
  for (const KindRow& k : kKinds)
    if (learns(k, task)) return k;
  throw Error(cat("no model kind learns the ", task.name, " task"));
}

const TaskRow& first_task(const KindRow& kind) {
  if (learns(kind, task_row(kDefaultTask))) return task_row(kDefaultTask);
  for (const TaskRow& t : task_table())
    if (learns(kind, t)) return t;
  throw Error(cat("the ", kind.name(), " model learns no task"));
}

}  // namespace qkv::cli
