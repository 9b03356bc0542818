// Tests that start several CPU ranks talk through Gloo, and a LibTorch wheel
// (the CUDA build on the GPU machine) ships no Gloo headers, so there the
// executor refuses several CPU ranks (executor/torch_compat.h). Those tests
// skip on such a build and say why; configure with -DLLMPLAN_WITH_GLOO=OFF
// to see the same on a machine that has Gloo.
#pragma once

#include <gtest/gtest.h>

#include "executor/comm/gloo_communicator.h"

#define LLMPLAN_SKIP_WITHOUT_GLOO()                                       \
  if (!::llmplan::executor::GlooCommunicatorsAvailable())                 \
  GTEST_SKIP() << "needs several CPU ranks, and this LibTorch build has " \
                  "no Gloo headers (CPU collectives)"
