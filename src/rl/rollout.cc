#include "rl/rollout.h"

#include <chrono>

#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/jsonl.h"
#include "generate/counter_rng.h"
#include "synth/prompt.h"

namespace mc::rl {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

int Trajectory::first_pass() const {
  for (size_t k = 0; k < turns.size(); ++k)
    if (turns[k].passed()) return static_cast<int>(k) + 1;
  return 0;
}

PlantedAnswers PlantedAnswers::load(const std::string& path) {
  PlantedAnswers p;
  auto rows = read_jsonl(path);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    MC_CHECK(r.contains("problem") && r["problem"].is_string() && r.contains("turn") && r["turn"].is_number_integer() &&
                 r.contains("sample") && r["sample"].is_number_integer() && r.contains("answer") && r["answer"].is_string(),
             path, ":", i + 1, ": a planted answer needs \"problem\" (key), \"turn\" (1-based), \"sample\" and \"answer\"");
    int64_t step = r.contains("step") ? r["step"].get<int64_t>() : 0;
    p.answers[{r["problem"].get<std::string>(), step, r["turn"].get<int>(), r["sample"].get<int>()}] =
        r["answer"].get<std::string>();
  }
  return p;
}

const std::string* PlantedAnswers::find(const std::string& problem, int64_t step, int turn, int sample) const {
  auto it = answers.find({problem, step, turn, sample});
  if (it == answers.end()) it = answers.find({problem, 0, turn, sample});
  return it == answers.end() ? nullptr : &it->second;
}

RolloutRunner::RolloutRunner(gen::GenerationEngine& engine, const model::QwenModel& model, const tok::BpeTokenizer& tok,
                             serve::Verifier& verifier, const PlantedAnswers* planted)
    : engine_(engine), model_(model), tok_(tok), verifier_(verifier), planted_(planted) {
  im_end_ = tok_.token_to_id("<|im_end|>");
  MC_CHECK(im_end_ >= 0, "the tokenizer has no <|im_end|> token: RL rollouts are ChatML conversations");
}

std::vector<int32_t> RolloutRunner::encode_conversation(const std::vector<tok::ChatTurn>& messages) const {
  return tok_.encode(tok::render_chatml(messages, /*add_generation_prompt=*/true));
}

std::vector<Trajectory> RolloutRunner::run(const std::vector<RolloutPrompt>& prompts, const std::vector<synth::Task>& tasks,
                                           const RolloutOptions& o, RolloutStats* stats) {
  MC_CHECK(o.group_size >= 1 && o.max_turns >= 1, "rollouts need a group size and max turns >= 1");
  c10::AutoGradMode no_grad(false);
  std::vector<Trajectory> traj;
  std::vector<std::vector<tok::ChatTurn>> convo;  // per trajectory: the conversation so far
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int g = 0; g < o.group_size; ++g) {
      Trajectory t;
      t.prompt = p;
      t.sample = g;
      traj.push_back(std::move(t));
      convo.push_back(prompts[p].messages);
    }
  const int64_t max_seq = engine_.options().max_seq_len;
  std::map<std::pair<std::string, std::string>, std::pair<size_t, int>> judged;  // (problem, text) -> (trajectory, turn)

  for (int turn = 1; turn <= o.max_turns; ++turn) {
    // Who answers this turn: request r -> (trajectories it serves).
    std::vector<gen::GenerationRequest> reqs;
    std::vector<std::vector<size_t>> served;
    if (turn == 1) {
      for (size_t p = 0; p < prompts.size(); ++p) {
        gen::GenerationRequest r;
        r.prompt = encode_conversation(prompts[p].messages);
        r.params = o.sampling;
        r.params.n = o.group_size;
        r.params.seed = prompts[p].seed;
        r.params.stop_token_ids = {im_end_};
        MC_CHECK(static_cast<int64_t>(r.prompt.size()) + r.params.max_new_tokens <= max_seq, "prompt of ",
                 tasks[prompts[p].task].problem->key, " (", r.prompt.size(), " tokens) + --max-new-tokens exceeds --max-seq-len ",
                 max_seq);
        std::vector<size_t> ids;
        for (int g = 0; g < o.group_size; ++g) ids.push_back(p * o.group_size + g);
        reqs.push_back(std::move(r));
        served.push_back(std::move(ids));
      }
    } else {
      for (size_t i = 0; i < traj.size(); ++i) {
        Trajectory& t = traj[i];
        if (!t.stop_reason.empty()) continue;
        const TurnRecord& last = t.turns.back();
        convo[i].push_back({"assistant", last.text});
        convo[i].push_back({"user", synth::repair_prompt(last.result.feedback)});
        gen::GenerationRequest r;
        r.prompt = encode_conversation(convo[i]);
        r.params = o.sampling;
        r.params.n = 1;
        r.params.seed = gen::mix64(prompts[t.prompt].seed ^ gen::mix64(static_cast<uint64_t>(t.sample) * 1315423911u + turn));
        r.params.stop_token_ids = {im_end_};
        if (static_cast<int64_t>(r.prompt.size()) + r.params.max_new_tokens > max_seq) {
          t.stop_reason = "context_full";
          continue;
        }
        reqs.push_back(std::move(r));
        served.push_back({i});
      }
    }
    if (reqs.empty()) break;

    // Generate; each sampled answer goes to MooreEval at once (planted ones after generation).
    std::vector<size_t> pending_planted;
    // An answer identical to one already judged this step (same problem, same text) is not
    // judged again: it gets that verdict. Verification costs less, and identical answers get
    // the same score, where timing noise would otherwise give them different rewards and so
    // advantages with no cause in the policy (a memorizing model samples many twins).
    std::vector<size_t> twins;
    auto sample_id = [&](const Trajectory& t) { return fmt::format("{}-p{}-g{}-t{}", o.tag, t.prompt, t.sample, turn); };
    auto submit = [&](size_t i) {
      Trajectory& t = traj[i];
      const synth::Task& task = tasks[prompts[t.prompt].task];
      auto [it, fresh] = judged.try_emplace({task.problem->key, t.turns.back().text}, std::make_pair(i, turn));
      if (!fresh) {
        t.turns.back().twin_of = it->second;
        twins.push_back(i);
        return;
      }
      eval::Candidate c;
      c.problem = task.problem;
      c.problem_ref = task.problem->key;
      c.sample_id = sample_id(t);
      c.answer = t.turns.back().text;
      c.origin = "rollout";
      verifier_.submit(i, std::move(c));
    };
    auto record = [&](size_t i, const std::vector<int32_t>& context, const gen::Completion& comp) {
      Trajectory& t = traj[i];
      TurnRecord rec;
      rec.context = context;
      rec.tokens = comp.tokens;
      rec.logprobs = comp.logprobs;
      rec.text = comp.text;
      rec.finish_reason = comp.finish_reason;
      t.turns.push_back(std::move(rec));
      const std::string& key = tasks[prompts[t.prompt].task].problem->key;
      if (planted_ && planted_->find(key, o.step, turn, t.sample)) pending_planted.push_back(i);
      else submit(i);
    };
    auto t0 = Clock::now();
    if (o.hold_judges) verifier_.hold(true);
    auto outs = engine_.generate(reqs, {}, [&](size_t r, int s, const gen::Completion& c) {
      record(served[r][static_cast<size_t>(s)], reqs[r].prompt, c);
    });
    if (stats) {
      stats->generate_s += since(t0);
      for (auto& o2 : outs)
        for (auto& c : o2) stats->generated_tokens += c.tokens.size();
    }
    for (size_t i : pending_planted) {
      Trajectory& t = traj[i];
      TurnRecord& rec = t.turns.back();
      const std::string& key = tasks[prompts[t.prompt].task].problem->key;
      rec.text = *planted_->find(key, o.step, turn, t.sample);
      rec.tokens = tok_.encode(rec.text);
      rec.tokens.push_back(im_end_);
      rec.finish_reason = "stop";
      rec.planted = true;
      // The policy's own log-probabilities of the planted tokens, as the engine reports them.
      std::vector<int64_t> ids(rec.context.begin(), rec.context.end());
      ids.insert(ids.end(), rec.tokens.begin(), rec.tokens.end());
      auto lp = model_.token_logprobs(at::tensor(ids).unsqueeze(0).to(model_.device()), o.sampling.temperature)
                    .squeeze(0)
                    .to(at::kFloat)
                    .cpu();
      const int64_t n = rec.tokens.size(), T = lp.size(0);
      rec.logprobs.assign(lp.data_ptr<float>() + (T - n), lp.data_ptr<float>() + T);
      submit(i);
    }
    if (o.hold_judges) verifier_.hold(false);
    auto t1 = Clock::now();
    for (auto& [i, r] : verifier_.collect()) traj[i].turns.back().result = std::move(r);
    for (size_t i : twins) {
      TurnRecord& rec = traj[i].turns.back();
      rec.result = traj[rec.twin_of->first].turns[static_cast<size_t>(rec.twin_of->second - 1)].result;
      rec.result.sample_id = sample_id(traj[i]);
    }
    if (stats) {
      stats->verify_wait_s += since(t1);
      for (auto& ids : served) stats->answers += static_cast<int64_t>(ids.size());
      stats->twins += static_cast<int64_t>(twins.size());
    }
    for (auto& ids : served)
      for (size_t i : ids) {
        Trajectory& t = traj[i];
        const TurnRecord& last = t.turns.back();
        if (last.infra()) t.stop_reason = "infra_error";
        else if (last.passed()) t.stop_reason = "passed";
        else if (turn == o.max_turns) t.stop_reason = "max_turns";
      }
  }
  for (auto& t : traj)
    if (t.stop_reason.empty()) t.stop_reason = "max_turns";
  return traj;
}

}  // namespace mc::rl
