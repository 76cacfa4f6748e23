#include "synth/decontaminate.h"

#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <thread>

#include "common/check.h"
#include "common/fs.h"
#include "common/subprocess.h"
#include "eval/compile_pool.h"
#include "eval/python_source.h"

namespace mc::synth {

std::vector<ProblemTrace> trace_problems(const std::vector<std::string>& paths, const std::string& python,
                                         const std::string& harness_dir) {
  std::vector<ProblemTrace> out(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    out[i].path = paths[i];
    out[i].tokens = source_tokens(read_file(paths[i]));
  }
  if (paths.empty()) return out;
  // Shards in parallel: constructing large benchmark models, even on the meta device, takes
  // most of a second each.
  size_t shards = std::clamp<size_t>(eval::half_the_cores(), 1, 8);
  shards = std::min(shards, (paths.size() + 15) / 16);
  std::vector<std::string> errors(shards);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < shards; ++k)
    threads.emplace_back([&, k] {
      std::vector<size_t> mine;
      SubprocessOptions so;
      so.argv = {python, "-m", "musacoder_harness.opgraph"};
      for (size_t i = k; i < paths.size(); i += shards) mine.push_back(i), so.argv.push_back(paths[i]);
      so.env_set["PYTHONPATH"] = harness_dir;
      so.env_set["CUDA_VISIBLE_DEVICES"] = "";  // meta tensors only
      // Benchmark files run here; KernelBench's level 4 asks the Hugging Face hub for configs.
      // Nothing is fetched at run time: offline, they fail at once and count as untraced. With
      // a network that refuses quietly, the hub client's retries held one shard for minutes.
      so.env_set["HF_HUB_OFFLINE"] = "1";
      so.env_set["TRANSFORMERS_OFFLINE"] = "1";
      RunResult r = run_command(so, 900 * 1000);
      if (!r.status.ok()) {
        errors[k] = "tracing op graphs failed (" + r.status.describe() + "): " + r.err.substr(0, 2000);
        return;
      }
      size_t n = 0;
      for (size_t pos = 0; pos < r.out.size() && n < mine.size();) {
        size_t nl = r.out.find('\n', pos);
        std::string line = r.out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        pos = nl == std::string::npos ? r.out.size() : nl + 1;
        if (line.empty() || line[0] != '{') continue;
        auto j = nlohmann::json::parse(line);
        ProblemTrace& t = out[mine[n++]];
        t.traced = j.value("ok", false);
        t.error = j.value("error", "");
        if (!t.traced) continue;
        t.graph_key = j.value("graph_key", "");
        t.op_sequence = j.value("op_sequence", std::vector<std::string>{});
        for (auto& s : j["input_shapes"])
          if (s.is_array()) t.input_shapes.push_back(s.get<std::vector<int64_t>>());
      }
      if (n != mine.size())
        errors[k] = "op-graph tracer answered for " + std::to_string(n) + " of " + std::to_string(mine.size()) + " files";
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors) MC_CHECK(e.empty(), e);
  return out;
}

std::vector<std::string> source_tokens(const std::string& source) {
  static const std::set<std::string> keep = {
      "def", "return", "class", "for", "in", "if", "else", "elif", "while", "with", "import", "from", "as",
      "self", "torch", "nn", "F", "super", "lambda", "and", "or", "not", "True", "False", "None"};
  std::string code = eval::python_views(source).code;
  std::vector<std::string> out;
  bool after_dot = false;
  for (size_t i = 0; i < code.size();) {
    unsigned char c = code[i];
    if (std::isspace(c)) {
      ++i;
      continue;
    }
    if (std::isalpha(c) || c == '_') {
      size_t j = i;
      while (j < code.size() && (std::isalnum(static_cast<unsigned char>(code[j])) || code[j] == '_')) ++j;
      std::string w = code.substr(i, j - i);
      // Attribute names after a dot (torch.relu, nn.Conv2d, x.view) say what is computed.
      out.push_back(after_dot || keep.count(w) ? w : "ID");
      after_dot = false;
      i = j;
      continue;
    }
    if (std::isdigit(c)) {
      size_t j = i;
      while (j < code.size() && (std::isalnum(static_cast<unsigned char>(code[j])) || code[j] == '.')) ++j;
      out.push_back("N");
      after_dot = false;
      i = j;
      continue;
    }
    after_dot = c == '.';
    out.push_back(std::string(1, static_cast<char>(c)));
    ++i;
  }
  return out;
}

namespace {

template <typename T>
double jaccard(const std::multiset<T>& a, const std::multiset<T>& b) {
  if (a.empty() && b.empty()) return 0;
  std::vector<T> inter, uni;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(inter));
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(uni));
  return uni.empty() ? 0 : static_cast<double>(inter.size()) / uni.size();
}

std::multiset<std::string> ngrams(const std::vector<std::string>& toks, size_t n) {
  std::multiset<std::string> s;
  if (toks.size() < n) {
    std::string all;
    for (auto& t : toks) all += t + " ";
    if (!all.empty()) s.insert(all);
    return s;
  }
  for (size_t i = 0; i + n <= toks.size(); ++i) {
    std::string g;
    for (size_t k = 0; k < n; ++k) g += toks[i + k] + " ";
    s.insert(g);
  }
  return s;
}

bool shapes_within(const ProblemTrace& a, const ProblemTrace& b, double f) {
  if (a.input_shapes.size() != b.input_shapes.size()) return false;
  for (size_t i = 0; i < a.input_shapes.size(); ++i) {
    const auto &x = a.input_shapes[i], &y = b.input_shapes[i];
    if (x.size() != y.size()) return false;
    for (size_t d = 0; d < x.size(); ++d) {
      double r = static_cast<double>(std::max<int64_t>(x[d], 1)) / std::max<int64_t>(y[d], 1);
      if (r > f || r < 1.0 / f) return false;
    }
  }
  return true;
}

// The Model class's tokens only (from `class` to the first argument-less def, get_inputs):
// imports and input boilerplate would make every pair look alike.
std::vector<std::string> body_tokens(const std::vector<std::string>& t) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < t.size() && t[i] != "class") ++i;
  for (; i < t.size(); ++i) {
    if (t[i] == "def" && i + 3 < t.size() && t[i + 2] == "(" && t[i + 3] == ")") break;
    out.push_back(t[i]);
  }
  return out;
}

}  // namespace

Decontaminator::Decontaminator(std::vector<ProblemTrace> benchmark, DecontaminationOptions opts)
    : bench_(std::move(benchmark)), opts_(opts) {
  for (size_t i = 0; i < bench_.size(); ++i) {
    const ProblemTrace& b = bench_[i];
    bench_bigrams_.push_back(ngrams(b.op_sequence, 2));
    bench_grams_.push_back(ngrams(body_tokens(b.tokens), 5));
  }
}

size_t Decontaminator::untraced() const {
  size_t n = 0;
  for (auto& b : bench_) n += !b.traced;
  return n;
}

std::optional<Contamination> Decontaminator::check(const ProblemTrace& t, int compute_ops) const {
  auto t_grams = ngrams(body_tokens(t.tokens), 5);
  auto t_bigrams = ngrams(t.op_sequence, 2);
  for (size_t i = 0; i < bench_.size(); ++i) {
    const ProblemTrace& b = bench_[i];
    if (t.traced && b.traced) {
      bool multi = compute_ops >= 2;
      if (t.graph_key == b.graph_key && (multi || t.input_shapes == b.input_shapes))
        return Contamination{"same_graph", b.path, "identical op graph"};
      if (t.op_sequence == b.op_sequence && shapes_within(t, b, opts_.shape_factor))
        return Contamination{"near_copy", b.path, "same op sequence, every input dim within " +
                                                      std::to_string(opts_.shape_factor).substr(0, 3) + "x"};
      if (compute_ops >= 3 && t.op_sequence.size() >= 3 && b.op_sequence.size() >= 3) {
        double s = jaccard(t_bigrams, bench_bigrams_[i]);
        if (s >= opts_.graph_similarity)
          return Contamination{"near_graph", b.path, "op-bigram similarity " + std::to_string(s).substr(0, 4)};
      }
    }
    if (t.traced && b.traced) continue;
    // Fallback for a side that cannot be traced: the normalized source.
    double s = jaccard(t_grams, bench_grams_[i]);
    if (s >= opts_.source_similarity)
      return Contamination{"near_source", b.path, "source similarity " + std::to_string(s).substr(0, 4)};
  }
  return std::nullopt;
}

}  // namespace mc::synth
