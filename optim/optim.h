// Everything in optim/: optimizers, gradient clipping, schedules, training checkpoints.
#pragma once

#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/training_state.h"
