// Fast-tier stand-in for <torch/types.h>; see extension.h beside this file.
#pragma once
#include <torch/extension.h>
