#include "cli/port_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"
#include "port/porter.h"

namespace mc::cli {

struct PortCommand::Impl {
  CLI::App* cmd = nullptr;
  std::string to, path, out;
  std::vector<std::string> rules;
  bool json = false;
};

PortCommand::PortCommand(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cmd = app.add_subcommand("port", "translate CUDA sources and KernelBench-format Python to MUSA, or back");
  m.cmd->add_option("--to", m.to, "musa or cuda")->required()->check(CLI::IsMember({"musa", "cuda"}));
  m.cmd->add_option("path", m.path, "a file or a folder")->required();
  m.cmd->add_option("-o,--out", m.out, "output file or folder (a file: default stdout; a folder: required)");
  m.cmd->add_option("--rules", m.rules, "extra rule tables (TOML, the format of src/port/cuda_musa.toml)");
  m.cmd->add_flag("--json", m.json, "the summary as JSON on stdout (a folder, or a file with -o)");
}

PortCommand::~PortCommand() = default;

namespace {

bool portable(const fs::path& p) {
  static const std::vector<std::string> exts = {".py", ".cu", ".cuh", ".mu", ".muh", ".cpp", ".cc", ".cxx",
                                                ".h", ".hpp", ".c"};
  return std::find(exts.begin(), exts.end(), p.extension().string()) != exts.end();
}

}  // namespace

std::optional<int> PortCommand::run() {
  Impl& m = *impl_;
  if (!*m.cmd) return std::nullopt;
  MC_CHECK(fs::exists(m.path), "port: ", m.path, " does not exist");
  const port::Direction dir = m.to == "musa" ? port::Direction::kToMusa : port::Direction::kToCuda;
  port::RuleTable table = port::load_rules(m.rules);
  port::Porter porter(table, dir);
  std::vector<std::pair<fs::path, fs::path>> jobs;  // source, destination ("" : stdout)
  if (fs::is_directory(m.path)) {
    MC_CHECK(!m.out.empty(), "port: a folder needs -o OUT (a folder)");
    for (const auto& e : fs::recursive_directory_iterator(m.path)) {
      if (!e.is_regular_file()) continue;
      fs::path rel = fs::relative(e.path(), m.path);
      jobs.push_back({e.path(), fs::path(m.out) / rel.parent_path() / port::ported_name(rel.filename().string(), dir)});
    }
    std::sort(jobs.begin(), jobs.end());
  } else {
    jobs.push_back({m.path, m.out});
  }
  nlohmann::json summary = nlohmann::json::array();
  int warned = 0;
  for (const auto& [src, dst] : jobs) {
    if (!portable(src)) {  // data and the like travel unchanged
      fs::create_directories(dst.parent_path());
      fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
      continue;
    }
    port::PortResult r = porter.port(read_file(src.string()));
    if (dst.empty()) fmt::print("{}", r.text);
    else write_file_atomic(dst, r.text);
    nlohmann::json fam = r.by_family();
    for (const auto& w : r.warnings)
      fmt::print(stderr, "{}:{}: warning [{}]: {}\n    {}\n", src.string(), w.line, w.id, w.message, w.snippet);
    nlohmann::json warns = port::to_json(r.warnings);
    warned += static_cast<int>(r.warnings.size());
    summary.push_back({{"file", src.string()}, {"out", dst.string()}, {"changes", r.changes.size()},
                       {"by_family", fam}, {"warnings", warns}});
  }
  if (m.json && !(jobs.size() == 1 && m.out.empty())) {
    fmt::print("{}\n", nlohmann::json{{"to", m.to}, {"rules", table.files}, {"files", summary},
                                       {"lossy_on_the_way_back", porter.lossy()}}.dump(1));
  } else {
    fmt::print(stderr, "\n{:<48} {:>8} {:>8}  {}\n", "file", "changes", "warnings", "by family");
    for (const auto& f : summary) {
      std::string fams;
      for (const auto& [k, v] : f["by_family"].items()) fams += (fams.empty() ? "" : ", ") + k + " " + std::to_string(v.get<int>());
      std::string name = f["file"].get<std::string>();
      if (name.size() > 48) name = "..." + name.substr(name.size() - 45);
      fmt::print(stderr, "{:<48} {:>8} {:>8}  {}\n", name, f["changes"].get<size_t>(), f["warnings"].size(), fams);
    }
    fmt::print(stderr, "port: {} file(s) to {}, {} warning(s); rules: {} rows from {} file(s)\n", summary.size(),
               m.to, warned, table.size(), table.files.size());
  }
  return 0;
}

}  // namespace mc::cli
