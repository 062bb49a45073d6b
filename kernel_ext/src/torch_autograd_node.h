#pragma once
// torch::autograd::Node, wherever this torch declares it. torch 2.12 moved it from
// torch/csrc/autograd/function.h to node.h: 2.11 (the GPU machine's) ships only function.h,
// 2.12 to 2.15 both. The one move between torch 2.11 and 2.15 that torchleak's C++ follows;
// everything else it spells with `auto` where torch's types changed.
#if __has_include(<torch/csrc/autograd/node.h>)
#    include <torch/csrc/autograd/node.h>
#else
#    include <torch/csrc/autograd/function.h>
#endif
