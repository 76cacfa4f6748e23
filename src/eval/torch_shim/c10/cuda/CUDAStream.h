// MooreEval torch shim: stands in for <c10/cuda/CUDAStream.h> (see musacoder/torch_shim_cuda.h).
#pragma once
#include "musacoder/torch_shim_cuda.h"
