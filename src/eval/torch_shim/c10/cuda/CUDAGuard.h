// MooreEval torch shim: stands in for <c10/cuda/CUDAGuard.h> (see musacoder/torch_shim_cuda.h).
#pragma once
#include "musacoder/torch_shim_cuda.h"
