// Everything in nn/ (and autograd/): include this one header to build models.
#pragma once

#include "autograd/autograd.h"
#include "nn/attention.h"
#include "nn/classifiers.h"
#include "nn/dropout.h"
#include "nn/feed_forward.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/model_kinds.h"
#include "nn/models.h"
#include "nn/module.h"
#include "nn/multihead_attention.h"
#include "nn/normalization.h"
#include "nn/parts.h"
#include "nn/position.h"
#include "nn/recommender.h"
#include "nn/transformer.h"
