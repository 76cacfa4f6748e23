#include "bench/bench_run.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "synth/kernelbench_prompt.h"
#include "bench/report.h"
#include "common/check.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/jsonl.h"
#include "common/progress.h"
#include "eval/result.h"
#include "serve/verifier.h"
#include "synth/prompt.h"
#include "synth/task_set.h"

namespace mc::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using synth::kKernelBenchPromptName;
using synth::kernelbench_prompt;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One answer of one sample at one turn, and what MooreEval said of it.
struct TurnRecord {
  bool answered = false;      // the source gave an answer (error empty)
  std::string text, finish_reason, error;
  std::optional<eval::EvalResult> result;  // a verdict that stands (never an infra error)
  std::string infra;          // the last infra error of this answer ("" : none)
};

// The problems of the run with the prompt each is asked with.
std::vector<BenchProblem> load_set(const BenchOptions& o) {
  MC_CHECK(fs::exists(o.problems), "--problems: no folder or file ", o.problems);
  auto tasks = synth::load_tasks(o.problems, o.format, 0, o.backend);
  std::set<int> found;
  for (const auto& t : tasks) found.insert(t.level);
  for (int l : o.levels) {
    MC_CHECK(l >= 1 && l <= 3, "--levels: unknown level ", l, " (KernelBench has levels 1, 2 and 3)");
    MC_CHECK(found.count(l), "--levels: no problems at level ", l, " in ", o.problems, " (levels found: ",
             fmt::format("{}", fmt::join(found, ", ")), ")");
  }
  std::set<std::string> subset;
  if (!o.subset.empty()) {
    MC_CHECK(fs::is_regular_file(o.subset), "--subset: no file ", o.subset);
    std::istringstream in(read_file(o.subset));
    for (std::string line; std::getline(in, line);) {
      while (!line.empty() && isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      if (!line.empty() && line[0] != '#') subset.insert(line);
    }
  }
  std::vector<BenchProblem> out;
  std::set<std::string> matched;
  for (auto& t : tasks) {
    if (!o.levels.empty() && std::find(o.levels.begin(), o.levels.end(), t.level) == o.levels.end()) continue;
    if (!subset.empty()) {
      const auto& p = *t.problem;
      std::string hit = subset.count(p.key) ? p.key : subset.count(p.stem) ? p.stem : "";
      if (hit.empty()) continue;
      matched.insert(hit);
    }
    BenchProblem b{t.problem, t.level, o.prompt == "kernelbench" ? kernelbench_prompt(t.problem->source, o.eval_config.precision, o.backend)
                                                                  : t.prompt};
    out.push_back(std::move(b));
  }
  for (const auto& s : subset)
    MC_CHECK(matched.count(s), "--subset: ", s, " is not a problem of ", o.problems, " at the levels asked for");
  MC_CHECK(!out.empty(), "no problems to evaluate in ", o.problems);
  return out;
}

void check_options(BenchOptions& o) {
  MC_CHECK(o.model_dir.empty() != o.endpoint.empty(), "give the model as --model DIR (our engine) or --endpoint URL "
           "--model-name NAME (an OpenAI-compatible server), one of the two");
  MC_CHECK(o.endpoint.empty() || !o.model_name.empty(), "--endpoint needs --model-name (the model the server serves)");
  MC_CHECK(o.samples >= 1 && o.samples <= 1024, "--samples must be in 1..1024, got ", o.samples);
  MC_CHECK(o.turns >= 1 && o.turns <= 8, "--turns must be in 1..8, got ", o.turns);
  MC_CHECK(o.prompt == "kernelbench" || o.prompt == "musacoder", "--prompt: '", o.prompt, "' is not kernelbench or musacoder");
  if (o.format.empty()) o.format = "kernelbench";
  MC_CHECK(o.format == "kernelbench" || o.format == "native", "--format: '", o.format, "' is not kernelbench or native");
  MC_CHECK(!(o.prompt == "kernelbench" && o.format == "native"), "--prompt kernelbench asks for KernelBench's format "
           "(a ModelNew with load_inline); use --prompt musacoder for --format native");
  MC_CHECK(!o.out_dir.empty(), "bench-model needs --out DIR");
}

// The settings answers and verdicts depend on; a resumed run must have the same.
json run_settings(const BenchOptions& o, const std::vector<BenchProblem>& set) {
  json keys = json::array();
  for (const auto& p : set) keys.push_back(p.problem->key);
  json j = {{"format_version", 1},
          {"problems", fs::absolute(o.problems).string()},
          {"problem_keys", keys},
          {"model", o.model_dir.empty() ? json(nullptr) : json(fs::absolute(o.model_dir).string())},
          {"endpoint", o.endpoint.empty() ? json(nullptr) : json(o.endpoint)},
          {"model_name", o.model_name},
          {"samples", o.samples},
          {"turns", o.turns},
          {"temperature", o.sampling.temperature},
          {"top_p", o.sampling.top_p},
          {"max_new_tokens", o.sampling.max_new_tokens},
          {"seed", o.sampling.seed},
          {"prompt", o.prompt == "kernelbench" ? kKernelBenchPromptName : "musacoder task prompt (synth/prompt.cc)"},
          {"format", o.format},
          {"backend", o.backend},
          {"eval_config", o.eval_config.config_hash()}};
  // Only when set, so that runs from before the option still resume.
  if (o.sampling.loop_window > 0) j["loop_window"] = o.sampling.loop_window;
  return j;
}

// Eager and torch.compile medians (ms) per problem, KernelBench's baseline schema: from
// --baseline, none, or (the default) timed by this run after the answers are judged, and only
// for the problems that have a correct answer. A speedup over torch.compile is a correct
// answer's eager speedup times compile/eager; a problem with no correct answer needs no
// baseline, and timing torch.compile at published sizes is most of an evaluation's time when
// few answers pass (KernelBench level 1 on an H100: 469 s of 495 s).
const char* kTimedHere = "timed by this run, for the problems with a correct answer";

json load_baseline(const BenchOptions& o) {
  const fs::path path = fs::path(o.out_dir) / "baseline.json";
  if (fs::exists(path)) return json::parse(read_file(path));
  json b;
  if (!o.baseline_file.empty()) {
    MC_CHECK(fs::is_regular_file(o.baseline_file), "--baseline: no file ", o.baseline_file);
    b["eager"] = json::parse(read_file(o.baseline_file));
    std::string cpath = o.baseline_file;
    auto dot = cpath.rfind(".json");
    cpath = (dot == std::string::npos ? cpath : cpath.substr(0, dot)) + "_compile.json";
    b["compile"] = fs::exists(cpath) ? json::parse(read_file(cpath)) : json::object();
    b["source"] = fs::absolute(o.baseline_file).string();
    write_file_atomic(path, b.dump(2));
    return b;
  }
  if (!o.verifier_url.empty() || !o.compile_baseline)
    return json{{"eager", json::object()}, {"compile", json::object()},
                {"source", o.compile_baseline ? "none (the judges are a service: give --baseline)" : "none (--no-compile-baseline)"}};
  return json{{"eager", json::object()}, {"compile", json::object()}, {"errors", json::object()}, {"source", kTimedHere}};
}

// Problem p's timing of `kind` (eager | compile) in baseline.json's schema, or null.
const json* baseline_entry(const json& b, const char* kind, const eval::Problem& p) {
  std::string level = "level" + std::to_string(p.level), file = p.stem + ".py";
  if (!b.contains(kind) || !b[kind].contains(level) || !b[kind][level].contains(file)) return nullptr;
  return &b[kind][level][file];
}

bool has_baseline(const json& b, const eval::Problem& p) {
  return (baseline_entry(b, "eager", p) && baseline_entry(b, "compile", p)) ||
         (b.contains("errors") && b["errors"].contains(p.key));
}

// Times what `needed` lacks (when this run times its own baseline) and writes baseline.json.
void time_baseline(const BenchOptions& o, const std::vector<eval::ProblemPtr>& needed, json& b, double* seconds) {
  if (b.value("source", "") != kTimedHere) return;
  std::vector<eval::ProblemPtr> todo;
  for (const auto& p : needed)
    if (!has_baseline(b, *p)) todo.push_back(p);
  if (!todo.empty()) {
    auto t0 = Clock::now();
    fmt::print(stderr, "bench-model: timing eager and torch.compile references of the {} problem(s) with a correct answer "
               "(musacoder baseline)\n", todo.size());
    eval::EvaluatorOptions eo = o.evaluator;
    eo.progress = o.progress;
    eval::Evaluator ev(o.eval_config, eo);
    json t = ev.baseline(todo, true);
    for (const char* kind : {"eager", "compile"})
      for (auto& [level, files] : t[kind].items())
        for (auto& [file, entry] : files.items()) b[kind][level][file] = entry;
    for (auto& [key, err] : t["errors"].items()) b["errors"][key] = err;
    if (!t.value("hardware", "").empty()) b["hardware"] = t["hardware"];
    *seconds = since(t0);
  }
  write_file_atomic(fs::path(o.out_dir) / "baseline.json", b.dump(2));
}

std::optional<double> compile_over_eager(const json& baseline, const eval::Problem& p) {
  auto median = [&](const char* kind) -> std::optional<double> {
    const json* t = baseline_entry(baseline, kind, p);
    double ms = t ? t->value("median", 0.0) : 0.0;
    return ms > 0 ? std::optional<double>(ms) : std::nullopt;
  };
  auto e = median("eager"), c = median("compile");
  if (!e || !c) return std::nullopt;
  return *c / *e;
}

class Run {
 public:
  Run(const BenchOptions& o, std::vector<BenchProblem> set) : o_(o), set_(std::move(set)), out_(o.out_dir) {
    recs_.assign(set_.size(), std::vector<std::vector<TurnRecord>>(o.samples, std::vector<TurnRecord>(o.turns)));
    for (size_t i = 0; i < set_.size(); ++i) index_[set_[i].problem->key] = i;
  }

  // Earlier answers and verdicts (--resume): the last row of each (problem, sample, turn) wins.
  void load_earlier() {
    size_t answers = 0, verdicts = 0;
    if (fs::exists(out_ / "answers.jsonl"))
      for (auto& r : read_jsonl((out_ / "answers.jsonl").string()))
        if (auto* rec = find(r)) {
          *rec = TurnRecord{};
          rec->text = r.value("text", "");
          rec->finish_reason = r.value("finish_reason", "");
          rec->error = r.value("error", "");
          rec->answered = rec->error.empty();
        }
    if (fs::exists(out_ / "results.jsonl"))
      for (auto& r : read_jsonl((out_ / "results.jsonl").string()))
        if (auto* rec = find(r)) {
          if (!rec->answered || r.value("answer_sha256", "") != sha256_hex(rec->text)) continue;
          auto res = eval::result_from_json(r.at("result"));
          if (res.is_infra() || res.config_hash != o_.eval_config.config_hash()) continue;
          rec->result = std::move(res);
        }
    for (auto& p : recs_)
      for (auto& s : p)
        for (auto& t : s) answers += t.answered, verdicts += t.result.has_value();
    if (answers) fmt::print(stderr, "bench-model: resuming with {} answers and {} verdicts from {}\n", answers, verdicts, o_.out_dir);
  }

  void run(AnswerSource& source, serve::Verifier& verifier, json& timing) {
    answers_.open(out_ / "answers.jsonl", std::ios::app);
    results_.open(out_ / "results.jsonl", std::ios::app);
    MC_CHECK(answers_ && results_, "cannot write into ", o_.out_dir);
    double gen_s = 0, verify_tail_s = 0;
    for (size_t p = 0; p < set_.size(); ++p)  // resumed verdicts serve their twins too
      for (int s = 0; s < o_.samples; ++s)
        for (int t = 1; t <= o_.turns; ++t)
          if (recs_[p][s][t - 1].result) leaders_.emplace(twin_key(p, recs_[p][s][t - 1].text), Slot{p, s, t});
    for (int turn = 1; turn <= o_.turns; ++turn) {
      // Answers already there whose verdict is missing (a stopped run): judged first.
      std::vector<std::tuple<size_t, int>> todo;  // (problem, sample) needing an answer at this turn
      size_t submitted = 0;
      for (size_t p = 0; p < set_.size(); ++p)
        for (int s = 0; s < o_.samples; ++s) {
          if (!reached(p, s, turn)) continue;
          TurnRecord& rec = recs_[p][s][turn - 1];
          if (!rec.answered) todo.emplace_back(p, s);
          else if (!rec.result) submit(verifier, p, s, turn), ++submitted;
        }
      if (todo.empty() && submitted == 0) continue;
      std::vector<Conversation> convs;
      std::map<std::string, std::vector<int>> sample_of;  // conversation id -> the samples its answers fill
      if (turn == 1) {
        std::map<size_t, std::vector<int>> missing;
        for (auto [p, s] : todo) missing[p].push_back(s);
        for (auto& [p, ss] : missing) {
          Conversation c{set_[p].problem->key, {{"user", set_[p].prompt}}, static_cast<int>(ss.size())};
          sample_of[c.id] = ss;
          convs.push_back(std::move(c));
        }
      } else {
        for (auto [p, s] : todo) {
          Conversation c{fmt::format("{}#{}", set_[p].problem->key, s), history(p, s, turn), 1};
          sample_of[c.id] = {s};
          convs.push_back(std::move(c));
        }
      }
      size_t want = 0;
      for (const auto& c : convs) want += c.n;
      fmt::print(stderr, "bench-model: turn {}: {} answers to generate from {}, {} earlier ones to judge\n", turn, want,
                 source.describe(), submitted);
      // The judges time nothing while our model generates on the same GPU (compiles and
      // correctness trials go on); released when generation ends.
      if (o_.hold_timing) verifier.hold(true);
      auto t0 = Clock::now();
      {
        ProgressBar bar(fmt::format("turn {} answers", turn), want, o_.progress);
        source.generate(convs, o_.sampling, [&](const Answer& a) {
          auto it = sample_of.find(a.id);
          MC_CHECK(it != sample_of.end() && a.index >= 0 && a.index < static_cast<int>(it->second.size()),
                   "answer source: unexpected answer ", a.id, "/", a.index);
          size_t p = index_.at(turn == 1 ? a.id : a.id.substr(0, a.id.rfind('#')));
          int s = it->second[a.index];
          TurnRecord& rec = recs_[p][s][turn - 1];
          rec = TurnRecord{};
          rec.text = a.text;
          rec.finish_reason = a.finish_reason;
          rec.error = a.error;
          rec.answered = a.error.empty();
          answers_ << json{{"problem", set_[p].problem->key}, {"sample", s}, {"turn", turn}, {"text", a.text},
                           {"finish_reason", a.finish_reason}, {"error", a.error}}.dump() << "\n";
          answers_.flush();
          if (rec.answered) submit(verifier, p, s, turn);
          else rec.infra = "answer source: " + a.error;
          bar.advance(1, a.error.empty() ? "" : "source error");
        });
      }
      gen_s += since(t0);
      if (o_.hold_timing) verifier.hold(false);
      // Each verdict is written the moment it comes, so that a run stopped while the judges
      // work (KernelBench at published sizes takes many minutes) resumes with what they did.
      auto t1 = Clock::now();
      std::vector<size_t> pending = verifier.outstanding();
      {
        ProgressBar bar(fmt::format("turn {} verdicts", turn), pending.size(), o_.progress);
        while (!pending.empty()) {
          for (auto& [id, r] : verifier.collect_any(pending)) {
            pending.erase(std::find(pending.begin(), pending.end(), id));
            size_t p = id / (o_.samples * o_.turns);
            int s = static_cast<int>(id / o_.turns % o_.samples), t = static_cast<int>(id % o_.turns) + 1;
            bar.advance(1, r.is_infra() ? "infra error" : "");
            Slot leader{p, s, t};
            record(leader, r, nullptr);
            auto f = followers_.find(twin_key(p, recs_[p][s][t - 1].text));
            if (f != followers_.end()) {
              for (const Slot& twin : f->second) record(twin, r, &leader);
              followers_.erase(f);
            }
          }
        }
      }
      verify_tail_s += since(t1);
    }
    timing["generation_s"] = gen_s;
    timing["verification_after_generation_s"] = verify_tail_s;
    timing["twins_sharing_a_verdict"] = twins_shared_;
  }

  // What each sample came to by each turn.
  std::vector<std::vector<SampleOutcome>> outcomes(const json& baseline) const {
    std::vector<std::vector<SampleOutcome>> by_turn(o_.turns);
    for (size_t p = 0; p < set_.size(); ++p) {
      auto ratio = compile_over_eager(baseline, *set_[p].problem);
      for (int s = 0; s < o_.samples; ++s)
        for (int t = 1; t <= o_.turns; ++t) {
          SampleOutcome out;
          out.problem = set_[p].problem->key;
          out.level = set_[p].level;
          out.sample = s;
          out.compile_over_eager = ratio;
          for (int k = 1; k <= t; ++k) {
            const TurnRecord& rec = recs_[p][s][k - 1];
            if (!rec.result) break;  // not answered or not judged: no score
            const eval::EvalResult& r = *rec.result;
            bool ok = r.verdict == eval::Verdict::kOk;
            if (!ok && k < t && reached(p, s, k + 1)) continue;  // a later turn answered it
            out.judged = true;
            out.turn = k;
            out.verdict = eval::to_string(r.verdict);
            out.compiled = r.compiled;
            out.correct = ok;
            out.legal = r.compiled && r.legal() && r.verdict != eval::Verdict::kCompileError;
            if (!r.rule.empty()) out.rules.push_back(r.rule);
            for (const auto& v : r.violations)
              if (v.rule != r.rule) out.rules.push_back(v.rule);
            if (ok && r.speedup && !r.speedup_flagged) out.speedup_eager = r.speedup;
            break;
          }
          by_turn[t - 1].push_back(std::move(out));
        }
    }
    return by_turn;
  }

  const std::vector<BenchProblem>& set() const { return set_; }

  // The problems with at least one correct answer, at any turn.
  std::vector<eval::ProblemPtr> correct_problems() const {
    std::vector<eval::ProblemPtr> out;
    for (size_t p = 0; p < set_.size(); ++p) {
      bool ok = false;
      for (const auto& s : recs_[p])
        for (const auto& t : s) ok |= t.result && t.result->verdict == eval::Verdict::kOk;
      if (ok) out.push_back(set_[p].problem);
    }
    return out;
  }

 private:
  TurnRecord* find(const json& r) {
    if (!r.contains("problem") || !r.contains("sample") || !r.contains("turn")) return nullptr;
    auto it = index_.find(r["problem"].get<std::string>());
    int s = r["sample"].get<int>(), t = r["turn"].get<int>();
    if (it == index_.end() || s < 0 || s >= o_.samples || t < 1 || t > o_.turns) return nullptr;
    return &recs_[it->second][s][t - 1];
  }

  // Whether turn `turn` of a sample is asked: turn 1 always; a later one once the turn before
  // was judged and failed.
  bool reached(size_t p, int s, int turn) const {
    if (turn == 1) return true;
    const TurnRecord& prev = recs_[p][s][turn - 2];
    return reached(p, s, turn - 1) && prev.result && prev.result->verdict != eval::Verdict::kOk;
  }

  std::vector<llm::ChatMessage> history(size_t p, int s, int turn) const {
    std::vector<llm::ChatMessage> m = {{"user", set_[p].prompt}};
    for (int k = 1; k < turn; ++k) {
      const TurnRecord& rec = recs_[p][s][k - 1];
      m.push_back({"assistant", rec.text});
      m.push_back({"user", synth::repair_prompt(rec.result->feedback)});
    }
    return m;
  }

  // An answer whose text is one already submitted for the same problem (any sample, any turn)
  // is not judged again: it gets that answer's verdict, now or when it comes. A nearly
  // deterministic model writes the same answer over and over (87.5% twins in the small recipe's RL
  // steps), and each judgement costs a compile, the correctness trials and timing alone on the
  // GPU. The same code gets one verdict, its speedup included; `--judge-twins` judges each.
  // An infra error is not shared as a verdict: its twins get the infra error too (no score), and
  // a later twin is judged itself.
  struct Slot {
    size_t p;
    int s, turn;
  };
  using TwinKey = std::pair<size_t, std::string>;
  static TwinKey twin_key(size_t p, const std::string& text) { return {p, sha256_hex(text)}; }

  // A verdict (or infra error) for one answer, written as it comes; `twin_of`: the answer whose
  // judgement it shares.
  void record(const Slot& at, const eval::EvalResult& r, const Slot* twin_of) {
    TurnRecord& rec = recs_[at.p][at.s][at.turn - 1];
    json row{{"problem", set_[at.p].problem->key}, {"sample", at.s}, {"turn", at.turn},
             {"answer_sha256", sha256_hex(rec.text)}, {"result", eval::to_json(r)}};
    if (twin_of) {
      row["twin_of"] = json{{"sample", twin_of->s}, {"turn", twin_of->turn}};
      twins_shared_ += !r.is_infra();
    }
    results_ << row.dump() << "\n";
    results_.flush();
    if (r.is_infra()) rec.infra = "verifier: " + r.infra_error;
    else rec.result = r;
  }

  void submit(serve::Verifier& v, size_t p, int s, int turn) {
    if (!o_.judge_twins) {
      TwinKey key = twin_key(p, recs_[p][s][turn - 1].text);
      if (auto it = leaders_.find(key); it != leaders_.end()) {
        const Slot& l = it->second;
        const TurnRecord& lead = recs_[l.p][l.s][l.turn - 1];
        if (lead.result) {  // judged earlier (this run or resumed)
          record(Slot{p, s, turn}, *lead.result, &l);
          return;
        }
        if (lead.infra.empty()) {  // submitted, its judgement not back yet
          followers_[key].push_back(Slot{p, s, turn});
          return;
        }
      }
      leaders_[key] = Slot{p, s, turn};  // the first of its text, or after an infra error
    }
    eval::Candidate c;
    c.problem = set_[p].problem;
    c.problem_ref = c.problem->key;
    c.sample_id = fmt::format("{}.t{}", s, turn);
    c.answer = recs_[p][s][turn - 1].text;
    c.origin = "bench-model";
    v.submit((p * o_.samples + s) * o_.turns + (turn - 1), std::move(c));
  }

  const BenchOptions& o_;
  std::vector<BenchProblem> set_;
  fs::path out_;
  std::map<std::string, size_t> index_;
  std::vector<std::vector<std::vector<TurnRecord>>> recs_;  // [problem][sample][turn - 1]
  std::ofstream answers_, results_;
  std::map<TwinKey, Slot> leaders_;                // by problem and text: the answer judged for its twins
  std::map<TwinKey, std::vector<Slot>> followers_;  // twins waiting for their leader's judgement
  size_t twins_shared_ = 0;
};

}  // namespace

BenchResult run_bench(const BenchOptions& opts) {
  auto t0 = Clock::now();
  BenchOptions o = opts;
  check_options(o);
  auto set = load_set(o);
  const fs::path out(o.out_dir);
  json settings = run_settings(o, set);
  if (fs::exists(out / "run.json")) {
    MC_CHECK(o.resume, o.out_dir, " already holds a bench-model run: pass --resume to continue it, or choose another --out");
    json earlier = json::parse(read_file(out / "run.json"));
    for (auto& [k, v] : settings.items())
      if (k != "endpoint")  // the same served model may come back at another address
        MC_CHECK(earlier.value(k, json()) == v, "--resume: ", k, " differs from the run in ", o.out_dir, " (was ",
                 earlier.value(k, json()).dump().substr(0, 200), ", now ", v.dump().substr(0, 200), ")");
  }

  // The source first: an unreachable endpoint or a bad model folder stops the run before any
  // judge starts and before the run folder is made.
  std::unique_ptr<AnswerSource> source;
  if (!o.model_dir.empty()) {
    source = make_engine_source({o.model_exe, o.model_dir, o.model_device, o.max_batch, o.out_dir});
  } else {
    EndpointSourceOptions eo;
    eo.client.base_url = o.endpoint;
    eo.client.api_key = o.api_key;
    eo.client.concurrency = o.concurrency;
    eo.client.timeout_s = o.request_timeout_s;
    eo.client.max_retries = o.max_retries;
    eo.model_name = o.model_name;
    source = make_endpoint_source(eo);
  }
  fs::create_directories(out);
  write_file_atomic(out / "run.json", settings.dump(2));
  json timing = json::object();
  json baseline = load_baseline(o);

  Run run(o, set);
  run.load_earlier();
  {
    eval::EvaluatorOptions eo = o.evaluator;
    eo.progress = false;
    eo.timing_gate = o.hold_timing;
    auto verifier = o.verifier_url.empty() ? serve::make_in_process_verifier(o.eval_config, eo)
                                           : serve::make_service_verifier(o.verifier_url, o.verifier_token,
                                                                          o.eval_config);
    run.run(*source, *verifier, timing);
  }
  double baseline_s = 0;
  time_baseline(o, run.correct_problems(), baseline, &baseline_s);
  timing["baseline_s"] = baseline_s;
  timing["wall_s"] = since(t0);
  // A resumed run's time is the sum over its invocations (timing.json keeps each).
  json sessions = fs::exists(out / "timing.json") ? json::parse(read_file(out / "timing.json")) : json::array();
  sessions.push_back(timing);
  write_file_atomic(out / "timing.json", sessions.dump(2));
  json total = json::object();
  for (const auto& s : sessions)
    for (auto& [k, v] : s.items()) total[k] = total.value(k, 0.0) + v.get<double>();
  total["invocations"] = sessions.size();
  ReportInput in{o, run.set(), run.outcomes(baseline), baseline, total, source->describe()};
  return write_report(in);
}

}  // namespace mc::bench
