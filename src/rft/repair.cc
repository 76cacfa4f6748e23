#include "rft/repair.h"

#include <fstream>
#include <map>
#include <set>

#include "common/check.h"
#include "common/jsonl.h"
#include "synth/prompt.h"

namespace mc::rft {

using nlohmann::json;

std::vector<json> repair_rows(const std::vector<FailedAnswer>& failed, const std::vector<PassingAnswer>& passing,
                              int per_problem) {
  std::vector<json> out;
  if (per_problem <= 0) return out;
  std::map<std::string, std::vector<const PassingAnswer*>> targets;
  for (const auto& p : passing) targets[p.problem].push_back(&p);
  std::map<std::string, std::vector<const FailedAnswer*>> by_problem;
  std::vector<std::string> order;  // problems in the order of their first failed answer
  for (const auto& f : failed) {
    if (f.feedback.empty() || !targets.count(f.problem)) continue;
    if (by_problem[f.problem].empty()) order.push_back(f.problem);
    by_problem[f.problem].push_back(&f);
  }
  for (const auto& problem : order) {
    const auto& fails = by_problem[problem];
    std::vector<const FailedAnswer*> chosen;
    std::set<std::string> verdicts;
    std::set<const FailedAnswer*> taken;
    for (const auto* f : fails)  // one of each verdict first
      if (static_cast<int>(chosen.size()) < per_problem && verdicts.insert(f->verdict).second) {
        chosen.push_back(f);
        taken.insert(f);
      }
    for (const auto* f : fails)
      if (static_cast<int>(chosen.size()) < per_problem && !taken.count(f)) chosen.push_back(f);
    const auto& t = targets[problem];
    for (size_t k = 0; k < chosen.size(); ++k) {
      const FailedAnswer& f = *chosen[k];
      const PassingAnswer& p = *t[k % t.size()];
      out.push_back({{"messages", json::array({{{"role", "user"}, {"content", f.prompt}},
                                               {{"role", "assistant"}, {"content", f.answer}, {"weight", 0}},
                                               {{"role", "user"}, {"content", synth::repair_prompt(f.feedback)}},
                                               {{"role", "assistant"}, {"content", p.answer}}})},
                     {"problem", problem},
                     {"failed_sample", f.sample},
                     {"failed_verdict", f.verdict},
                     {"answer_from", p.from},
                     {"source", "rft-repair"}});
    }
  }
  return out;
}

std::vector<PassingAnswer> load_passing_answers(const std::string& path) {
  MC_CHECK(std::ifstream(path), "--repair-from: cannot read ", path);
  std::vector<PassingAnswer> out;
  for_each_jsonl(path, [&](const json& row, size_t no) {
    const std::string where = path + ":" + std::to_string(no) + ": ";
    MC_CHECK(row.contains("messages") && row["messages"].is_array(), where, "a dataset row needs \"messages\"");
    std::string key;
    if (row.contains("problem") && row["problem"].is_string() && !row.contains("problem_id")) {
      key = row["problem"].get<std::string>();  // musacoder rft's rows
    } else {
      MC_CHECK(row.contains("level") && row.contains("problem_id") && row.contains("name"), where,
               "a row needs \"problem\" (rft) or \"level\", \"problem_id\" and \"name\" (synth)");
      key = "L" + std::to_string(row["level"].get<int>()) + "/" + std::to_string(row["problem_id"].get<int>()) + "_" +
            row["name"].get<std::string>();
    }
    if (row.contains("verdict") && row["verdict"].is_string() && row["verdict"] != "ok" && row["verdict"] != "compiled")
      return;  // only verified answers
    std::string answer;
    for (const auto& m : row["messages"])
      if (m.is_object() && m.value("role", "") == "assistant" && m.contains("content") && m["content"].is_string())
        answer = m["content"].get<std::string>();
    MC_CHECK(!answer.empty(), where, "no assistant message");
    out.push_back({key, answer, path + ":" + std::to_string(no)});
  });
  return out;
}

}  // namespace mc::rft
