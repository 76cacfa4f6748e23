// MooreEval torch shim: stands in for <ATen/ATen.h> (see musacoder/torch_shim.h).
#pragma once
#include "musacoder/torch_shim.h"
