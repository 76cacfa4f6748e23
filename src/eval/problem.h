// KernelBench-format problems: a Python file with `class Model`, `get_inputs()` and
// `get_init_inputs()`. Problems are immutable values, shared freely between threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace mc::eval {

struct Problem {
  std::string key;     // unique within a run: "L<level>/<stem>" or "<stem>"
  std::string stem;    // file name without .py: "19_ReLU"
  std::string name;    // stem without the id prefix: "ReLU"
  int id = -1;         // numeric prefix of the file name, -1 if none
  int level = 0;       // 0 when not read from a levelN folder
  std::string path;    // absolute path of the .py file
  std::string source;  // file contents
};
using ProblemPtr = std::shared_ptr<const Problem>;

// Throws mc::Error naming the file and what is missing ("no `def get_inputs`").
ProblemPtr load_problem(const std::string& path, int level = 0);

// Loads every problem of a folder. `dir` may be a KernelBench checkout (or its KernelBench/
// subfolder), which holds level1/ level2/ ...; `level` (> 0) picks one. Otherwise every *.py
// directly in `dir` is a problem. Sorted by (level, id, stem). Throws if none is found.
std::vector<ProblemPtr> load_problems(const std::string& dir, int level = 0);

}  // namespace mc::eval
