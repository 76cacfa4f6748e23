#include "synth/llm_teacher.h"

#include <future>

#include "eval/verdict.h"
#include "synth/prompt.h"

namespace mc::synth {

std::vector<eval::EvalResult> verify_all(eval::Evaluator& ev, std::vector<eval::Candidate> cands,
                                         const std::function<void(size_t)>& on_each) {
  std::vector<std::promise<eval::EvalResult>> ps(cands.size());
  std::vector<std::future<eval::EvalResult>> fs;
  for (auto& p : ps) fs.push_back(p.get_future());
  for (size_t i = 0; i < cands.size(); ++i)
    ev.submit(std::move(cands[i]), [&ps, &on_each, i](eval::EvalResult r) {
      if (on_each) on_each(i);
      ps[i].set_value(std::move(r));
    });
  std::vector<eval::EvalResult> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

namespace {

bool passed(const eval::EvalResult& r) {
  return r.verdict == eval::Verdict::kOk || r.verdict == eval::Verdict::kCompiled;
}

}  // namespace

LlmTeacherResult llm_teach(const LlmTeacherOptions& opts, llm::OpenAIClient& client, eval::Evaluator& ev,
                           const std::string& prompt, const eval::ProblemPtr& problem) {
  LlmTeacherResult out;
  std::vector<llm::ChatMessage> base = {{"user", prompt}};
  llm::SamplingParams sp;
  sp.n = opts.samples;
  sp.temperature = opts.temperature;
  sp.max_tokens = opts.max_tokens;
  std::vector<llm::Completion> first;
  try {
    first = client.chat(opts.model, base, sp);
  } catch (const std::exception& e) {
    out.error = e.what();
    return out;
  }
  auto candidate = [&](const std::string& answer, const std::string& id) {
    eval::Candidate c;
    c.problem = problem;
    c.problem_ref = problem->key;
    c.sample_id = id;
    c.answer = answer;
    c.origin = "llm-teacher";
    return c;
  };
  std::vector<eval::Candidate> cands;
  for (size_t i = 0; i < first.size(); ++i) cands.push_back(candidate(first[i].text, "t1." + std::to_string(i)));
  auto results = verify_all(ev, cands);
  struct Thread {
    std::vector<llm::ChatMessage> messages;
    eval::EvalResult last;
  };
  std::vector<Thread> open;
  bool any = false;
  for (size_t i = 0; i < first.size(); ++i) {
    auto msgs = base;
    msgs.push_back({"assistant", first[i].text});
    out.attempts.push_back({{"turn", 1}, {"verdict", eval::to_string(results[i].verdict)}});
    if (passed(results[i])) {
      any = true;
      nlohmann::json m = nlohmann::json::array();
      for (auto& x : msgs) m.push_back({{"role", x.role}, {"content", x.content}});
      out.verified.push_back({{"solution", first[i].text}, {"turns", 1}, {"messages", m}, {"result", eval::to_json(results[i])}});
    } else if (!results[i].is_infra()) {
      open.push_back({msgs, results[i]});
    }
  }
  // Repair turns, while the problem has no verified answer yet.
  for (int turn = 2; !any && turn <= 1 + opts.repair_turns && !open.empty(); ++turn) {
    llm::SamplingParams one = sp;
    one.n = 1;
    std::vector<eval::Candidate> next;
    std::vector<Thread> asked;
    for (auto& t : open) {
      t.messages.push_back({"user", repair_prompt(t.last.feedback)});
      std::vector<llm::Completion> r;
      try {
        r = client.chat(opts.model, t.messages, one);
      } catch (const std::exception& e) {
        out.error = e.what();
        return out;
      }
      if (r.empty()) continue;
      t.messages.push_back({"assistant", r[0].text});
      next.push_back(candidate(r[0].text, "t" + std::to_string(turn) + "." + std::to_string(asked.size())));
      asked.push_back(t);
    }
    auto rs = verify_all(ev, next);
    open.clear();
    for (size_t i = 0; i < rs.size(); ++i) {
      out.attempts.push_back({{"turn", turn}, {"verdict", eval::to_string(rs[i].verdict)}});
      if (passed(rs[i])) {
        any = true;
        nlohmann::json m = nlohmann::json::array();
        for (auto& x : asked[i].messages) m.push_back({{"role", x.role}, {"content", x.content}});
        out.verified.push_back({{"solution", asked[i].messages.back().content}, {"turns", turn}, {"messages", m},
                                {"result", eval::to_json(rs[i])}});
      } else if (!rs[i].is_infra()) {
        asked[i].last = rs[i];
        open.push_back(asked[i]);
      }
    }
  }
  return out;
}

}  // namespace mc::synth
