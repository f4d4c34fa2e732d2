// recompute: forward without a graph; backward replays the segment with its
// random state and back-propagates through the replayed graph.
#include "autograd/recompute.h"

#include "autograd/engine.h"

namespace qkv {

QKV_DECLARE_OP(recompute);

// d inputs = the gradients of fn(inputs) replayed with grad on, from the output gradient g
Tensor recompute(const SegmentFn& fn, const std::vector<Tensor>& inputs, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  Generator::State state = g.state();
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn(inputs);
  }
  if (!grad_enabled()) return out;
  // A segment that hands back an input (an identity, a dropout in eval mode): record onto an alias.
  for (const Tensor& input : inputs)
    if (out.defined() && input.defined() && out.impl() == input.impl()) out = alias_with_shape(out, out.shape());
  // fn may read parameters that need gradients without any input needing one;
  // the node is recorded whenever grad mode is on, with the inputs as its edges.
  std::vector<bool> wants(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) wants[i] = inputs[i].defined() && inputs[i].requires_grad();
  record("recompute", out, inputs, [fn, inputs, wants, state, &g](const Tensor& grad) -> std::vector<Tensor> {
    std::vector<Tensor> replay_inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensor t = inputs[i].defined() ? inputs[i].detach() : Tensor();
      if (wants[i]) t.requires_grad_();
      replay_inputs.push_back(t);
    }
    Generator::State now = g.state();
    g.set_state(state);
    Tensor replayed;
    {
      GradModeGuard grad_on(true);
      replayed = fn(replay_inputs);
    }
    g.set_state(now);
    if (replayed.requires_grad()) replayed.backward(grad);
    std::vector<Tensor> grads;
    for (size_t i = 0; i < inputs.size(); ++i) grads.push_back(wants[i] ? replay_inputs[i].grad() : Tensor());
    return grads;
  });
  return out;
}

}  // namespace qkv
