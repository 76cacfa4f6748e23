// The task prompt a policy (or an LLM teacher) sees for a problem: the PyTorch program, its
// metadata (input and output shapes, strides, dtypes), the solution format, and the steps to
// reason through before writing code. Also the repair turn built from MooreEval's feedback.
// backend "musa" asks for MUSA kernels (mcc, musaStream_t, torch_musa's load_inline) instead.
#pragma once

#include <string>

#include "synth/graph.h"

namespace mc::synth {

std::string task_prompt(const Graph& g, const std::string& problem_source, const std::string& format,
                        const std::string& backend = "cuda");
// The same task for a problem known only by its source (a KernelBench file): without the
// input and state tables, which only the synthesizer's graph knows.
std::string task_prompt(const std::string& problem_source, const std::string& format,
                        const std::string& backend = "cuda");
std::string repair_prompt(const std::string& feedback);
// An answer as a model would write it: the solution in a fenced code block.
std::string as_answer(const std::string& solution, const std::string& format, const std::string& backend = "cuda");

}  // namespace mc::synth
