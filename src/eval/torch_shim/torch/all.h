// MooreEval torch shim: stands in for <torch/all.h> (see musacoder/torch_shim.h).
#pragma once
#include "musacoder/torch_shim.h"
