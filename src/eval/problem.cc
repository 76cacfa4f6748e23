#include "eval/problem.h"

#include <algorithm>
#include <regex>

#include "common/check.h"
#include "common/fs.h"

namespace mc::eval {
namespace {

void require(const std::string& src, const std::regex& re, const std::string& path,
             const char* what) {
  MC_CHECK(std::regex_search(src, re), "malformed problem ", path, ": no `", what,
           "` found (a KernelBench problem defines class Model, get_inputs and get_init_inputs)");
}

}  // namespace

ProblemPtr load_problem(const std::string& path, int level) {
  fs::path p = fs::absolute(path);
  MC_CHECK(fs::is_regular_file(p), "problem file not found: ", path);
  auto prob = std::make_shared<Problem>();
  prob->path = p.string();
  prob->source = read_file(p);
  prob->stem = p.stem().string();
  prob->level = level;
  static const std::regex id_re(R"(^(\d+)_(.*)$)");
  std::smatch m;
  if (std::regex_match(prob->stem, m, id_re)) {
    prob->id = std::stoi(m[1]);
    prob->name = m[2];
  } else {
    prob->name = prob->stem;
  }
  prob->key = level > 0 ? "L" + std::to_string(level) + "/" + prob->stem : prob->stem;
  static const std::regex model_re(R"((^|\n)class\s+Model\s*[\(:])");
  static const std::regex inputs_re(R"((^|\n)def\s+get_inputs\s*\()");
  static const std::regex init_re(R"((^|\n)def\s+get_init_inputs\s*\()");
  require(prob->source, model_re, prob->path, "class Model");
  require(prob->source, inputs_re, prob->path, "def get_inputs");
  require(prob->source, init_re, prob->path, "def get_init_inputs");
  return prob;
}

std::vector<ProblemPtr> load_problems(const std::string& dir_arg, int level) {
  fs::path dir = dir_arg;
  MC_CHECK(fs::is_directory(dir), "problems folder not found: ", dir_arg);
  if (fs::is_directory(dir / "KernelBench")) dir /= "KernelBench";
  std::vector<std::pair<fs::path, int>> files;
  auto add_folder = [&](const fs::path& d, int lvl) {
    for (const auto& e : fs::directory_iterator(d))
      if (e.is_regular_file() && e.path().extension() == ".py" &&
          e.path().filename().string()[0] != '_')
        files.emplace_back(e.path(), lvl);
  };
  bool has_levels = false;
  for (int l = 1; l <= 9; ++l) has_levels |= fs::is_directory(dir / ("level" + std::to_string(l)));
  if (has_levels) {
    for (int l = 1; l <= 9; ++l) {
      fs::path d = dir / ("level" + std::to_string(l));
      if ((level == 0 || level == l) && fs::is_directory(d)) add_folder(d, l);
    }
    MC_CHECK(level == 0 || !files.empty(), "no level", level, " problems under ", dir.string());
  } else {
    add_folder(dir, level);
  }
  MC_CHECK(!files.empty(), "no problem files (*.py) found in ", dir_arg);
  std::vector<ProblemPtr> out;
  for (const auto& [f, l] : files) out.push_back(load_problem(f.string(), l));
  std::sort(out.begin(), out.end(), [](const ProblemPtr& a, const ProblemPtr& b) {
    return std::tie(a->level, a->id, a->stem) < std::tie(b->level, b->id, b->stem);
  });
  return out;
}

}  // namespace mc::eval
