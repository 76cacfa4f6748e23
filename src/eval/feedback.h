// Turns a result into the text a model reads before repairing its answer in the next turn.
#pragma once

#include <string>

#include "eval/result.h"

namespace mc::eval {

std::string make_feedback(const EvalResult& r);

}  // namespace mc::eval
