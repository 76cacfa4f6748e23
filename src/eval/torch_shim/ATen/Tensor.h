// MooreEval torch shim: stands in for <ATen/Tensor.h> (see musacoder/torch_shim.h).
#pragma once
#include "musacoder/torch_shim.h"
