#include "rft/rft.h"

#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/jsonl.h"
#include "common/low_prob.h"
#include "common/progress.h"
#include "common/subprocess.h"
#include "eval/candidates.h"
#include "eval/extract.h"
#include "eval/problem.h"
#include "eval/result.h"
#include "rft/repair.h"
#include "serve/client.h"
#include "serve/verifier.h"
#include "synth/prompt.h"
#include "synth/task_set.h"

namespace mc::rft {
namespace {

using nlohmann::json;

using RftProblem = synth::Task;

// Step 2: K answers per problem from the policy (or --samples-from). `stats` gets, per answer,
// its token count and low-probability tokens when the rows carry the sampler's logprobs.
struct SampleStats {
  int tokens = 0;
  std::optional<int> low_prob_tokens;
};

std::vector<eval::Candidate> sample_answers(const RftOptions& o, const std::vector<RftProblem>& problems,
                                            std::vector<SampleStats>& stats) {
  const fs::path out(o.out_dir);
  std::vector<eval::ProblemPtr> ptrs;
  std::map<std::string, eval::ProblemPtr> by_key;
  for (const auto& p : problems) {
    ptrs.push_back(p.problem);
    by_key[p.problem->key] = p.problem;
  }
  // Rows of `musacoder-model generate` ({id, sample, text}) -> candidates.
  auto from_generate = [&](const fs::path& file) {
    std::vector<eval::Candidate> cands;
    auto rows = read_jsonl(file.string());
    for (size_t i = 0; i < rows.size(); ++i) {
      const json& r = rows[i];
      MC_CHECK(r.contains("id") && r.contains("text") && r.contains("sample"), file.string(), ":", i + 1,
               ": a generate row needs id, sample and text");
      auto it = by_key.find(r["id"].get<std::string>());
      MC_CHECK(it != by_key.end(), file.string(), ":", i + 1, ": unknown problem ", r["id"].dump());
      eval::Candidate c;
      c.problem = it->second;
      c.problem_ref = it->first;
      c.sample_id = std::to_string(r["sample"].get<int>());
      c.answer = r["text"].get<std::string>();
      c.origin = fmt::format("{}:{}", file.string(), i + 1);
      cands.push_back(std::move(c));
      SampleStats st;
      if (r.contains("logprobs") && r["logprobs"].is_array()) {
        std::vector<double> lp;
        for (const auto& x : r["logprobs"]) lp.push_back(x.is_number() ? x.get<double>() : 0.0);
        st.tokens = static_cast<int>(lp.size());
        st.low_prob_tokens = count_low_prob(lp.data(), lp.size());
      }
      stats.push_back(st);
    }
    return cands;
  };
  if (!o.samples_from.empty()) {
    MC_CHECK(fs::is_regular_file(o.samples_from), "--samples-from: no file ", o.samples_from);
    // The samples of an earlier rft run (generate's rows), or answers in `musacoder eval`'s JSONL.
    std::ifstream in(o.samples_from);
    std::string first;
    std::getline(in, first);
    json head = json::parse(first, nullptr, false);
    if (head.is_object() && head.contains("id") && head.contains("text") && head.contains("sample"))
      return from_generate(o.samples_from);
    auto cands = eval::load_candidates(o.samples_from, ptrs);
    stats.assign(cands.size(), SampleStats{});
    return cands;
  }
  MC_CHECK(!o.model_dir.empty(), "rft needs --model (the policy to sample from) or --samples-from FILE");
  MC_CHECK(fs::is_regular_file(fs::path(o.model_dir) / "config.json"), "--model: ", o.model_dir,
           " is not a Hugging Face model directory (no config.json)");
  MC_CHECK(o.samples >= 1, "--samples must be at least 1");
  std::string prompts;
  for (const auto& p : problems)
    prompts += json{{"id", p.problem->key}, {"messages", {{{"role", "user"}, {"content", p.prompt}}}}}.dump() + "\n";
  write_file_atomic(out / "prompts.jsonl", prompts);
  // What the samples depend on; equal -> the samples of an earlier run are reused.
  json meta = {{"prompts", sha256_hex(prompts)}, {"n", o.samples},
               {"temperature", o.temperature}, {"top_p", o.top_p}, {"max_new_tokens", o.max_new_tokens},
               {"seed", o.seed}};
  if (o.loop_window > 0) meta["loop_window"] = o.loop_window;  // only when set: older samples stay reusable
  // The model is named by its weights (model*.safetensors: a checkpoint's optimizer state is not
  // the policy), not by its folder: a recipe rerun with other SFT settings writes another model
  // to the same path, and a recipe seed carries samples to another lease or run folder (the
  // same model there only if its weights hash the same).
  json weights = json::object();
  for (const auto& e : fs::directory_iterator(o.model_dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors" && e.path().filename().string().rfind("model", 0) == 0)
      weights[e.path().filename().string()] = file_sha256_hex(e.path().string());
  // The weights name the model; a folder without model*.safetensors is named by its path.
  if (weights.empty()) meta["model"] = fs::absolute(o.model_dir).string();
  else meta["weights_sha256"] = weights;
  const fs::path samples = out / "samples.jsonl", meta_path = out / "samples.meta.json";
  bool reuse = fs::exists(samples) && fs::exists(meta_path) && json::parse(read_file(meta_path)) == meta;
  if (reuse) {
    fmt::print(stderr, "rft: reusing {} (same model, prompts and sampling)\n", samples.string());
  } else {
    fs::remove(meta_path);
    std::string tmp = (out / "samples.jsonl.tmp").string();
    SubprocessOptions so;
    so.argv = {o.model_exe, "generate", "--model", o.model_dir, "--prompts", (out / "prompts.jsonl").string(), "--chat",
               "--n", std::to_string(o.samples), "--temperature", fmt::format("{}", o.temperature), "--top-p",
               fmt::format("{}", o.top_p), "--max-new-tokens", std::to_string(o.max_new_tokens), "--seed",
               std::to_string(o.seed), "--device", o.model_device, "--max-batch", std::to_string(o.max_batch), "--out", tmp};
    if (!o.progress) so.argv.push_back("--no-progress");
    if (o.loop_window > 0) so.argv.insert(so.argv.end(), {"--stop-loops", std::to_string(o.loop_window)});
    so.capture_stdout = so.capture_stderr = false;
    fmt::print(stderr, "rft: sampling {} answers for each of {} problems\n", o.samples, problems.size());
    Subprocess gen(so);
    ExitStatus st = gen.wait();
    MC_CHECK(st.ok(), "rft: musacoder-model generate failed (", st.describe(), ")");
    fs::rename(tmp, samples);
    write_file_atomic(meta_path, meta.dump(2));
  }
  return from_generate(samples);
}

std::string answer_key(const eval::Candidate& c) {
  return KeyBuilder().add(c.problem ? c.problem->key : c.problem_ref).add(c.sample_id).add(c.answer).hex();
}

// Step 3: every answer through MooreEval. Rows go to verified.jsonl as they finish.
std::vector<eval::EvalResult> verify_answers(const RftOptions& o, const std::vector<eval::Candidate>& cands) {
  const fs::path path = fs::path(o.out_dir) / "verified.jsonl";
  const std::string cfg_hash = o.eval_config.config_hash();
  std::vector<eval::EvalResult> results(cands.size());
  // Earlier rows of the same answers under the same settings (a run that stopped midway).
  std::map<std::string, json> earlier;
  if (fs::exists(path))
    for (auto& r : read_jsonl(path.string()))
      if (r.contains("key") && r.contains("result") && r["result"].value("config_hash", "") == cfg_hash &&
          r["result"].value("verdict", "") != "infra_error")
        earlier[r["key"].get<std::string>()] = r;
  std::string kept_rows;
  std::vector<size_t> todo;
  for (size_t i = 0; i < cands.size(); ++i) {
    auto it = earlier.find(answer_key(cands[i]));
    if (it != earlier.end()) {
      results[i] = eval::result_from_json(it->second["result"]);
      kept_rows += it->second.dump() + "\n";
    } else {
      todo.push_back(i);
    }
  }
  write_file_atomic(path, kept_rows);
  if (!earlier.empty())
    fmt::print(stderr, "rft: {} answers already judged in {}, {} to judge\n", cands.size() - todo.size(), path.string(),
               todo.size());
  if (todo.empty()) return results;
  // Twins: an answer whose text another sample of the same problem has is judged once, and its
  // twins get that verdict (bench-model does the same; a model near determinism samples the same
  // answer over and over). Their rows say twin_of. --judge-twins judges each.
  std::vector<std::pair<size_t, size_t>> twins;  // (answer, the one judged for it)
  if (!o.judge_twins) {
    std::map<std::pair<std::string, std::string>, size_t> first;
    std::vector<size_t> judged;
    for (size_t i : todo) {
      const auto& c = cands[i];
      auto [it, fresh] = first.emplace(std::make_pair(c.problem ? c.problem->key : c.problem_ref, sha256_hex(c.answer)), i);
      if (fresh) judged.push_back(i);
      else twins.emplace_back(i, it->second);
    }
    todo = std::move(judged);
  }
  std::ofstream log(path, std::ios::app);
  MC_CHECK(log, "cannot write ", path.string());
  std::mutex mu;
  ProgressBar bar("verify", todo.size(), o.progress);
  auto record = [&](size_t i, const eval::EvalResult& r) {
    std::lock_guard<std::mutex> lock(mu);
    bar.advance(1, eval::to_string(r.verdict));
    results[i] = r;
    json row = {{"key", answer_key(cands[i])}, {"problem", r.problem_key}, {"sample", cands[i].sample_id},
                {"verdict", eval::to_string(r.verdict)}, {"result", eval::to_json(r)}};
    log << row.dump() << "\n";
    log.flush();
  };
  if (o.verifier_url.empty()) {
    eval::Evaluator ev(o.eval_config, o.evaluator);
    std::condition_variable cv;
    size_t finished = 0;
    for (size_t i : todo)
      ev.submit(cands[i], [&, i](eval::EvalResult r) {
        record(i, r);
        std::lock_guard<std::mutex> lock(mu);
        ++finished;
        cv.notify_all();
      });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return finished == todo.size(); });
  } else {
    serve::ClientOptions co;
    co.url = o.verifier_url;
    co.token = o.verifier_token;
    std::vector<serve::VerifyItem> items;
    std::vector<size_t> sent, rest;  // rest: judged locally below (unknown problem, unreadable input)
    for (size_t i : todo) {
      const auto& c = cands[i];
      if (!c.problem || !c.input_error.empty()) {
        rest.push_back(i);
        continue;
      }
      items.push_back(serve::verify_item(c));
      sent.push_back(i);
    }
    serve::VerifyClient client(co);
    auto got = client.verify(items);
    for (size_t k = 0; k < got.size(); ++k) record(sent[k], eval::result_from_json(got[k]));
    // Items that could not be sent still get their row.
    if (!rest.empty()) {
      eval::EvaluatorOptions eo = o.evaluator;
      eo.progress = false;
      eval::Evaluator ev(o.eval_config, eo);
      std::vector<eval::Candidate> batch;
      for (size_t i : rest) batch.push_back(cands[i]);
      auto local = ev.run(batch);
      for (size_t k = 0; k < local.size(); ++k) record(rest[k], local[k]);
    }
  }
  for (auto [i, lead] : twins) {
    eval::EvalResult r = results[lead];
    r.sample_id = cands[i].sample_id;
    results[i] = r;
    json row = {{"key", answer_key(cands[i])}, {"problem", r.problem_key}, {"sample", cands[i].sample_id},
                {"verdict", eval::to_string(r.verdict)}, {"twin_of", cands[lead].sample_id}, {"result", eval::to_json(r)}};
    log << row.dump() << "\n";
  }
  log.flush();
  if (!twins.empty()) fmt::print(stderr, "rft: {} answers shared a twin's verdict (the same text, judged once)\n", twins.size());
  return results;
}

}  // namespace

RftResult run_rft(const RftOptions& o) {
  MC_CHECK(!o.out_dir.empty(), "rft needs --out DIR");
  MC_CHECK(!o.problems.empty(), "rft needs --problems (a folder of KernelBench problems or a synth problems.jsonl)");
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  MC_CHECK(!ec && fs::is_directory(o.out_dir), "--out: cannot create ", o.out_dir, ec ? ": " + ec.message() : "");
  const fs::path out(o.out_dir);
  {
    std::ofstream probe(out / ".write-test");
    MC_CHECK(probe, "--out: ", o.out_dir, " is not writable");
  }
  fs::remove(out / ".write-test");

  if (!o.verifier_url.empty()) {  // before sampling: a service that judges otherwise would waste it
    serve::ClientOptions co;
    co.url = o.verifier_url;
    co.token = o.verifier_token;
    serve::check_service_config(o.verifier_url, serve::VerifyClient(co).health(), o.eval_config);
  }
  auto problems = synth::load_tasks(o.problems, o.format, o.level, o.backend);  // step 1
  std::map<std::string, const RftProblem*> by_key;
  for (const auto& p : problems) by_key[p.problem->key] = &p;
  std::vector<SampleStats> stats;
  auto cands = sample_answers(o, problems, stats);
  MC_CHECK(!cands.empty(), "rft: no answers to verify");
  auto results = verify_answers(o, cands);

  // Step 4: selection.
  std::vector<RftAnswer> answers(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) {
    const auto& c = cands[i];
    const auto& r = results[i];
    auto& a = answers[i];
    a.problem = c.problem ? c.problem->key : "?" + c.problem_ref;
    a.sample_id = c.sample_id;
    auto ex = eval::extract_solution(c.answer);
    a.code = ex.ok ? ex.code : c.answer;
    a.verdict = eval::to_string(r.verdict);
    if (r.speedup && !r.speedup_flagged) a.speedup = r.speedup;
    a.tokens = stats[i].tokens;
    a.low_prob_tokens = stats[i].low_prob_tokens;
  }
  std::vector<CodeFingerprint> prints;
  auto decisions = select_answers(answers, o.selection, &prints);
  RftResult res;
  res.report = make_report(answers, decisions, prints, problems.size(), o.selection);
  std::string dataset, dropped;
  for (size_t i = 0; i < cands.size(); ++i) {
    const auto& d = decisions[i];
    const auto& a = answers[i];
    json speed = a.speedup ? json(*a.speedup) : json(nullptr);
    if (d.kept) {
      const RftProblem* p = by_key.at(a.problem);
      dataset += json{{"messages", {{{"role", "user"}, {"content", p->prompt}}, {{"role", "assistant"}, {"content", cands[i].answer}}}},
                      {"problem", a.problem}, {"sample", a.sample_id}, {"format", results[i].solution_format},
                      {"speedup", speed}, {"speed_bucket", speed_bucket_name(d.speed_bucket)},
                      {"reward", results[i].reward ? json(*results[i].reward) : json(nullptr)}, {"source", "rft"}}
                     .dump() +
                 "\n";
      ++res.dataset_rows;
    } else {
      json row = {{"problem", a.problem}, {"sample", a.sample_id}, {"reason", d.reason}, {"verdict", a.verdict},
                  {"speedup", speed}};
      if (!d.twin.empty()) {
        row["twin"] = d.twin;
        row["similarity"] = d.similarity;
      }
      if (d.reason == "rejected" || d.reason == "infra_error") row["why"] = results[i].reason;
      dropped += row.dump() + "\n";
    }
  }
  write_file_atomic(out / "dataset.jsonl", dataset);
  write_file_atomic(out / "dropped.jsonl", dropped);
  json rep = res.report.json;

  // Repair conversations: failed answers with MooreEval's feedback, paired with passing ones.
  if (o.repair_per_problem > 0) {
    std::vector<FailedAnswer> failed;
    std::vector<PassingAnswer> passing;
    for (size_t i = 0; i < cands.size(); ++i) {
      const auto& a = answers[i];
      const auto& r = results[i];
      if (!cands[i].problem) continue;
      if (decisions[i].kept) passing.push_back({a.problem, cands[i].answer, "rft:" + a.sample_id});
      else if (r.verdict != eval::Verdict::kOk && !r.is_infra() && !r.feedback.empty())
        failed.push_back({a.problem, a.sample_id, by_key.at(a.problem)->prompt, cands[i].answer, a.verdict, r.feedback});
    }
    size_t from_run = passing.size();
    if (!o.repair_from.empty())
      for (auto& p : load_passing_answers(o.repair_from))
        if (by_key.count(p.problem)) passing.push_back(std::move(p));
    auto rows = repair_rows(failed, passing, o.repair_per_problem);
    std::string text;
    std::map<std::string, int> by_verdict;
    std::set<std::string> problems_repaired;
    int from_dataset = 0;
    for (const auto& row : rows) {
      text += row.dump() + "\n";
      ++by_verdict[row["failed_verdict"].get<std::string>()];
      problems_repaired.insert(row["problem"].get<std::string>());
      from_dataset += row["answer_from"].get<std::string>().rfind("rft:", 0) != 0;
    }
    write_file_atomic(out / "repair.jsonl", text);
    res.repair_rows = rows.size();
    rep["repair"] = {{"rows", rows.size()}, {"problems", problems_repaired.size()}, {"failed_answers", failed.size()},
                     {"by_failed_verdict", by_verdict}, {"answers_from_this_run", rows.size() - from_dataset},
                     {"answers_from_dataset", from_dataset}, {"passing_answers", {{"this_run", from_run},
                     {"dataset", passing.size() - from_run}}}, {"per_problem", o.repair_per_problem}};
    res.report.table += fmt::format("repair conversations: {} over {} problems (failed answer, feedback, a passing "
                                    "answer: {} from this run, {} from {}) -> repair.jsonl\n",
                                    rows.size(), problems_repaired.size(), rows.size() - from_dataset, from_dataset,
                                    o.repair_from.empty() ? "no dataset" : o.repair_from);
  }
  rep["format_version"] = 1;
  rep["problems_source"] = o.problems;
  rep["model"] = o.model_dir;
  rep["samples_per_problem"] = o.samples_from.empty() ? json(o.samples) : json(nullptr);
  write_file_atomic(out / "report.json", rep.dump(2) + "\n");
  write_file_atomic(out / "report.txt", res.report.table);

  // Step 5: SFT on what was kept.
  if (o.train) {
    MC_CHECK(res.dataset_rows + res.repair_rows > 0, "rft --train: no answer was kept (", out.string(), "/dropped.jsonl says why); nothing to train on");
    MC_CHECK(!o.model_dir.empty(), "rft --train needs --model (the model to fine-tune)");
    SubprocessOptions so;
    std::string data = res.dataset_rows ? (out / "dataset.jsonl").string() : "";
    if (res.repair_rows) data += (data.empty() ? "" : ",") + (out / "repair.jsonl").string();
    so.argv = {o.model_exe, "train", "sft", "--model", o.model_dir, "--data", data, "--out", (out / "sft").string()};
    for (const auto& a : o.train_args) so.argv.push_back(a);
    if (!o.progress) so.argv.push_back("--no-progress");
    so.capture_stdout = so.capture_stderr = false;
    Subprocess train(so);
    ExitStatus st = train.wait();
    res.train_exit = st.term_signal ? 128 + st.term_signal : st.exit_code;
    MC_CHECK(st.ok(), "rft --train: musacoder-model train sft failed (", st.describe(), ")");
  }
  return res;
}

}  // namespace mc::rft
