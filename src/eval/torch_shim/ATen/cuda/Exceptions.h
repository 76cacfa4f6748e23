// MooreEval torch shim: stands in for <ATen/cuda/Exceptions.h> (see musacoder/torch_shim_cuda.h).
#pragma once
#include "musacoder/torch_shim_cuda.h"
