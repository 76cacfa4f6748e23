// MooreEval torch shim: stands in for <c10/cuda/CUDAException.h> (see musacoder/torch_shim_cuda.h).
#pragma once
#include "musacoder/torch_shim_cuda.h"
