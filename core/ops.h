// Every core op, one include.
#pragma once
#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/rng.h"
#include "core/tensor.h"
