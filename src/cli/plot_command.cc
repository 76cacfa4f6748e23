#include "cli/plot_command.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"
#include "report/line_plot.h"

namespace mc::cli {

struct PlotCommand::Impl {
  CLI::App* cmd = nullptr;
  std::vector<std::string> runs, metrics{"loss", "lr", "grad_norm", "tokens_per_s"}, log_metrics;
  std::string out;
  int columns = 2;
  bool skip_missing = false;
};

PlotCommand::PlotCommand(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cmd = app.add_subcommand("plot", "draw runs' curves (metrics.jsonl of train / rl runs) as an SVG image");
  m.cmd->add_option("runs", m.runs, "run folders (or metrics.jsonl files)")->required();
  m.cmd->add_option("--out", m.out, "SVG file to write")->required();
  m.cmd->add_option("--metrics", m.metrics, "fields to plot, one panel each (comma-separated)")->delimiter(',')->capture_default_str();
  m.cmd->add_option("--log", m.log_metrics, "fields drawn on a log scale")->delimiter(',');
  m.cmd->add_option("--columns", m.columns, "panels per row")->capture_default_str();
  m.cmd->add_flag("--skip-missing", m.skip_missing, "leave out runs with no metrics.jsonl (stages not run), and say which");
}

PlotCommand::~PlotCommand() = default;

std::optional<int> PlotCommand::run() {
  Impl& m = *impl_;
  if (!*m.cmd) return std::nullopt;
  std::vector<report::Panel> panels;
  for (const auto& metric : m.metrics) {
    report::Panel p;
    p.title = metric;
    p.x_label = "step";
    p.log_y = std::find(m.log_metrics.begin(), m.log_metrics.end(), metric) != m.log_metrics.end();
    panels.push_back(p);
  }
  size_t rows_read = 0;
  std::vector<std::pair<std::string, fs::path>> runs;  // (as given, its metrics file)
  for (const auto& run : m.runs) {
    fs::path file = fs::is_directory(run) ? fs::path(run) / "metrics.jsonl" : fs::path(run);
    if (fs::exists(file)) {
      runs.emplace_back(run, file);
      continue;
    }
    MC_CHECK(m.skip_missing, "no metrics.jsonl at ", file.string());
    fmt::print(stderr, "plot: {} has no metrics.jsonl, left out\n", run);
  }
  MC_CHECK(!runs.empty(), "plot: none of the ", m.runs.size(), " runs has a metrics.jsonl");
  int next_color = 0;  // one per (run, kind), the same in every panel
  for (const auto& [run, file] : runs) {
    // A run folder, or a metrics.jsonl, is named by its folder; a file of another name by its
    // stem less "-metrics" (bench/rl_pipeline.py writes turns-metrics.jsonl, async-metrics.jsonl
    // side by side in one folder).
    std::string label = fs::is_directory(run) ? fs::path(run).filename().string() : file.parent_path().filename().string();
    if (!fs::is_directory(run) && file.filename() != "metrics.jsonl") {
      label = file.stem().string();
      for (const char* tail : {"-metrics", "_metrics"})
        if (label.size() > std::strlen(tail) && label.ends_with(tail)) label.resize(label.size() - std::strlen(tail));
    }
    if (label.empty() || label == ".") label = fs::absolute(run).parent_path().filename().string();
    // kind -> one series per panel ("train", "eval", ...).
    std::map<std::string, std::vector<report::Series>> by_kind;
    std::ifstream in(file);
    size_t no = 0;
    for (std::string line; std::getline(in, line);) {
      ++no;
      if (line.empty()) continue;
      nlohmann::json r;
      try {
        r = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw Error(fmt::format("{}:{}: not JSON: {}", file.string(), no, e.what()));
      }
      std::string kind = r.value("kind", "train");
      auto& series = by_kind[kind];
      if (series.empty()) series.resize(panels.size());
      double step = r.value("step", static_cast<double>(no));
      for (size_t k = 0; k < panels.size(); ++k) {
        auto it = r.find(m.metrics[k]);
        if (it == r.end() || !it->is_number()) continue;
        series[k].x.push_back(step);
        series[k].y.push_back(it->get<double>());
      }
      ++rows_read;
    }
    for (auto& [kind, series] : by_kind) {
      const int color = next_color++;
      for (size_t k = 0; k < panels.size(); ++k)
        if (!series[k].x.empty()) {
          series[k].color = color;
          // The row kind only tells series of one run apart (train beside eval rows); an RL run's
          // rows are all "rl", and its legend is the run's name alone.
          series[k].label = by_kind.size() > 1 || runs.size() > 1 ? label + (by_kind.size() > 1 && kind != "train" ? " " + kind : "") : "";
          panels[k].series.push_back(series[k]);
        }
    }
  }
  MC_CHECK(rows_read > 0, "no metrics rows in ", runs.size(), " run(s)");
  write_file_atomic(m.out, report::render_svg(panels, m.columns));
  fmt::print(stderr, "{} rows from {} run(s) -> {}\n", rows_read, runs.size(), m.out);
  return 0;
}

}  // namespace mc::cli
