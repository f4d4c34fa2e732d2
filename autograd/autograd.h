// Everything in autograd/: include this one header to use tensors and ops.
#pragma once

#include "autograd/dtype.h"
#include "autograd/engine.h"
#include "autograd/error.h"
#include "autograd/generator.h"
#include "autograd/gradcheck.h"
#include "autograd/gradcheck_registry.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/logical.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "autograd/parallel.h"
#include "autograd/shape.h"
#include "autograd/tensor.h"
