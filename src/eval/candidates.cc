#include "eval/candidates.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "common/check.h"
#include "common/fs.h"

namespace mc::eval {
namespace {

class ProblemIndex {
 public:
  explicit ProblemIndex(const std::vector<ProblemPtr>& problems) : problems_(problems) {}

  // Accepts a key ("L1/19_ReLU"), a stem ("19_ReLU"), a name ("ReLU") or an id (19), with an
  // optional level to disambiguate.
  ProblemPtr find(const std::string& ref, int level, std::string* why) const {
    std::vector<ProblemPtr> hits;
    bool numeric = !ref.empty() && std::all_of(ref.begin(), ref.end(), ::isdigit);
    for (const auto& p : problems_) {
      if (level > 0 && p->level > 0 && p->level != level) continue;
      if (p->key == ref || p->stem == ref || p->name == ref ||
          (numeric && p->id == std::stoi(ref)))
        hits.push_back(p);
    }
    if (hits.size() == 1) return hits[0];
    *why = hits.empty() ? "no problem matches '" + ref + "'"
                        : "'" + ref + "' matches " + std::to_string(hits.size()) +
                              " problems; give the level or the full key (e.g. L1/19_ReLU)";
    return nullptr;
  }

 private:
  const std::vector<ProblemPtr>& problems_;
};

Candidate from_file(const fs::path& file, const std::string& ref, int level, const std::string& sample,
                    const ProblemIndex& index) {
  Candidate c;
  c.problem_ref = ref;
  c.sample_id = sample;
  c.origin = file.string();
  std::string why;
  c.problem = index.find(ref, level, &why);
  if (!c.problem) c.input_error = why;
  try {
    c.answer = read_file(file);
  } catch (const Error& e) {
    c.input_error = e.what();
  }
  return c;
}

bool is_solution_file(const fs::path& p) {
  static const std::set<std::string> kExt = {".py", ".cu", ".md", ".txt"};
  return kExt.count(p.extension().string()) > 0;
}

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

// <stem>.<ext>, <stem>/<sample>.<ext> or KernelBench's run names, at the top or inside a level
// folder (level1/, level_1/: the layout of KernelBench and of `musacoder synth`).
void scan_folder(const fs::path& dir, int level, const ProblemIndex& index, std::vector<Candidate>& out) {
  static const std::regex kb_run(R"(level_(\d+)_problem_(\d+)_sample_(\d+))");
  static const std::regex level_dir(R"(level_?(\d+))");
  for (const auto& e : sorted_entries(dir)) {
    std::smatch m;
    if (fs::is_directory(e)) {
      std::string name = e.filename().string();
      if (level == 0 && std::regex_match(name, m, level_dir)) {
        scan_folder(e, std::stoi(m[1].str()), index, out);
        continue;
      }
      for (const auto& f : sorted_entries(e))
        if (fs::is_regular_file(f) && is_solution_file(f))
          out.push_back(from_file(f, name, level, f.stem().string(), index));
      continue;
    }
    if (!is_solution_file(e)) continue;
    std::string stem = e.stem().string();
    if (std::regex_search(stem, m, kb_run))
      out.push_back(from_file(e, m[2].str(), std::stoi(m[1].str()), m[3].str(), index));
    else
      out.push_back(from_file(e, stem, level, "0", index));
  }
}

}  // namespace

Candidate candidate_from_file(const std::string& path, ProblemPtr problem) {
  Candidate c;
  c.problem = std::move(problem);
  c.problem_ref = c.problem ? c.problem->key : "";
  c.origin = path;
  try {
    c.answer = read_file(path);
  } catch (const Error& e) {
    c.input_error = e.what();
  }
  return c;
}

std::vector<Candidate> load_candidates(const std::string& path,
                                       const std::vector<ProblemPtr>& problems) {
  ProblemIndex index(problems);
  std::vector<Candidate> out;
  MC_CHECK(fs::exists(path), "solutions not found: ", path);
  if (fs::is_directory(path)) {
    scan_folder(path, 0, index, out);
    MC_CHECK(!out.empty(), "no solution files (*.py, *.cu, *.md, *.txt) in ", path);
    return out;
  }
  std::ifstream in(path);
  MC_CHECK(in.good(), "cannot read ", path);
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Candidate c;
    c.origin = path + ":" + std::to_string(lineno);
    try {
      auto j = nlohmann::json::parse(line);
      MC_CHECK(j.is_object(), "not a JSON object");
      MC_CHECK(j.contains("problem"), "no \"problem\" field");
      const auto& p = j["problem"];
      c.problem_ref = p.is_number_integer() ? std::to_string(p.get<int>()) : p.get<std::string>();
      if (j.contains("sample_id"))
        c.sample_id = j["sample_id"].is_string() ? j["sample_id"].get<std::string>()
                                                 : j["sample_id"].dump();
      for (const char* k : {"answer", "solution", "code", "completion"})
        if (j.contains(k) && j[k].is_string()) {
          c.answer = j[k];
          break;
        }
      MC_CHECK(j.contains("answer") || j.contains("solution") || j.contains("code") ||
                   j.contains("completion"),
               "no \"answer\", \"solution\", \"code\" or \"completion\" field");
      std::string why;
      c.problem = index.find(c.problem_ref, j.value("level", 0), &why);
      if (!c.problem) c.input_error = why;
    } catch (const std::exception& e) {
      c.input_error = std::string("malformed JSONL line: ") + e.what();
    }
    out.push_back(std::move(c));
  }
  MC_CHECK(!out.empty(), "no candidates in ", path);
  return out;
}

}  // namespace mc::eval
