#include "port/bench_port.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <regex>

#include "common/check.h"
#include "common/fs.h"
#include "common/hash.h"

namespace mc::port {
namespace {

bool is_level_dir(const fs::directory_entry& e) {
  static const std::regex level(R"(level\d+)");
  return e.is_directory() && std::regex_match(e.path().filename().string(), level);
}

std::vector<std::string> levels_in(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (is_level_dir(e)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Whether `inner` is `outer` or lies under it.
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = fs::weakly_canonical(inner), o = fs::weakly_canonical(outer);
  auto m = std::mismatch(o.begin(), o.end(), i.begin(), i.end());
  return m.first == o.end();
}

// KernelBench's baseline timings (results/timing/<GPU>/...json) are times of CUDA GPUs: nothing a
// MUSA run may compare against. Listed, not carried.
nlohmann::json hardware_bound(const fs::path& root) {
  nlohmann::json out = nlohmann::json::array();
  for (const fs::path& base : {root / "results" / "timing", root.parent_path() / "results" / "timing"}) {
    if (!fs::is_directory(base)) continue;
    std::vector<std::string> found;
    for (const auto& e : fs::recursive_directory_iterator(base))
      if (e.is_regular_file() && e.path().extension() == ".json") found.push_back(fs::relative(e.path(), base).string());
    std::sort(found.begin(), found.end());
    out.push_back({{"path", base.string()}, {"files", found},
                   {"why", "baseline timings measured on CUDA GPUs; a MUSA run measures its own "
                           "(musacoder baseline --backend musa)"}});
    break;
  }
  return out;
}

}  // namespace

std::vector<std::string> kernelbench_levels(const std::string& root) {
  MC_CHECK(fs::is_directory(root), "port-bench: ", root, " is not a folder");
  auto levels = levels_in(root);
  if (levels.empty()) levels = levels_in(fs::path(root) / "KernelBench");
  MC_CHECK(!levels.empty(), "port-bench: no level folders (level1, level2, ...) in ", root, " or ", root,
           "/KernelBench");
  return levels;
}

nlohmann::json port_benchmark(const std::string& root, const std::string& out, const Porter& porter,
                              const RuleTable& table, const std::vector<ExtraFile>& extras) {
  const auto levels = kernelbench_levels(root);
  MC_CHECK(!within(out, root), "port-bench: the output ", out, " lies inside the benchmark ", root);
  const fs::path manifest_path = fs::path(out) / "manifest.json";
  if (fs::is_directory(out) && !fs::is_empty(out))
    MC_CHECK(fs::exists(manifest_path), "port-bench: ", out,
             " holds files but no manifest.json of an earlier port; give an empty or new folder");

  nlohmann::json files = nlohmann::json::array(), by_level = nlohmann::json::object();
  int total_files = 0, total_changed = 0, total_changes = 0, total_warnings = 0;
  for (const auto& level_dir : levels) {
    const std::string level = fs::path(level_dir).filename().string();
    std::vector<fs::path> sources;
    for (const auto& e : fs::recursive_directory_iterator(level_dir))
      if (e.is_regular_file()) sources.push_back(e.path());
    std::sort(sources.begin(), sources.end());
    int changed = 0, changes = 0, warnings = 0;
    for (const auto& src : sources) {
      const fs::path rel = fs::path(level) / fs::relative(src, level_dir);
      const std::string text = read_file(src);
      PortResult r = porter.port(text);
      const fs::path dst = fs::path(out) / rel.parent_path() / ported_name(rel.filename().string(), Direction::kToMusa);
      write_file_atomic(dst, r.text);
      const bool differs = r.text != text;
      changed += differs;
      changes += static_cast<int>(r.changes.size());
      warnings += static_cast<int>(r.warnings.size());
      files.push_back({{"file", rel.string()},
                       {"out", fs::relative(dst, out).string()},
                       {"sha256_in", sha256_hex(text)},
                       {"sha256_out", sha256_hex(r.text)},
                       {"changed", differs},
                       {"changes", to_json(r.changes)},
                       {"warnings", to_json(r.warnings)}});
    }
    by_level[level] = {{"files", sources.size()}, {"changed", changed}, {"changes", changes}, {"warnings", warnings}};
    total_files += static_cast<int>(sources.size());
    total_changed += changed;
    total_changes += changes;
    total_warnings += warnings;
  }

  nlohmann::json added = nlohmann::json::array();
  for (const auto& x : extras) {
    write_file_atomic(fs::path(out) / x.path, x.text);
    added.push_back({{"file", x.path}, {"from", x.from}, {"sha256", sha256_hex(x.text)},
                     {"changes", to_json(x.port.changes)}, {"warnings", to_json(x.port.warnings)}});
  }

  nlohmann::json manifest = {
      {"tool", "musacoder port-bench"},
      {"to", "musa"},
      {"device", "musa"},
      {"source", fs::weakly_canonical(root).string()},
      {"rules", {{"files", table.files}, {"rows", table.size()}, {"version", table.version}}},
      {"lossy_on_the_way_back", porter.lossy()},
      {"levels", by_level},
      {"totals", {{"files", total_files}, {"changed", total_changed}, {"changes", total_changes},
                  {"warnings", total_warnings}}},
      {"files", files},
      {"added", added},
      {"not_carried", hardware_bound(root)},
  };
  write_file_atomic(manifest_path, manifest.dump(1) + "\n");
  return manifest;
}

std::string port_bench_table(const nlohmann::json& m) {
  std::string s = fmt::format("{:<10}{:>7}{:>9}{:>9}{:>10}\n", "level", "files", "changed", "changes", "warnings");
  auto line = [&](const std::string& name, const nlohmann::json& l) {
    s += fmt::format("{:<10}{:>7}{:>9}{:>9}{:>10}\n", name, l["files"].get<int>(), l["changed"].get<int>(),
                     l["changes"].get<int>(), l["warnings"].get<int>());
  };
  for (const auto& [name, l] : m["levels"].items()) line(name, l);
  line("all", m["totals"]);
  for (const auto& a : m["added"])
    s += fmt::format("added {} ({} changes, {} warnings) from {}\n", a["file"].get<std::string>(), a["changes"].size(),
                     a["warnings"].size(), a["from"].get<std::string>());
  for (const auto& n : m["not_carried"])
    s += fmt::format("not carried: {} ({} files): {}\n", n["path"].get<std::string>(), n["files"].size(),
                     n["why"].get<std::string>());
  return s;
}

}  // namespace mc::port
