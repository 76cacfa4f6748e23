#include "bench/report.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "bench/provenance.h"
#include "bench/uncertainty.h"
#include "common/check.h"
#include "common/fs.h"
#include "report/grid_plot.h"
#include "report/line_plot.h"

namespace mc::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string pct(double v) { return fmt::format("{:.1f}%", 100 * v); }

struct Scope {
  std::string name;                  // "all" or "level N"
  std::vector<std::string> problems;
};

std::vector<Scope> scopes(const std::vector<BenchProblem>& set) {
  std::vector<Scope> out = {{"all", {}}};
  std::map<int, std::vector<std::string>> by_level;
  for (const auto& p : set) {
    out[0].problems.push_back(p.problem->key);
    by_level[p.level].push_back(p.problem->key);
  }
  if (by_level.size() > 1 || (by_level.size() == 1 && by_level.begin()->first > 0))
    for (auto& [l, ps] : by_level) out.push_back({"level " + std::to_string(l), ps});
  return out;
}

std::string table_header(const std::vector<int>& ks) {
  std::string h = fmt::format("{:<10}{:>9}", "scope", "problems");
  for (int k : ks) h += fmt::format("{:>9}", "pass@" + std::to_string(k));
  h += fmt::format("{:>8}{:>8}{:>8}{:>10}{:>8}{:>11}{:>9}{:>9}{:>9}{:>9}{:>7}\n", "avg@k", "fast_1", "fast_2", "fast_1.1",
                   "Faster", "fast_1(tc)", "geomean", "compiled", "correct", "legal", "infra");
  return h;
}

std::string table_row(const std::string& name, const Metrics& m, const std::vector<int>& ks) {
  std::string r = fmt::format("{:<10}{:>9}", name, m.problems);
  for (int k : ks) r += fmt::format("{:>9}", pct(m.pass_at.at(k)));
  r += fmt::format("{:>8}{:>8}{:>8}{:>10}{:>8}{:>11}{:>9}{:>9}{:>9}{:>9}{:>7}\n", pct(m.avg_at_k), pct(m.fast_eager.at(1.0)),
                   pct(m.fast_eager.at(2.0)), pct(m.fast_eager.at(1.1)), pct(m.faster), pct(m.fast_compile.at(1.0)),
                   fmt::format("{:.2f}x", m.geomean_speedup), pct(m.compiled), pct(m.correct), pct(m.legal), m.infra_errors);
  return r;
}

std::string md_row(const std::string& name, const Metrics& m, const std::vector<int>& ks) {
  std::string r = fmt::format("| {} | {} |", name, m.problems);
  for (int k : ks) r += " " + pct(m.pass_at.at(k)) + " |";
  r += fmt::format(" {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2f}x | {} | {} | {} | {} |\n", pct(m.avg_at_k),
                   pct(m.fast_eager.at(0.0)), pct(m.fast_eager.at(1.0)), pct(m.fast_eager.at(1.1)), pct(m.fast_eager.at(2.0)),
                   pct(m.fast_compile.at(1.0)), pct(m.fast_compile.at(1.1)), pct(m.fast_compile.at(2.0)), pct(m.faster),
                   m.geomean_speedup, pct(m.compiled), pct(m.correct), pct(m.legal), m.infra_errors);
  return r;
}

std::string md_header(const std::vector<int>& ks) {
  std::string h = "| scope | problems |", sep = "|---|---:|";
  for (int k : ks) h += fmt::format(" pass@{} |", k), sep += "---:|";
  h += " avg@k | fast_0 | fast_1 | fast_1.1 | fast_2 | fast_1 (compile) | fast_1.1 (compile) | fast_2 (compile) | Faster | "
       "geomean speedup | compiled | correct | legal | infra errors |\n";
  sep += "---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  return h + sep;
}

// fast_p over p, one line per scope: the curve of KernelBench's paper.
std::string fast_p_svg(const ReportInput& in, const std::vector<SampleOutcome>& final, bool with_compile) {
  std::vector<report::Panel> panels;
  for (bool vs_compile : {false, true}) {
    if (vs_compile && !with_compile) continue;
    report::Panel pn;
    pn.title = vs_compile ? "fast_p vs torch.compile" : "fast_p vs eager PyTorch";
    pn.x_label = "speedup threshold p";
    for (const auto& sc : scopes(in.set)) {
      report::Series s;
      s.label = sc.name;
      for (int i = 0; i <= 60; ++i) {
        double p = i * 0.05;
        s.x.push_back(p);
        s.y.push_back(fast_p(final, sc.problems, p, vs_compile));
      }
      pn.series.push_back(std::move(s));
    }
    panels.push_back(std::move(pn));
  }
  return report::render_svg(panels, 2);
}

std::string grid_svg(const ReportInput& in, const std::vector<SampleOutcome>& final) {
  report::Grid g;
  g.title = fmt::format("{} problems x {} samples (after turn {})", in.set.size(), in.options.samples, in.options.turns);
  for (int s = 0; s < in.options.samples; ++s) g.col_labels.push_back(std::to_string(s));
  std::map<std::string, size_t> row;
  for (const auto& p : in.set) {
    row[p.problem->key] = g.row_labels.size();
    g.row_labels.push_back(p.problem->key);
  }
  g.cells.assign(in.set.size(), std::vector<report::GridCell>(in.options.samples));
  const std::map<std::string, std::string> colors = {
      {"faster", "#1a7f37"}, {"ok", "#8fd19e"}, {"incorrect", "#f0a04b"}, {"compile_error", "#d62728"},
      {"illegal", "#9467bd"}, {"static_violation", "#9467bd"}, {"runtime_error", "#8c564b"}, {"load_error", "#8c564b"},
      {"timeout", "#8c564b"}, {"timing_error", "#e377c2"}, {"extract_error", "#999999"}, {"infra", "#ffffff"}};
  for (const auto& o : final) {
    auto it = row.find(o.problem);
    if (it == row.end() || o.sample >= in.options.samples) continue;
    report::GridCell& c = g.cells[it->second][o.sample];
    std::string kind = !o.judged ? "infra" : o.correct ? (o.speedup_eager && *o.speedup_eager > 1.1 ? "faster" : "ok") : o.verdict;
    c.color = colors.count(kind) ? colors.at(kind) : "#cccccc";
    c.text = !o.judged ? "?" : o.turn > 1 ? std::to_string(o.turn) : "";
    c.tooltip = fmt::format("{} sample {}: {}{}{}", o.problem, o.sample, o.judged ? o.verdict : "infra error (no score)",
                            o.speedup_eager ? fmt::format(", {:.2f}x eager", *o.speedup_eager) : "",
                            o.judged ? fmt::format(", turn {}", o.turn) : "");
  }
  g.legend = {{colors.at("faster"), "correct, >1.1x eager"}, {colors.at("ok"), "correct"},
              {colors.at("incorrect"), "incorrect"},       {colors.at("compile_error"), "compile error"},
              {colors.at("illegal"), "illegal"},           {colors.at("runtime_error"), "crash / timeout / load"},
              {colors.at("timing_error"), "timing error"}, {colors.at("extract_error"), "no code"},
              {"#ffffff", "? infra error (no score)"},     {"#cccccc", "digit: passing turn"}};
  return report::render_grid_svg(g);
}

}  // namespace

BenchResult write_report(const ReportInput& in) {
  const BenchOptions& o = in.options;
  const fs::path out(o.out_dir);
  std::vector<int> ks = {1};
  if (o.samples > 1) ks.push_back(o.samples);
  auto sc = scopes(in.set);
  json per_turn = json::array();
  std::vector<std::vector<Metrics>> m(in.by_turn.size());  // [turn - 1][scope]
  for (size_t t = 0; t < in.by_turn.size(); ++t) {
    json levels = json::object();
    for (size_t i = 0; i < sc.size(); ++i) {
      m[t].push_back(compute_metrics(in.by_turn[t], sc[i].problems, ks));
      if (i > 0) levels[sc[i].name.substr(6)] = metrics_json(m[t][i]);
    }
    json counts = json::object();  // what compare's intervals are computed from
    for (const auto& [key, nc] : problem_counts(in.by_turn[t], sc[0].problems)) counts[key] = {nc.first, nc.second};
    per_turn.push_back({{"turn", t + 1}, {"all", metrics_json(m[t][0])}, {"levels", levels}, {"by_problem", counts}});
  }
  const auto& final = in.by_turn.back();
  const Metrics& fin = m.back()[0];
  bool with_compile = false;
  for (const auto& x : final) with_compile |= x.compile_over_eager.has_value();
  json settings = json::parse(read_file(out / "run.json"));
  json decon = decontamination_note(o.model_dir, o.problems);
  json timing = in.timing;
  double wall = timing.value("wall_s", 0.0);
  timing["problems_per_minute"] = wall > 0 ? 60.0 * in.set.size() / wall : 0.0;
  json problems = json::array();
  for (const auto& x : final)
    problems.push_back({{"problem", x.problem}, {"level", x.level}, {"sample", x.sample}, {"judged", x.judged},
                        {"verdict", x.verdict}, {"turn", x.turn},
                        {"speedup_eager", x.speedup_eager ? json(*x.speedup_eager) : json(nullptr)}});
  json report = {{"format_version", 1}, {"settings", settings}, {"source", in.source}, {"per_turn", per_turn},
                 {"final", metrics_json(fin)}, {"timing", timing},
                 {"baseline", in.baseline.value("source", "")}, {"decontamination", decon}, {"samples", problems}};

  // For people: the table after the last turn, and the turns' progress.
  std::string t = fmt::format("bench-model: {} problems x {} samples, {} turn(s), from {}\n", in.set.size(), o.samples, o.turns,
                              in.source);
  t += fmt::format("prompt: {}; format: {}\n\n", settings.value("prompt", ""), o.format);
  t += table_header(ks);
  for (size_t i = 0; i < sc.size(); ++i) t += table_row(sc[i].name, m.back()[i], ks);
  if (o.turns > 1) {
    t += fmt::format("\n{:<6}{:>9}{:>9}{:>9}{:>9}\n", "turn", "pass@1", fmt::format("pass@{}", ks.back()), "avg@k", "fast_1");
    for (size_t k = 0; k < m.size(); ++k)
      t += fmt::format("{:<6}{:>9}{:>9}{:>9}{:>9}\n", k + 1, pct(m[k][0].pass_at.at(1)), pct(m[k][0].pass_at.at(ks.back())),
                       pct(m[k][0].avg_at_k), pct(m[k][0].fast_eager.at(1.0)));
  }
  t += "\nverdicts:";
  for (const auto& [v, n] : fin.verdicts) t += fmt::format(" {} {}", v, n);
  t += "\nlegality rules fired:";
  if (fin.rules.empty()) t += " none";
  for (const auto& [r, n] : fin.rules) t += fmt::format(" {} {}", r, n);
  t += fmt::format("\ntime: {:.1f} s wall ({:.1f} s generation, {:.1f} s verification after it, {:.1f} s baseline), {:.2f} problems/min\n",
                   wall, timing.value("generation_s", 0.0), timing.value("verification_after_generation_s", 0.0),
                   timing.value("baseline_s", 0.0), timing["problems_per_minute"].get<double>());
  t += fmt::format("answers sharing a twin's verdict (the same text, judged once): {}\n",
                   timing.value("twins_sharing_a_verdict", 0));
  t += "decontamination: " + decon.value("text", "") + "\n";
  if (!with_compile) t += "vs torch.compile: no baseline (" + in.baseline.value("source", std::string("none")) + ")\n";

  // Markdown, with the plots.
  std::string md = "# bench-model report\n\n";
  md += fmt::format("- problems: {} ({}), {} samples each, {} turn(s)\n- answers from: {}\n- prompt: {}; solution format: {}\n",
                    in.set.size(), o.problems, o.samples, o.turns, in.source, settings.value("prompt", ""), o.format);
  md += fmt::format("- sampling: temperature {}, top-p {}, at most {} new tokens\n", o.sampling.temperature, o.sampling.top_p,
                    o.sampling.max_new_tokens);
  md += "- baseline: " + in.baseline.value("source", std::string("none")) + "\n";
  md += "- decontamination: " + decon.value("text", "") + "\n";
  md += fmt::format("- time: {:.1f} s wall; generation {:.1f} s; verification after generation {:.1f} s; baseline {:.1f} s; "
                    "{:.2f} problems/min\n- answers sharing a twin's verdict (the same text, judged once): {}\n\n",
                    wall, timing.value("generation_s", 0.0), timing.value("verification_after_generation_s", 0.0),
                    timing.value("baseline_s", 0.0), timing["problems_per_minute"].get<double>(),
                    timing.value("twins_sharing_a_verdict", 0));
  for (size_t k = 0; k < m.size(); ++k) {
    md += fmt::format("## After turn {}\n\n", k + 1) + md_header(ks);
    for (size_t i = 0; i < sc.size(); ++i) md += md_row(sc[i].name, m[k][i], ks);
    md += "\n";
  }
  md += "## Verdicts and legality rules (after the last turn)\n\n| verdict | samples |\n|---|---:|\n";
  for (const auto& [v, n] : fin.verdicts) md += fmt::format("| {} | {} |\n", v, n);
  md += "\n| rule fired | samples |\n|---|---:|\n";
  for (const auto& [r, n] : fin.rules) md += fmt::format("| {} | {} |\n", r, n);
  md += "\n## Plots\n\n![fast_p over p](fast_p.svg)\n\n![per problem](grid.svg)\n\n";
  md += "Metrics: bench/metrics.h. Samples without a verdict (infra errors) are not scored.\n";

  write_file_atomic(out / "report.json", report.dump(2));
  write_file_atomic(out / "report.txt", t);
  write_file_atomic(out / "report.md", md);
  write_file_atomic(out / "fast_p.svg", fast_p_svg(in, final, with_compile));
  write_file_atomic(out / "grid.svg", grid_svg(in, final));
  return {report, t};
}

namespace {

// A finished bench-model run's headline numbers (its report.json), as compare shows them.
struct Headline {
  std::string source;
  int problems = 0, samples = 1, turns = 1, infra = 0;
  double pass1_turn1 = 0, pass1 = 0, passk = 0, avgk = 0, fast1 = 0, fast11 = 0, fast1_compile = 0, faster = 0,
         geomean = 0, correct = 0;
  // Per problem (judged, correct) at turn 1 and after the last turn. Reports written before
  // by_problem existed give the last turn from their samples, and no turn 1.
  std::optional<ProblemCounts> turn1, last;
};

ProblemCounts read_counts(const json& by_problem) {
  ProblemCounts out;
  for (const auto& [key, nc] : by_problem.items()) out[key] = {nc.at(0).get<int>(), nc.at(1).get<int>()};
  return out;
}

Headline read_headline(const std::string& dir) {
  fs::path p = fs::path(dir) / "report.json";
  MC_CHECK(fs::exists(p), "compare: ", dir, " has no report.json (not a finished bench-model run)");
  json r = json::parse(read_file(p));
  const json& f = r.at("final");
  const json& s = r.at("settings");
  auto get = [](const json& j, const std::string& k) { return j.contains(k) ? j[k].get<double>() : 0.0; };
  Headline h;
  h.source = r.value("source", "");
  h.problems = f.value("problems", 0);
  h.samples = s.value("samples", 1);
  h.turns = s.value("turns", 1);
  h.pass1_turn1 = get(r["per_turn"][0]["all"]["pass"], "pass@1");
  h.pass1 = get(f["pass"], "pass@1");
  h.passk = get(f["pass"], "pass@" + std::to_string(h.samples));
  h.avgk = f.value("avg@k", 0.0);
  h.fast1 = get(f["fast_eager"], "fast_1");
  h.fast11 = get(f["fast_eager"], "fast_1.1");
  h.fast1_compile = get(f["fast_compile"], "fast_1");
  h.faster = f.value("faster", 0.0);
  h.geomean = f.value("geomean_speedup", 0.0);
  h.correct = f.value("correct", 0.0);
  h.infra = f.value("infra_errors", 0);
  const json& turns = r["per_turn"];
  if (turns.front().contains("by_problem")) {
    h.turn1 = read_counts(turns.front()["by_problem"]);
    h.last = read_counts(turns.back()["by_problem"]);
  } else if (r.contains("samples")) {
    ProblemCounts c;
    for (const auto& x : r["samples"])
      if (x.value("judged", false)) {
        auto& nc = c[x.value("problem", "")];
        nc.first += 1;
        nc.second += x.value("verdict", "") == "ok";
      }
    h.last = c;
  }
  return h;
}

std::string interval(const std::optional<ProblemCounts>& c) {
  if (!c) return "–";
  Interval i = pass1_interval(*c);
  return fmt::format("{:.1f}–{:.1f}%", 100 * i.lo, 100 * i.hi);
}

std::string difference(const std::optional<ProblemCounts>& a, const std::optional<ProblemCounts>& b) {
  if (!a || !b) return "– | – | –";
  Difference d = pass1_difference(*a, *b);
  if (d.problems == 0) return "no shared problems | – | –";
  return fmt::format("{:+.1f} | {:+.1f} to {:+.1f} | {} / {} of {}", 100 * d.delta.value, 100 * d.delta.lo,
                     100 * d.delta.hi, d.better, d.worse, d.problems);
}

}  // namespace

namespace {

// One row per folder name that several runs share (the seeds of one arm): how many, and each
// headline's mean with its range across them.
std::string seed_spread(const std::vector<std::string>& run_dirs, const std::vector<Headline>& hs) {
  std::vector<std::string> names;
  std::map<std::string, std::vector<const Headline*>> by_name;
  for (size_t i = 0; i < run_dirs.size(); ++i) {
    std::string name = fs::path(run_dirs[i]).lexically_normal().filename().string();
    if (name.empty()) name = fs::path(run_dirs[i]).lexically_normal().parent_path().filename().string();
    if (!by_name.count(name)) names.push_back(name);
    by_name[name].push_back(&hs[i]);
  }
  auto spread = [](const std::vector<const Headline*>& g, double Headline::*m) {
    double lo = 1e300, hi = -1e300, sum = 0;
    for (const Headline* h : g) lo = std::min(lo, h->*m), hi = std::max(hi, h->*m), sum += h->*m;
    return fmt::format("{} ({}–{})", pct(sum / g.size()), pct(lo), pct(hi));
  };
  std::string md = "\n### Across seeds (runs whose folders have the same name)\n\n"
                   "| arm | seeds | pass@1, turn 1: mean (range) | pass@1, last turn | pass@k | fast_1 |\n"
                   "|---|---:|---:|---:|---:|---:|\n";
  int rows = 0;
  for (const auto& n : names) {
    const auto& g = by_name[n];
    if (g.size() < 2) continue;
    ++rows;
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", n, g.size(), spread(g, &Headline::pass1_turn1),
                      spread(g, &Headline::pass1), spread(g, &Headline::passk), spread(g, &Headline::fast1));
  }
  if (rows == 0) md += "| (no folder name is shared by two runs) | | | | | |\n";
  return md;
}

}  // namespace

std::string compare_runs(const std::vector<std::string>& run_dirs, bool seeds_by_name) {
  MC_CHECK(!run_dirs.empty(), "compare: name at least one bench-model run folder");
  std::string md = "| # | run | answers from | problems | samples | turns | pass@1 (turn 1) | 95% interval | pass@1 | "
                   "95% interval | pass@k | avg@k | fast_1 | fast_1.1 | fast_1 (compile) | Faster | geomean | correct | infra |\n"
                   "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  std::vector<Headline> hs;
  for (const auto& d : run_dirs) {
    const Headline& h = hs.emplace_back(read_headline(d));
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2f}x | {} | {} |\n",
                      hs.size(), d, h.source, h.problems, h.samples, h.turns, pct(h.pass1_turn1), interval(h.turn1),
                      pct(h.pass1), interval(h.last), pct(h.passk), pct(h.avgk), pct(h.fast1), pct(h.fast11),
                      pct(h.fast1_compile), pct(h.faster), h.geomean, pct(h.correct), h.infra);
  }
  md += "\npass@1 (and pass@1 after the last turn) 95% intervals: bootstrap over problems (bench/uncertainty.h).\n";
  if (hs.size() > 1) {
    md += "\n### Against run 1, paired over the problems both scored\n\n"
          "| # | Δ pass@1, turn 1 (points) | 95% interval | problems up / down | Δ pass@1, last turn | 95% interval | "
          "problems up / down |\n|---:|---:|---:|---:|---:|---:|---:|\n";
    for (size_t i = 1; i < hs.size(); ++i)
      md += fmt::format("| {} | {} | {} |\n", i + 1, difference(hs[0].turn1, hs[i].turn1),
                        difference(hs[0].last, hs[i].last));
    md += "\nAn interval that holds 0 is a difference the choice of problems alone could give.\n";
  }
  if (seeds_by_name) md += seed_spread(run_dirs, hs);
  return md;
}

std::string compare_svg(const std::vector<std::string>& run_dirs) {
  MC_CHECK(!run_dirs.empty(), "compare: name at least one bench-model run folder");
  report::Panel pass{"pass rates by run (%)", "run (the table's #, in the order given)", {}};
  report::Panel speed{"speed by run (%)", "run (the table's #, in the order given)", {}};
  pass.series = {{"pass@1, turn 1", {}, {}}, {"pass@1, last turn", {}, {}}, {"pass@k", {}, {}}, {"avg@k", {}, {}}};
  speed.series = {{"fast_1 vs eager", {}, {}}, {"fast_1 vs torch.compile", {}, {}}, {"Faster", {}, {}}};
  for (size_t i = 0; i < run_dirs.size(); ++i) {
    const Headline h = read_headline(run_dirs[i]);
    const double x = static_cast<double>(i + 1);
    const double ys[] = {h.pass1_turn1, h.pass1, h.passk, h.avgk}, zs[] = {h.fast1, h.fast1_compile, h.faster};
    for (size_t k = 0; k < pass.series.size(); ++k) pass.series[k].x.push_back(x), pass.series[k].y.push_back(100 * ys[k]);
    for (size_t k = 0; k < speed.series.size(); ++k) speed.series[k].x.push_back(x), speed.series[k].y.push_back(100 * zs[k]);
  }
  return report::render_svg({pass, speed}, 2);
}

}  // namespace mc::bench
