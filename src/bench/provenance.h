// Where the evaluated model's training data came from, as far as its folders say: a training
// checkpoint's trainer_state.json names its data (SFT) or problems (RL); `musacoder synth`
// writes report.json beside them, with the benchmark it was decontaminated against (`musacoder
// rft`'s rows lead to the problems that run sampled). The other way round counts too: held-out
// problems that `musacoder synth --decontaminate TRAIN/problems` made (as the recipe does) are
// kept out of that training data. The bench report states what this finds, and says "unknown"
// rather than guessing.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace mc::bench {

// {"status": "decontaminated" | "not_decontaminated" | "other_benchmark" | "unknown",
//  "text": one sentence for the report, "data": [the training files found]}.
// `problems`: what this run evaluates (a folder or problems.jsonl).
nlohmann::json decontamination_note(const std::string& model_dir, const std::string& problems);

}  // namespace mc::bench
