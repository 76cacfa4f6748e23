#include "synth/task_set.h"

#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/jsonl.h"
#include "synth/prompt.h"

namespace mc::synth {
namespace fs = std::filesystem;

std::vector<Task> load_tasks(const std::string& path, const std::string& format, int level,
                             const std::string& backend) {
  MC_CHECK(format == "native" || format == "kernelbench", "--format: '", format, "' is not native or kernelbench");
  MC_CHECK(backend == "cuda" || backend == "musa", "--backend: '", backend, "' is not cuda or musa");
  std::vector<Task> out;
  if (fs::is_directory(path)) {
    for (auto& p : eval::load_problems(path, level))
      out.push_back({p, task_prompt(p->source, format, backend), p->level, 0.0});
    return out;
  }
  MC_CHECK(fs::is_regular_file(path), "--problems: no folder or file ", path);
  const fs::path base = fs::path(path).parent_path();
  auto rows = read_jsonl(path);
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& r = rows[i];
    MC_CHECK(r.contains("path") && r["path"].is_string(), path, ":", i + 1,
             ": a problems.jsonl row needs \"path\" (the problem file, relative to the JSONL's folder)");
    int row_level = r.value("level", 0);
    if (level > 0 && row_level != level) continue;
    // Rows written before synth took --backend have none: they were made for CUDA.
    const std::string row_backend = r.contains("backend") && r["backend"].is_string() ? r["backend"].get<std::string>()
                                                                                      : "cuda";
    MC_CHECK(row_backend == backend, path, ":", i + 1, ": this problem was synthesized for ", row_backend,
             " (its prompt asks for ", row_backend == "musa" ? "MUSA" : "CUDA", " kernels), and this run targets ",
             backend, ": pass --backend ", row_backend, ", or synthesize the set with --backend ", backend);
    auto p = eval::load_problem((base / r["path"].get<std::string>()).string(), row_level);
    std::string prompt;
    if (r.contains("prompts") && r["prompts"].contains(format)) prompt = r["prompts"][format].get<std::string>();
    else prompt = task_prompt(p->source, format, backend);
    double difficulty = r.contains("difficulty") && r["difficulty"].is_number() ? r["difficulty"].get<double>() : 0.0;
    out.push_back({p, prompt, row_level, difficulty});
  }
  MC_CHECK(!out.empty(), path, ": no problems", level > 0 ? " at level " + std::to_string(level) : "");
  std::set<std::string> keys;
  for (const auto& t : out) MC_CHECK(keys.insert(t.problem->key).second, path, ": problem ", t.problem->key, " appears twice");
  return out;
}

}  // namespace mc::synth
