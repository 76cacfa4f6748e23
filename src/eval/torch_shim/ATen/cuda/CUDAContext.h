// MooreEval torch shim: stands in for <ATen/cuda/CUDAContext.h> (see musacoder/torch_shim_cuda.h).
#pragma once
#include "musacoder/torch_shim_cuda.h"
