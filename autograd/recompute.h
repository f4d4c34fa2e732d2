// Activation checkpointing, called "recompute" here (a checkpoint is a
// safetensors file in qkv): a segment's forward runs without keeping its
// graph, and runs again during backward to produce its gradients.
#pragma once

#include <functional>
#include <vector>

#include "autograd/generator.h"
#include "autograd/tensor.h"

namespace qkv {

using SegmentFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

/// fn(inputs), keeping only the inputs for backward instead of every
/// activation inside fn. Backward replays fn with grad mode on and `gen`
/// (the default generator when null) put back to its state at the first call,
/// so dropout draws the same masks; afterwards gen is as backward found it.
/// Parameters fn reads (captured, not passed) receive their gradients during
/// that replay. The result equals fn(inputs) and its gradients are
/// bit-identical to those of fn(inputs) (the same kernels run on the same data).
/// The backward holds `gen` by reference, and fn and what it captures by
/// value: `gen` must outlive it, and fn must return a float tensor. The
/// parameters fn reads are not the node's inputs, so an in-place write to one
/// before backward is not detected (see Storage::version).
Tensor recompute(const SegmentFn& fn, const std::vector<Tensor>& inputs, Generator* gen = nullptr);

}  // namespace qkv
