// serve::Verifier in process, judges on the CPU: collect_any() hands back each verdict as it
// comes, so that bench-model writes it at once and a stopped run keeps it.
#include "serve/verifier.h"

#include <gtest/gtest.h>

#include "eval/candidates.h"
#include "eval/problem.h"
#include "test_util.h"

using namespace mc;

namespace {

eval::ProblemPtr case_problem(const std::string& stem) {
  for (const auto& q : eval::load_problems(test::cases_dir() + "/problems"))
    if (q->stem == stem) return q;
  throw std::runtime_error("no case problem " + stem);
}

}  // namespace

TEST(InProcessVerifier, CollectAnyReturnsEachVerdictAsItComes) {
  eval::ProblemPtr add = case_problem("1_Add");
  eval::EvaluatorOptions o;
  o.device = "cpu";
  o.cache_dir = test::test_cache_dir();
  o.scratch_dir = (fs::path(o.cache_dir) / "scratch-CollectAny").string();
  o.sandbox_exe = MUSACODER_BINARY;
  o.progress = false;
  eval::EvalConfig cfg;
  cfg.timing_budget_s = 0.1;
  auto v = serve::make_in_process_verifier(cfg, o);

  // The honest answer needs a judge (a process to start, trials to run); the answer with no code
  // is an extract error at once.
  eval::Candidate honest = eval::candidate_from_file(test::cases_dir() + "/cpu/honest_add.py", add);
  honest.sample_id = "honest";
  eval::Candidate empty;
  empty.problem = add;
  empty.problem_ref = add->key;
  empty.sample_id = "no-code";
  empty.answer = "I cannot write this kernel.";
  v->submit(7, honest);
  v->submit(3, empty);
  EXPECT_TRUE(v->collect_any({}).empty());

  auto first = v->collect_any({3, 7});
  ASSERT_EQ(first.size(), 1u) << "the extract error waited for the judged answer";
  EXPECT_EQ(first[0].first, 3u);
  EXPECT_EQ(first[0].second.verdict, eval::Verdict::kExtractError);
  EXPECT_EQ(v->outstanding(), std::vector<size_t>{7});

  auto second = v->collect_any({7});
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].first, 7u);
  EXPECT_EQ(second[0].second.verdict, eval::Verdict::kOk) << second[0].second.reason << " | " << second[0].second.infra_error;
  EXPECT_TRUE(v->outstanding().empty());
}
