#include "synth/synthesizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <atomic>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "common/check.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/progress.h"
#include "eval/problem.h"
#include "eval/toolchain.h"
#include "eval/verdict.h"
#include "port/porter.h"
#include "synth/kernelbench_prompt.h"
#include "synth/llm_teacher.h"
#include "synth/prompt.h"
#include "synth/python_emitter.h"
#include "synth/teacher.h"

namespace fs = std::filesystem;

namespace mc::synth {
namespace {

using Clock = std::chrono::steady_clock;

struct Item {
  int level = 1;
  uint64_t index = 0;
  Graph g;
  std::string title, source, digest, structure, work_path;
  std::string drop_stage, drop_reason;  // empty while kept
  nlohmann::json probe;
  double difficulty = 0;
  Cost cost;
  int id = 0;                 // 1-based within its level once kept
  std::string path;           // kept problem file
  eval::ProblemPtr problem;
  std::vector<nlohmann::json> rows;  // verified dataset rows
  std::vector<nlohmann::json> attempts;
};

// Op structure without sizes: ops, wiring and the parameters that are not sizes.
std::string structure_key(const Graph& g) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& n : g.nodes) {
    nlohmann::json p = n.p;
    for (const char* k : {"out", "shape", "vocab"}) p.erase(k);
    j.push_back({n.op, n.args, p});
  }
  return sha256_hex(j.dump()).substr(0, 16);
}

// The task as the policy is asked it (SynthOptions::prompt).
std::string policy_prompt(const Item& it, const std::string& format, const SynthOptions& o) {
  if (format == "kernelbench" && o.prompt == "kernelbench")
    return kernelbench_prompt(it.source, o.eval_config.precision, o.backend);
  return task_prompt(it.g, it.source, format, o.backend);
}

std::string safe_title(const Graph& g) {
  std::string t = g.title();
  if (t.size() > 80) t = t.substr(0, 80);
  return t;
}

}  // namespace

std::string invalid_reason(const nlohmann::json& p, const SynthOptions& o, std::string* stage) {
  *stage = "validity";
  if (p.contains("infra_error")) {
    *stage = "infra";
    return "probe failed: " + p["infra_error"].get<std::string>().substr(0, 300);
  }
  if (!p.value("runs", false)) return "does not run: " + p.value("error", std::string("?")).substr(0, 300);
  if (!p.value("finite", false)) return "non-finite output";
  if (!p.value("deterministic", false)) return "not deterministic";
  if (p.value("degenerate", false)) return "degenerate output (near-constant or near-zero)";
  if (!p.value("varies_with_seed", false)) return "output does not vary with the seed";
  if (p.contains("ill_conditioned") && !p["ill_conditioned"].empty()) {
    const auto& b = p["ill_conditioned"][0];
    if (b.contains("error")) return "fails in float64: " + b["error"].get<std::string>();
    return "ill-conditioned: the fp32 reference misses its fp64 value beyond tolerance on " +
           b.value("variant", std::string("?")) + " inputs";
  }
  if (p.contains("constant_axes") && !p["constant_axes"].empty())
    return "output constant along axis " + p["constant_axes"][0][1].dump();
  if (p.contains("eager")) {
    double us = p["eager"].value("median_us", 0.0);
    if (us < o.min_eager_us || us > o.max_eager_us)
      return fmt::format("eager time {:.1f} us outside [{}, {}] us", us, o.min_eager_us, o.max_eager_us);
  }
  return "";
}

namespace {

std::string quantiles(std::vector<double> v) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  auto q = [&](double f) { return v[std::min(v.size() - 1, static_cast<size_t>(f * (v.size() - 1) + 0.5))]; };
  return fmt::format("p10 {:.2f}x  p50 {:.2f}x  p90 {:.2f}x  max {:.2f}x", q(0.1), q(0.5), q(0.9), v.back());
}

}  // namespace

SynthReport run_synthesis(const SynthOptions& o) {
  MC_CHECK(!o.out_dir.empty(), "synth needs --out");
  MC_CHECK(o.count >= 1, "--count must be at least 1");
  MC_CHECK(!o.levels.empty(), "--levels is empty");
  for (int l : o.levels) MC_CHECK(l >= 1 && l <= 3, "levels must be 1, 2 or 3, got ", l);
  MC_CHECK(o.formats == "native" || o.formats == "kernelbench" || o.formats == "both",
           "--formats must be native, kernelbench or both, got '", o.formats, "'");
  MC_CHECK(o.prompt == "musacoder" || o.prompt == "kernelbench", "--prompt must be musacoder or kernelbench, got '",
           o.prompt, "'");
  MC_CHECK(o.prompt != "kernelbench" || o.formats != "native",
           "--prompt kernelbench asks for KernelBench's format: use --formats kernelbench or both");
  MC_CHECK(o.verify == "gpu" || o.verify == "compile" || o.verify == "none",
           "--verify must be gpu, compile or none, got '", o.verify, "'");
  MC_CHECK(o.order == "curriculum" || o.order == "generation", "--order must be curriculum or generation");
  MC_CHECK(!(o.evaluator.device == "cpu" && o.verify == "gpu"),
           "--verify gpu runs CUDA kernels and needs --device cuda; on the CPU use --verify compile or none");
  bool llm = o.teacher != "builtin" && o.teacher != "none";
  MC_CHECK(!llm || !o.teacher_model.empty(), "an LLM teacher (--teacher URL) needs --teacher-model");
  MC_CHECK(o.backend == "cuda" || o.backend == "musa", "--backend must be cuda or musa, got '", o.backend, "'");
  MC_CHECK(!(llm && o.backend == "musa"),
           "--backend musa takes the builtin teacher: an LLM teacher's turns are verified and repaired as CUDA, "
           "and its repair turns quote CUDA compilers' feedback");
  // musa: the rules of `musacoder port`, read once (the Porter keeps a pointer into the table).
  const bool musa = o.backend == "musa";
  std::optional<port::RuleTable> port_rules;
  std::optional<port::Porter> porter;
  if (musa) {
    port_rules.emplace(port::load_rules());
    porter.emplace(*port_rules, port::Direction::kToMusa);
  }
  for (const auto& d : o.decontaminate_dirs) MC_CHECK(fs::is_directory(d), "--decontaminate: no folder ", d);
  auto t0 = Clock::now();
  fs::path out(o.out_dir), work = out / "work";
  fs::create_directories(work / "candidates");
  fs::create_directories(out / "problems");
  nlohmann::json report = {{"seed", o.seed}, {"levels", o.levels}, {"count", o.count}};
  nlohmann::json stage_s = nlohmann::json::object();
  auto lap = [&, last = Clock::now()](const char* stage) mutable {
    auto now = Clock::now();
    stage_s[stage] = std::chrono::duration<double>(now - last).count();
    last = now;
  };
  eval::Toolchain tc = eval::discover_toolchain(o.evaluator.cuda_arch);

  // ---- 1. generate, de-duplicate ------------------------------------------------------------
  Generator gen(o.generator, o.seed);
  std::map<int, int> target;
  for (size_t i = 0; i < o.levels.size(); ++i)
    target[o.levels[i]] = o.count / static_cast<int>(o.levels.size()) + (static_cast<int>(i) < o.count % static_cast<int>(o.levels.size()));
  std::vector<Item> items;
  std::map<std::string, int> dropped_by;  // stage -> count
  std::vector<nlohmann::json> rejected;
  auto drop = [&](Item& it, const std::string& stage, const std::string& why) {
    it.drop_stage = stage;
    it.drop_reason = why;
    ++dropped_by[stage];
    rejected.push_back({{"level", it.level}, {"index", it.index}, {"title", it.title}, {"stage", stage},
                        {"reason", why}, {"file", it.work_path}});
  };
  {
    std::set<std::string> seen;
    std::map<std::string, int> per_structure;
    int total = 0;
    for (auto& [l, n] : target) total += static_cast<int>(std::ceil(n * o.oversample));
    ProgressBar bar("generate", total, o.progress);
    for (auto& [level, n] : target) {
      int want = static_cast<int>(std::ceil(n * o.oversample)), got = 0;
      for (uint64_t idx = 0; got < want && idx < static_cast<uint64_t>(want) * 20; ++idx) {
        Item it;
        it.level = level;
        it.index = idx;
        it.g = gen.make(level, idx);
        it.title = safe_title(it.g);
        it.source = problem_source(it.g, describe(it.g));
        it.digest = sha256_hex(it.source).substr(0, 16);
        if (!seen.insert(it.digest).second) continue;  // the very same program again
        it.structure = structure_key(it.g);
        it.difficulty = difficulty(it.g);
        it.cost = graph_cost(it.g);
        it.work_path = (work / "candidates" / fmt::format("L{}_{:05d}_{}.py", level, idx, it.title)).string();
        write_file_atomic(it.work_path, it.source);
        ++got;
        bar.advance(1, it.title);
        if (++per_structure[it.structure] > o.max_per_structure) {
          items.push_back(std::move(it));
          drop(items.back(), "duplicate", "op structure already has " + std::to_string(o.max_per_structure) + " problems");
          continue;
        }
        items.push_back(std::move(it));
      }
    }
  }
  report["generated"] = items.size();
  lap("generate");

  // ---- 2. decontaminate ------------------------------------------------------------------
  if (!o.decontaminate_dirs.empty()) {
    std::vector<std::string> bench_paths;
    // Each folder's problems by content too (sha256 of each source, sorted): a report read where
    // the benchmark sits at another path, a copy, still tells it (bench/provenance.cc).
    std::vector<std::vector<std::string>> sources(o.decontaminate_dirs.size());
    for (size_t i = 0; i < o.decontaminate_dirs.size(); ++i) {
      for (const auto& p : eval::load_problems(o.decontaminate_dirs[i])) {
        bench_paths.push_back(p->path);
        sources[i].push_back(sha256_hex(p->source));
      }
      std::sort(sources[i].begin(), sources[i].end());
    }
    fmt::print(stderr, "decontaminate: tracing {} benchmark problems and {} candidates\n", bench_paths.size(), items.size());
    Decontaminator dc(trace_problems(bench_paths, tc.python, tc.harness_dir), o.decontamination);
    std::vector<std::string> ours;
    std::vector<Item*> live;
    for (auto& it : items)
      if (it.drop_stage.empty()) ours.push_back(it.work_path), live.push_back(&it);
    auto traces = trace_problems(ours, tc.python, tc.harness_dir);
    for (size_t i = 0; i < live.size(); ++i) {
      if (auto c = dc.check(traces[i], compute_ops(live[i]->g))) drop(*live[i], "contaminated", c->rule + " with " + c->benchmark + " (" + c->detail + ")");
    }
    // Each folder also relative to this one: a run folder that moves (a recipe's synth stage
    // made on another machine and carried) still names them (bench/provenance.cc). "benchmark"
    // is the first folder's path, as reports gave it before there could be several.
    nlohmann::json against = nlohmann::json::array();
    for (size_t i = 0; i < o.decontaminate_dirs.size(); ++i) {
      fs::path a = fs::absolute(o.decontaminate_dirs[i]).lexically_normal();
      against.push_back({{"path", a.string()}, {"relative", a.lexically_relative(fs::absolute(out).lexically_normal()).string()},
                         {"problem_sha256", sources[i]}});
    }
    report["decontamination"] = {{"benchmark", against[0]["path"]}, {"against", against},
                                 {"benchmark_problems", dc.size()}, {"benchmark_untraced", dc.untraced()},
                                 {"dropped", dropped_by["contaminated"]}};
  }

  lap("decontaminate");

  // ---- 3. validity probe (reference execution) -------------------------------------------
  eval::EvaluatorOptions eo = o.evaluator;
  eo.progress = false;
  std::unique_ptr<eval::Evaluator> ev;
  auto evaluator = [&](const eval::EvalConfig& cfg) -> eval::Evaluator& {
    if (!ev) ev = std::make_unique<eval::Evaluator>(cfg, eo);
    return *ev;
  };
  eval::EvalConfig cfg = o.eval_config;
  if (o.verify == "compile") cfg.compile_only = true;
  if (eo.device == "cpu") cfg.timing = false;
  {
    std::vector<Item*> live;
    for (auto& it : items)
      if (it.drop_stage.empty()) live.push_back(&it);
    // Probe in generation order, a level at a time, only as many as needed.
    std::map<int, int> kept;
    if (o.probe) {
      std::vector<eval::ProblemPtr> probs;
      for (auto* it : live) probs.push_back(eval::load_problem(it->work_path, it->level));
      ProgressBar bar("probe", probs.size(), o.progress);
      auto res = evaluator(cfg).probe(probs, 0.25, [&](size_t) { bar.advance(); });
      for (size_t i = 0; i < live.size(); ++i) {
        live[i]->probe = res[i];
        std::string stage, why = invalid_reason(res[i], o, &stage);
        if (!why.empty()) drop(*live[i], stage, why);
      }
    }
    for (auto* it : live) {
      if (!it->drop_stage.empty()) continue;
      if (kept[it->level] >= target[it->level]) {
        it->drop_stage = "surplus";  // valid, just more than asked for: not a rejection
        continue;
      }
      it->id = ++kept[it->level];
      fs::path dir = out / "problems" / ("level" + std::to_string(it->level));
      fs::create_directories(dir);
      it->path = (dir / fmt::format("{}_{}.py", it->id, it->title)).string();
      write_file_atomic(it->path, it->source);
      it->problem = eval::load_problem(it->path, it->level);
    }
  }
  std::vector<Item*> keep;
  for (auto& it : items)
    if (it.drop_stage.empty()) keep.push_back(&it);

  lap("probe");

  // ---- 4. teacher solutions, verified by MooreEval -----------------------------------------
  std::vector<std::string> formats;
  if (o.formats != "kernelbench") formats.push_back("native");
  if (o.formats != "native") formats.push_back("kernelbench");
  nlohmann::json teacher_stats = nlohmann::json::object();
  if (o.teacher == "builtin") {
    std::vector<eval::Candidate> cands;
    std::vector<std::pair<Item*, std::string>> owner;
    for (auto* it : keep) {
      TeacherSolution s = lower_graph(it->g, "mc_teacher_" + it->digest);
      // Every teacher solution is kept for inspection; only verified ones enter the dataset.
      fs::path sol = work / "solutions" / ("level" + std::to_string(it->level));
      fs::create_directories(sol);
      std::string stem = std::to_string(it->id) + "_" + it->title;
      write_file_atomic(sol / (stem + ".cu"), s.native_cu);
      write_file_atomic(sol / (stem + ".py"), s.kernelbench_py);
      for (const auto& f : formats) {
        eval::Candidate c;
        c.problem = it->problem;
        c.problem_ref = it->problem->key;
        c.sample_id = f;
        c.answer = f == "native" ? s.native_cu : s.kernelbench_py;
        c.origin = "builtin-teacher";
        cands.push_back(std::move(c));
        owner.push_back({it, f});
      }
    }
    if (o.verify != "none" && !cands.empty()) {
      ProgressBar bar("verify", cands.size(), o.progress);
      std::vector<eval::EvalResult> results =
          verify_all(evaluator(cfg), cands, [&](size_t i) { bar.advance(1, owner[i].first->title); });
      for (size_t i = 0; i < cands.size(); ++i) {
        auto& [it, f] = owner[i];
        const eval::EvalResult& r = results[i];
        bool ok = r.verdict == eval::Verdict::kOk || r.verdict == eval::Verdict::kCompiled;
        it->attempts.push_back({{"format", f}, {"verdict", eval::to_string(r.verdict)}, {"reason", r.reason},
                                {"feedback", r.feedback.substr(0, 800)}, {"infra_error", r.infra_error},
                                {"speedup", r.speedup ? nlohmann::json(*r.speedup) : nlohmann::json()}});
        if (!ok) continue;
        std::string solution = cands[i].answer;
        nlohmann::json ported;
        if (musa) {  // verified as CUDA above; the row carries the MUSA port of that source
          port::PortResult pr = porter->port(solution);
          ported = {{"from", "cuda"}, {"verified_as", "cuda"}, {"sha256_cuda", sha256_hex(solution)},
                    {"changes", pr.changes.size()}, {"by_family", pr.by_family()}, {"warnings", port::to_json(pr.warnings)}};
          solution = pr.text;
          fs::path sol = work / "solutions" / ("level" + std::to_string(it->level)) / "musa";
          fs::create_directories(sol);
          std::string stem = std::to_string(it->id) + "_" + it->title;
          write_file_atomic(sol / (stem + (f == "native" ? ".mu" : ".py")), solution);
        }
        nlohmann::json row = {{"solution", solution}, {"format", f}, {"turns", 1},
                              {"messages", nlohmann::json::array({{{"role", "user"}, {"content", policy_prompt(*it, f, o)}},
                                                                   {{"role", "assistant"}, {"content", as_answer(solution, f, o.backend)}}})},
                              {"result", eval::to_json(r)}};
        if (musa) row["port"] = ported;
        it->rows.push_back(row);
      }
    }
  } else if (llm) {
    LlmTeacherOptions lo;
    lo.client.base_url = o.teacher;
    lo.client.api_key = o.teacher_api_key;
    lo.client.concurrency = o.teacher_concurrency;
    lo.model = o.teacher_model;
    lo.samples = o.teacher_samples;
    lo.repair_turns = o.teacher_turns;
    lo.format = formats[0];
    llm::OpenAIClient client(lo.client);
    auto& e = evaluator(cfg);
    ProgressBar bar("llm-teacher", keep.size(), o.progress);
    std::atomic<size_t> next{0};
    std::mutex mu;
    int endpoint_errors = 0;
    std::vector<std::thread> pool;
    for (int w = 0; w < std::max(1, o.teacher_concurrency); ++w)
      pool.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < keep.size();) {
          Item* it = keep[i];
          LlmTeacherResult r = llm_teach(lo, client, e, policy_prompt(*it, lo.format, o), it->problem);
          std::lock_guard lk(mu);
          if (!r.error.empty()) ++endpoint_errors, it->attempts.push_back({{"error", r.error}});
          for (auto& a : r.attempts) it->attempts.push_back(a);
          for (auto& v : r.verified) {
            v["format"] = lo.format;
            it->rows.push_back(v);
          }
          bar.advance(1, it->title);
        }
      });
    for (auto& t : pool) t.join();
    teacher_stats["endpoint_errors"] = endpoint_errors;
  }

  lap("teacher");

  // ---- 5. dataset, report ----------------------------------------------------------------
  std::vector<Item*> ordered = keep;
  if (o.order == "curriculum")
    std::stable_sort(ordered.begin(), ordered.end(), [](Item* a, Item* b) { return a->difficulty < b->difficulty; });
  std::string problems_jsonl, dataset_jsonl;
  std::map<std::string, int> family_hist;
  std::map<int, std::array<int, 3>> solved;  // level -> {kept, solved (any format), attempts passed}
  std::map<std::string, std::array<int, 2>> per_format;  // format -> {passed, tried}
  std::map<int, std::vector<double>> speedups;
  for (auto* it : ordered) {
    for (auto& f : it->g.families()) ++family_hist[f];
    auto& s = solved[it->level];
    ++s[0];
    s[1] += !it->rows.empty();
    for (auto& a : it->attempts) {
      if (!a.contains("format")) continue;
      auto& pf = per_format[a["format"].get<std::string>() + "/L" + std::to_string(it->level)];
      ++pf[1];
      bool ok = a["verdict"] == "ok" || a["verdict"] == "compiled";
      pf[0] += ok;
      if (ok && a["speedup"].is_number()) speedups[it->level].push_back(a["speedup"].get<double>());
    }
    nlohmann::json pj = {{"id", it->id}, {"level", it->level}, {"name", it->title}, {"path", fs::relative(it->path, out).string()},
                         {"families", it->g.families()}, {"difficulty", it->difficulty}, {"flops", it->cost.flops},
                         {"bytes", it->cost.bytes}, {"graph", it->g.to_json()}, {"solved", !it->rows.empty()},
                         {"provenance", {{"seed", o.seed}, {"index", it->index}}},
                         {"teacher_attempts", it->attempts}};
    if (it->probe.contains("eager")) pj["eager_us"] = it->probe["eager"].value("median_us", 0.0);
    // The task as a policy sees it, per solution format (what `musacoder rft` samples from).
    pj["prompts"] = {{"native", policy_prompt(*it, "native", o)}, {"kernelbench", policy_prompt(*it, "kernelbench", o)}};
    pj["backend"] = o.backend;
    problems_jsonl += pj.dump() + "\n";
    for (auto& row : it->rows) {
      const auto& r = row["result"];
      nlohmann::json d = {{"problem_id", it->id}, {"level", it->level}, {"name", it->title}, {"problem", it->source},
                          {"families", it->g.families()}, {"difficulty", it->difficulty}, {"format", row["format"]},
                          {"solution", row["solution"]}, {"verdict", r.value("verdict", "")},
                          {"speedup", r.contains("speedup") ? r["speedup"] : nlohmann::json()},
                          {"reward", r.contains("reward") ? r["reward"] : nlohmann::json()},
                          {"messages", row["messages"]}, {"backend", o.backend},
                          {"provenance", {{"teacher", o.teacher == "builtin" ? "builtin" : o.teacher_model}, {"seed", o.seed},
                                          {"index", it->index}, {"turns", row["turns"]}}}};
      if (row.contains("port")) d["port"] = row["port"];
      dataset_jsonl += d.dump() + "\n";
    }
  }
  write_file_atomic(out / "problems.jsonl", problems_jsonl);
  write_file_atomic(out / "dataset.jsonl", dataset_jsonl);
  std::string rej;
  for (auto& r : rejected) rej += r.dump() + "\n";
  write_file_atomic(out / "rejected.jsonl", rej);

  double minutes = std::chrono::duration<double>(Clock::now() - t0).count() / 60;
  std::string t = fmt::format("\nsynth: {} candidates generated, {} problems kept, {} dataset rows, {:.1f} min "
                              "({:.1f} kept problems/min)\n\n",
                              items.size(), keep.size(), std::count(dataset_jsonl.begin(), dataset_jsonl.end(), '\n'),
                              minutes, keep.size() / std::max(minutes, 1e-9));
  t += "level  generated  duplicate  contaminated  invalid  infra  kept  solved  pass(solved/kept)\n";
  nlohmann::json levels = nlohmann::json::object();
  for (auto& [level, n] : target) {
    std::map<std::string, int> c;
    int gen_n = 0;
    for (auto& it : items)
      if (it.level == level) ++gen_n, ++c[it.drop_stage.empty() ? "kept" : it.drop_stage];
    auto s = solved[level];
    double pass = s[0] ? 100.0 * s[1] / s[0] : 0;
    t += fmt::format("L{}     {:>9}  {:>9}  {:>12}  {:>7}  {:>5}  {:>4}  {:>6}  {:>6.1f}%\n", level, gen_n, c["duplicate"],
                     c["contaminated"], c["validity"], c["infra"], s[0], s[1], pass);
    levels[std::to_string(level)] = {{"generated", gen_n}, {"duplicate", c["duplicate"]}, {"contaminated", c["contaminated"]},
                                     {"invalid", c["validity"]}, {"infra", c["infra"]}, {"kept", s[0]}, {"solved", s[1]},
                                     {"pass_rate", s[0] ? static_cast<double>(s[1]) / s[0] : 0.0},
                                     {"speedups", speedups[level]}};
  }
  std::map<std::string, int> reasons;
  for (auto& r : rejected)
    if (r["stage"] == "validity") {
      std::string why = r["reason"];
      reasons[why.substr(0, why.find_first_of(":0123456789"))] += 1;
    }
  if (!reasons.empty()) {
    t += "\ninvalid problems by reason:\n";
    for (auto& [why, n] : reasons) t += fmt::format("  {:>5}  {}\n", n, why);
  }
  t += "\nop families of kept problems:\n";
  for (auto& [f, n] : family_hist) t += fmt::format("  {:<12} {:>5}\n", f, n);
  if (!per_format.empty()) {
    t += "\nteacher solutions verified (format/level: passed/tried):\n";
    for (auto& [k, v] : per_format) t += fmt::format("  {:<16} {:>4}/{:<4} {:.1f}%\n", k, v[0], v[1], v[1] ? 100.0 * v[0] / v[1] : 0);
  }
  for (auto& [level, v] : speedups)
    if (!v.empty()) t += fmt::format("speedup vs eager, L{} (verified): {}\n", level, quantiles(v));
  nlohmann::json port_summary;
  if (musa) {  // what the port did to the dataset's solutions (verified as CUDA before it)
    int rows = 0, changes = 0, warned_rows = 0;
    std::map<std::string, int> warning_ids;
    for (auto* it : keep)
      for (auto& row : it->rows) {
        ++rows;
        changes += row["port"]["changes"].get<int>();
        warned_rows += !row["port"]["warnings"].empty();
        for (auto& w : row["port"]["warnings"]) ++warning_ids[w["id"].get<std::string>()];
      }
    port_summary = {{"rows", rows}, {"changes", changes}, {"rows_with_warnings", warned_rows}, {"warnings", warning_ids},
                    {"rules", port_rules->files}};
    t += fmt::format("\nported to MUSA: {} rows, {} changes, {} rows with warnings (verified as CUDA before the port)\n",
                     rows, changes, warned_rows);
    for (auto& [id, n] : warning_ids) t += fmt::format("  warning {:<16} {:>5}\n", id, n);
  }
  t += "\nseconds per stage:";
  for (auto& [k, v] : stage_s.items()) t += fmt::format(" {} {:.0f}", k, v.get<double>());
  t += fmt::format("\nwrote {}/problems/, problems.jsonl, dataset.jsonl, rejected.jsonl, report.json\n", o.out_dir);
  nlohmann::json fam = family_hist;
  nlohmann::json pf = nlohmann::json::object();
  for (auto& [k, v] : per_format) pf[k] = {{"passed", v[0]}, {"tried", v[1]}};
  report["levels_report"] = levels;
  report["families"] = fam;
  report["teacher"] = {{"kind", o.teacher}, {"per_format_level", pf}, {"stats", teacher_stats}};
  report["kept"] = keep.size();
  report["minutes"] = minutes;
  report["kept_per_minute"] = keep.size() / std::max(minutes, 1e-9);
  report["dropped_by_stage"] = dropped_by;
  report["stage_seconds"] = stage_s;
  report["backend"] = o.backend;
  if (musa) report["port"] = port_summary;
  write_file_atomic(out / "report.json", report.dump(2));
  return {report, t};
}

}  // namespace mc::synth
