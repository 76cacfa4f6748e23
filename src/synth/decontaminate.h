// Decontamination against a benchmark folder (e.g. a KernelBench checkout): no kept problem
// may be the same op graph as a benchmark problem, or a near-copy of one.
//
// Both sides are read the same way: their ATen op graphs, traced on the meta device by the
// harness (python/musacoder_harness/opgraph.py), so aliases (F.relu / torch.relu / nn.ReLU) and
// renamed variables do not hide a copy; plus a fingerprint of the source with identifiers
// normalized, for files that cannot be traced. A problem is dropped when
//   same_graph   its op graph (ops, wiring, arguments) equals a benchmark problem's, and it
//                has several compute ops (as generated) or the same input shapes;
//   near_copy    it has the benchmark problem's op sequence and every input dim within
//                `shape_factor` of the benchmark's;
//   near_graph   (three or more generated ops) the ATen op-bigram Jaccard similarity is
//                >= `graph_similarity`;
//   near_source  (when either side cannot be traced) the Model class's normalized source
//                5-gram Jaccard similarity is >= `source_similarity`.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc::synth {

struct ProblemTrace {
  std::string path;
  bool traced = false;
  std::string error;                        // why tracing failed
  std::string graph_key;                    // digest of ops + wiring + arguments
  std::vector<std::string> op_sequence;     // canonical ATen ops in order
  std::vector<std::vector<int64_t>> input_shapes;  // tensor inputs
  std::vector<std::string> tokens;          // normalized source tokens
};

// Traces every file in one harness process. Throws mc::Error when the harness cannot start.
std::vector<ProblemTrace> trace_problems(const std::vector<std::string>& paths, const std::string& python,
                                         const std::string& harness_dir);

// Normalized token stream: identifiers other than torch/nn/F names and Python keywords become
// "ID", numbers "N", strings and comments vanish.
std::vector<std::string> source_tokens(const std::string& source);

struct DecontaminationOptions {
  double shape_factor = 2.0;
  double graph_similarity = 0.8;
  double source_similarity = 0.85;
};

struct Contamination {
  std::string rule;       // same_graph | near_copy | near_graph | near_source
  std::string benchmark;  // path of the benchmark problem
  std::string detail;
};

class Decontaminator {
 public:
  Decontaminator(std::vector<ProblemTrace> benchmark, DecontaminationOptions opts = {});
  // `compute_ops`: the candidate's own op count (one PyTorch call may be several ATen ops).
  std::optional<Contamination> check(const ProblemTrace& t, int compute_ops) const;
  size_t size() const { return bench_.size(); }
  size_t untraced() const;

 private:
  std::vector<ProblemTrace> bench_;
  // Per benchmark problem, computed once: ATen op bigrams and Model-class source 5-grams.
  std::vector<std::multiset<std::string>> bench_bigrams_, bench_grams_;
  DecontaminationOptions opts_;
};

}  // namespace mc::synth
