#include "cli/selftest_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cli/run_options.h"
#include "common/check.h"
#include "common/fs.h"
#include "eval/candidates.h"
#include "eval/problem.h"
#include "eval/selftest.h"

namespace mc::cli {

using eval::Candidate;

struct SelftestCommand::Impl {
  CLI::App* cmd = nullptr;
  RunOptions o;
  std::string levels = "1,2,3";
  std::string out_dir = "selftest";
  int negatives = 3;  // problems per level that also get the negative controls
  int limit = 0;      // problems per level (0: all)
  bool resume = false;  // keep the rows already in --out, judge only what is missing
  std::vector<std::string> redo;  // with --resume: rows to judge again (see --redo)
};

namespace {

// Whether a kept row is to be judged again: an item names a variant ("half"), a group
// ("negatives", "honest"), a problem (its key "L3/2_ShallowWideMLP" or stem), or one candidate
// ("L3/44_MiniGPTBlock:reorder").
bool redo_row(const std::vector<std::string>& items, const std::string& key, const std::string& variant) {
  const std::string stem = key.substr(key.find('/') == std::string::npos ? 0 : key.find('/') + 1);
  for (const auto& it : items) {
    if (it == variant || it == key || it == stem || it == key + ":" + variant || it == stem + ":" + variant) return true;
    if (it == "negatives" && eval::selftest_is_negative(variant)) return true;
    if (it == "honest" && !eval::selftest_is_negative(variant)) return true;
  }
  return false;
}

}  // namespace

SelftestCommand::SelftestCommand(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cmd = app.add_subcommand(
      "selftest", "verify valid re-implementations of every problem (float64, another summation "
                  "order, renamed parameters) and negative controls: no honest kernel may be rejected");
  add_run_options(m.cmd, m.o);
  m.cmd->add_option("--levels", m.levels, "comma-separated levels of a KernelBench checkout")
      ->capture_default_str();
  m.cmd->add_option("--out", m.out_dir, "folder for rows.jsonl, report.json and report.txt")
      ->capture_default_str();
  m.cmd->add_option("--negatives", m.negatives, "problems per level that also get the negative controls")
      ->capture_default_str();
  m.cmd->add_option("--limit", m.limit, "problems per level (0: all)")->capture_default_str();
  m.cmd->add_flag("--resume", m.resume,
                  "keep the rows already in --out and judge only the candidates they lack (runs "
                  "split over several slices of GPU time)");
  m.cmd->add_option("--redo", m.redo,
                    "with --resume, judge these rows again: variants (half), negatives, honest, problems "
                    "(L3/2_ShallowWideMLP) or candidates (L3/44_MiniGPTBlock:reorder), comma-separated")
      ->delimiter(',');
}

SelftestCommand::~SelftestCommand() = default;

namespace {
constexpr double kSelftestTrialFloorS = 30;  // seconds (the first trial gets twice that)
}  // namespace

std::optional<int> SelftestCommand::run() {
  Impl& m = *impl_;
  if (!*m.cmd) return std::nullopt;
  std::vector<int> levels;
  {
    std::stringstream ss(m.levels);
    for (std::string tok; std::getline(ss, tok, ',');) {
      MC_CHECK(!tok.empty() && tok.find_first_not_of("0123456789") == std::string::npos,
               "--levels takes comma-separated level numbers, got '", m.levels, "'");
      levels.push_back(std::stoi(tok));
    }
  }
  MC_CHECK(!levels.empty(), "--levels names no level");
  // Verdicts on numerics alone: legality rules are off in this mode, and nothing is timed.
  m.o.cfg.legality = false;
  m.o.cfg.timing = false;
  m.o.skip_static = true;
  // Its re-implementations run the reference on the CPU or with cuDNN off, by design hundreds of
  // times slower than the reference on the GPU (two honest ones ran past the 10 s limit of a
  // fast reference on the H100). No candidate here hangs and speed is not what this mode checks:
  // the limits get a wide floor.
  m.o.cfg.trial_timeout_floor_s = std::max(m.o.cfg.trial_timeout_floor_s, kSelftestTrialFloorS);
  fs::create_directories(m.out_dir);
  const fs::path rows_path = fs::path(m.out_dir) / "rows.jsonl";
  const fs::path wall_path = fs::path(m.out_dir) / "wall.json";
  std::vector<eval::EvalResult> all;
  std::set<std::pair<std::string, std::string>> done;  // (problem key, variant)
  nlohmann::json wall_so_far = nlohmann::json::object();  // seconds per level over every slice
  MC_CHECK(m.redo.empty() || m.resume, "--redo applies to the rows of a run: give --resume too");
  for (const auto& it : m.redo) {
    const bool variant = it == "negatives" || it == "honest" ||
                         std::count(eval::kSelftestHonest.begin(), eval::kSelftestHonest.end(), it) ||
                         eval::selftest_is_negative(it);
    const bool named = !it.empty() && (std::isdigit(static_cast<unsigned char>(it[0])) ||
                                       it.find('/') != std::string::npos || it.find(':') != std::string::npos);
    if (variant || named) continue;
    std::string known;
    for (const auto* vs : {&eval::kSelftestHonest, &eval::kSelftestNegative})
      for (const auto& v : *vs) known += v + ", ";
    throw Error(str_cat("--redo: '", it, "' is no variant (", known, "negatives, honest), problem or candidate"));
  }
  int redone = 0;
  if (m.resume && fs::exists(rows_path)) {
    std::ifstream in(rows_path);
    int lineno = 0, unread = 0;
    for (std::string line; std::getline(in, line);) {
      ++lineno;
      if (line.empty()) continue;
      try {
        auto r = eval::result_from_json(nlohmann::json::parse(line));
        if (r.is_infra()) continue;  // judged again: an infra error is never a verdict
        if (redo_row(m.redo, r.problem_key, r.sample_id)) {
          ++redone;
          continue;
        }
        done.insert({r.problem_key, r.sample_id});
        all.push_back(std::move(r));
      } catch (const std::exception& e) {  // a row cut short by a killed run, or an older format
        if (++unread <= 3) fmt::print(stderr, "selftest: {}:{} skipped ({})\n", rows_path.string(), lineno, e.what());
      }
    }
    if (unread > 3)
      fmt::print(stderr, "selftest: {} rows of {} skipped in all (the first 3 above); they are judged again\n", unread,
                 rows_path.string());
    if (fs::exists(wall_path)) wall_so_far = nlohmann::json::parse(read_file(wall_path));
    fmt::print(stderr, "selftest: resuming with {} rows already judged ({} to judge again: --redo)\n", all.size(),
               redone);
  }
  {  // rewrite without the infra rows and cut lines, so the file holds one row per candidate
    std::string kept;
    for (const auto& r : all) kept += eval::to_json(r).dump() + "\n";
    write_file_atomic(rows_path, kept);
  }
  std::ofstream rows_out(rows_path, std::ios::app);
  MC_CHECK(rows_out.good(), "cannot write ", rows_path.string());
  auto ev = make_evaluator(m.o);
  // Every level in one queue: judged level by level, the GPUs of a several-GPU run waited for
  // each level's last large problem. A level's wall is then the time until its last verdict.
  std::vector<Candidate> cands;
  for (int level : levels) {
    auto problems = eval::load_problems(m.o.problems, level);
    if (m.limit > 0 && static_cast<int>(problems.size()) > m.limit) problems.resize(m.limit);
    size_t before = cands.size();
    for (auto& c : eval::selftest_candidates(problems, m.negatives))
      if (!done.count({c.problem->key, c.sample_id})) cands.push_back(std::move(c));
    fmt::print(stderr, "selftest: level {}: {} problems, {} candidates to judge\n", level,
               problems.size(), cands.size() - before);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::map<int, double> last_verdict;  // level -> seconds from t0 to its last verdict in this slice
  auto rows = ev->run(cands, [&](const eval::EvalResult& r) {
    rows_out << eval::to_json(r).dump() << "\n";
    rows_out.flush();
    last_verdict[r.level] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<eval::SelftestLevel> timed;
  for (int level : levels) {
    std::string key = std::to_string(level);
    wall_so_far[key] = wall_so_far.value(key, 0.0) + last_verdict[level];
    timed.push_back({level, wall_so_far[key].get<double>()});
  }
  if (!wall_so_far.contains("all")) {  // slices before the one queue judged level after level
    double sum = 0;
    for (const auto& [k, v] : wall_so_far.items()) sum += v.get<double>();
    wall_so_far["all"] = sum;
  }
  wall_so_far["all"] = wall_so_far["all"].get<double>() + wall;
  write_file_atomic(wall_path, wall_so_far.dump() + "\n");
  all.insert(all.end(), rows.begin(), rows.end());
  auto report = eval::selftest_report(all, timed, wall_so_far["all"].get<double>());
  std::string table = eval::selftest_table(report);
  write_file_atomic(fs::path(m.out_dir) / "report.json", report.dump(2) + "\n");
  write_file_atomic(fs::path(m.out_dir) / "report.txt", table);
  fmt::print("{}", table);
  return report["passed"].get<bool>() ? 0 : 1;
}

}  // namespace mc::cli
