// MooreEval torch shim: stands in for <ATen/Dispatch.h> (see musacoder/torch_shim.h).
#pragma once
#include "musacoder/torch_shim.h"
