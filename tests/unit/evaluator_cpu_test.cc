// MooreEval end to end with judges on the CPU (CI has no GPU): real compiles, real sandboxed
// candidate processes, real crashes and hangs. Case files in tests/cases/cpu state their
// expected verdict; the GPU suite (tests/gpu) covers the CUDA-only parts on a GPU machine.
#include "eval/evaluator.h"
#include "eval/executor.h"
#include "eval/pipeline.h"
#include "eval/toolchain.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/subprocess.h"
#include "test_util.h"

using namespace mc::eval;

namespace {

// Judges on the CPU, candidates sandboxed by the built musacoder, the tests' compile cache.
// Each test has its own scratch folder, and with it its own lane lock: ctest runs tests side by
// side, and judges that share a lock share the "device" (one test's timer waiting would preempt
// another test's trials, as it should between evaluators of one real GPU).
EvaluatorOptions cpu_options() {
  EvaluatorOptions o;
  o.device = "cpu";
  o.cache_dir = mc::test::test_cache_dir();
  o.scratch_dir = (mc::fs::path(o.cache_dir) /
                   ("scratch-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())))
                      .string();
  o.sandbox_exe = MUSACODER_BINARY;
  o.progress = false;
  return o;
}

ProblemPtr problem_named(const std::string& stem) {
  static const auto problems = load_problems(mc::test::cases_dir() + "/problems");
  for (const auto& p : problems)
    if (p->stem == stem) return p;
  ADD_FAILURE() << "no test problem " << stem;
  return nullptr;
}

// n honest candidates for `add` (tests/cases/cpu/honest_add.py), sample ids add_0, add_1, ...
std::vector<Candidate> honest_adds(const ProblemPtr& add, int n) {
  std::vector<Candidate> out;
  for (int i = 0; i < n; ++i) {
    Candidate c = candidate_from_file(mc::test::cases_dir() + "/cpu/honest_add.py", add);
    c.sample_id = "add_" + std::to_string(i);
    out.push_back(c);
  }
  return out;
}

struct CaseRun {
  std::vector<Candidate> cands;
  std::vector<std::string> expect;
  std::vector<EvalResult> rows;
};

// The case files of tests/cases/`folder` (or, with `examples`, the main job's bundled
// candidates in examples/cpu), each with its "# expect:" verdict.
CaseRun run_cases(bool skip_static, const std::string& folder = "cpu", bool examples = false) {
  auto problems = load_problems(mc::test::cases_dir() + "/problems");
  CaseRun run;
  std::vector<std::string> files = examples ? std::vector<std::string>{} : mc::test::case_files(folder);
  if (examples)
    for (const auto& e : mc::fs::directory_iterator(mc::test::source_dir() + "/examples/cpu")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    bool wants_skip = !mc::test::case_header(path, "skip-static").empty();
    if (wants_skip != skip_static) continue;
    std::string prob = mc::test::case_header(path, "problem");
    ProblemPtr p;
    for (const auto& q : problems)
      if (q->stem == prob) p = q;
    Candidate c = candidate_from_file(path, p);
    c.sample_id = mc::fs::path(path).stem().string();
    run.cands.push_back(c);
    run.expect.push_back(mc::test::case_header(path, "expect"));
  }
  EvalConfig cfg;
  cfg.trial_timeout_s = 10;
  cfg.timing_budget_s = 0.2;
  EvaluatorOptions o = cpu_options();
  o.skip_static = skip_static;
  o.compile_workers = 2;
  Evaluator ev(cfg, o);
  int callbacks = 0;
  run.rows = ev.run(run.cands, [&](const EvalResult&) { ++callbacks; });
  EXPECT_EQ(callbacks, static_cast<int>(run.cands.size()));
  return run;
}

void check(const CaseRun& run) {
  ASSERT_EQ(run.rows.size(), run.cands.size());
  for (size_t i = 0; i < run.rows.size(); ++i) {
    const EvalResult& r = run.rows[i];
    std::string want = run.expect[i];
    std::string verdict = want.substr(0, want.find(' '));
    std::string rule = want.find(' ') == std::string::npos ? "" : want.substr(want.find(' ') + 1);
    EXPECT_EQ(to_string(r.verdict), verdict)
        << run.cands[i].origin << ": " << r.reason << " | " << r.infra_error << " | "
        << r.runtime_error.substr(0, 800) << " | " << r.compile_log;
    if (!rule.empty()) EXPECT_EQ(r.rule, rule) << run.cands[i].origin;
    EXPECT_EQ(r.reward.has_value(), r.verdict != Verdict::kInfraError);
    if (r.verdict != Verdict::kOk && r.verdict != Verdict::kInfraError)
      EXPECT_FALSE(r.feedback.empty()) << run.cands[i].origin;
  }
}

// One of tests/cases/problems, by stem.
ProblemPtr case_problem(const std::string& stem) {
  for (const auto& q : load_problems(mc::test::cases_dir() + "/problems"))
    if (q->stem == stem) return q;
  throw std::runtime_error("no case problem " + stem);
}

const EvalResult& row(const CaseRun& run, const std::string& sample) {
  for (const auto& r : run.rows)
    if (r.sample_id == sample) return r;
  throw std::runtime_error("no row for " + sample);
}

}  // namespace

TEST(EvaluatorCpu, CaseFilesGetTheirVerdicts) {
  CaseRun run = run_cases(false);
  check(run);
  const auto& ok = row(run, "honest_add");
  EXPECT_EQ(ok.trials_passed, 5);
  ASSERT_TRUE(ok.speedup.has_value());
  EXPECT_GT(*ok.speedup, 0);
  EXPECT_GE(*ok.reward, 1.0);
  // Timed with the judge's spares still starting paused (docs/formats.md).
  for (const char* k : {"timing_spares_paused", "timing_open_s", "timing_overhead_us"})
    EXPECT_TRUE(ok.judge_details.contains(k)) << k << " " << ok.judge_details.dump();
  EXPECT_EQ(ok.compile_path, "pool-shim");  // built against the torch shim, run through its bridge
  // Run in a child of the (sandboxed) zygote, not in a process started after it failed.
  EXPECT_EQ(ok.exec_stages.value("process", ""), "forked") << ok.exec_stages.dump();
  const auto& wrong = row(run, "wrong_add");
  EXPECT_EQ(wrong.trials_passed, 0);
  EXPECT_TRUE(wrong.mismatch.contains("index")) << wrong.mismatch.dump();
  EXPECT_NE(wrong.feedback.find("First mismatch"), std::string::npos) << wrong.feedback;
  const auto& pos = row(run, "relu_positive_only");
  EXPECT_GT(pos.trials_passed, 0);  // [0, 1) trials pass, signed ones do not
  EXPECT_LT(pos.trials_passed, 5);
  EXPECT_GT(*pos.reward, -1.0);
  EXPECT_NE(row(run, "segfault").reason.find("SIGSEGV"), std::string::npos);
  EXPECT_NE(row(run, "abort").reason.find("SIGABRT"), std::string::npos);
  EXPECT_NE(row(run, "throws").runtime_error.find("expected a 7-d tensor"), std::string::npos);
  EXPECT_NE(row(run, "compile_error").compile_log.find("undeclared_name"), std::string::npos);
  EXPECT_EQ(row(run, "empty_answer").verdict, Verdict::kExtractError);
}

TEST(EvaluatorCpu, RuntimeDefensesWithoutTheStaticStage) { check(run_cases(true)); }

// scripts/run.sh's CPU demo: one candidate for every bundled problem, each judged as it says
// (honest ones accepted, a wrong one and a hack rejected).
TEST(EvaluatorCpu, BundledExamplesGetTheirVerdicts) {
  CaseRun run = run_cases(false, "", true);
  EXPECT_EQ(run.cands.size(), load_problems(mc::test::cases_dir() + "/problems").size());
  check(run);
}

TEST(EvaluatorCpu, CliWritesOneRowPerProblemAndCandidate) {
  mc::TempDir dir;
  mc::fs::create_directories(dir.path() / "sol");
  mc::fs::copy(mc::test::cases_dir() + "/cpu/honest_add.py", dir.path() / "sol" / "1_Add.py");
  mc::write_file_atomic(dir.path() / "sol" / "2_ReLU.md", "no code here");
  mc::SubprocessOptions o;
  std::string out = (dir.path() / "r.jsonl").string();
  // The cache folder given relative to the working directory: candidates run in their own
  // scratch folders, so the judge must hand them absolute paths (a relative one made every
  // honest candidate a load_error).
  o.cwd = dir.path().string();
  o.argv = {MUSACODER_BINARY, "eval", "--problems", mc::test::cases_dir() + "/problems",
            "--solutions", (dir.path() / "sol").string(), "--device", "cpu", "--cache-dir",
            mc::fs::relative(mc::test::test_cache_dir(), dir.path()).string(), "--out", out, "--timing-budget", "0.2",
            "--no-progress"};
  auto r = mc::run_command(o, 600000);
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_NE(r.out.find("fast_1"), std::string::npos);
  std::string text = mc::read_file(out);
  int rows = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  auto problems = load_problems(mc::test::cases_dir() + "/problems");
  EXPECT_EQ(rows, static_cast<int>(problems.size()));  // 2 candidates + the problems without one
  EXPECT_NE(text.find("\"verdict\":\"ok\""), std::string::npos);
  EXPECT_NE(text.find("no solution for this problem"), std::string::npos);
}

TEST(EvaluatorCpu, CliBadInputIsExit2WithAClearMessage) {
  mc::SubprocessOptions o;
  o.argv = {MUSACODER_BINARY, "eval", "--problems", "/nonexistent", "--solutions", "/nonexistent"};
  auto r = mc::run_command(o, 30000);
  EXPECT_EQ(r.status.exit_code, 2);
  EXPECT_NE(r.err.find("problems folder not found: /nonexistent"), std::string::npos) << r.err;
  o.argv = {MUSACODER_BINARY, "check", "/nonexistent.py"};
  r = mc::run_command(o, 30000);
  EXPECT_EQ(r.status.exit_code, 2);
  o.argv = {MUSACODER_BINARY, "check", mc::test::cases_dir() + "/hacks/torch_fallback.py"};
  r = mc::run_command(o, 30000);
  EXPECT_EQ(r.status.exit_code, 1);
  EXPECT_NE(r.out.find("torch_compute"), std::string::npos);
}

TEST(EvaluatorCpu, BaselineWritesKernelBenchSchema) {
  mc::TempDir dir;
  std::string out = (dir.path() / "baseline.json").string();
  mc::SubprocessOptions o;
  o.argv = {MUSACODER_BINARY, "baseline", "--problems", mc::test::cases_dir() + "/problems",
            "--device", "cpu", "--cache-dir", mc::test::test_cache_dir(), "--out", out,
            "--timing-budget", "0.1", "--no-progress"};
  auto r = mc::run_command(o, 600000);
  ASSERT_TRUE(r.status.ok()) << r.out << r.err;
  auto j = nlohmann::json::parse(mc::read_file(out));
  ASSERT_TRUE(j.contains("level0")) << j.dump();
  const auto& relu = j["level0"]["2_ReLU.py"];
  for (const char* k : {"mean", "std", "min", "max", "num_trials", "hardware", "device"})
    EXPECT_TRUE(relu.contains(k)) << k;
  EXPECT_GT(relu["mean"].get<double>(), 0);
  EXPECT_LE(relu["min"].get<double>(), relu["max"].get<double>());
}

// A judge that runs out of memory (here a MemoryError in the reference, the CPU analogue of a
// published-size problem that does not fit) gives that candidate an infra error, never a score,
// and the judge goes on serving every candidate after it: nothing later in the run is lost. With
// lanes, the candidate is first tried again alone (the memory may have been another lane's).
TEST(EvaluatorCpu, JudgeOutOfMemoryIsInfraAndTheRunGoesOn) {
  mc::TempDir dir;
  auto probs = dir.path() / "problems";
  mc::fs::create_directories(probs);
  mc::fs::copy(mc::test::cases_dir() + "/problems/1_Add.py", probs / "1_Add.py");
  mc::write_file_atomic(probs / "8_Huge.py",
                        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                        "    def forward(self, x):\n"
                        "        raise MemoryError('simulated: the reference needs more memory than there is')\n\n"
                        "def get_inputs():\n    return [torch.rand(8)]\n\n"
                        "def get_init_inputs():\n    return []\n");
  auto problems = load_problems(probs.string());
  ASSERT_EQ(problems.size(), 2u);
  std::vector<Candidate> cands;
  std::string add = mc::test::cases_dir() + "/cpu/honest_add.py";
  for (int i = 0; i < 6; ++i) {  // three huge ones first: the judge must outlive them all
    Candidate c = candidate_from_file(add, problems[i < 3 ? 1 : 0]);
    c.sample_id = (i < 3 ? "huge_" : "add_") + std::to_string(i);
    cands.push_back(c);
  }
  EvalConfig cfg;
  cfg.trial_timeout_s = 10;
  cfg.timing = false;
  EvaluatorOptions o = cpu_options();
  o.lanes = 2;  // beside another lane first, then (the same out-of-memory) alone: still infra
  Evaluator ev(cfg, o);
  auto rows = ev.run(cands, nullptr);
  ASSERT_EQ(rows.size(), cands.size());
  for (const auto& r : rows) {
    if (r.sample_id.rfind("huge_", 0) == 0) {
      EXPECT_EQ(r.verdict, Verdict::kInfraError) << r.sample_id << ": " << r.reason;
      EXPECT_NE(r.infra_error.find("ran out of memory"), std::string::npos) << r.infra_error;
      EXPECT_FALSE(r.reward.has_value());
    } else {
      EXPECT_EQ(r.verdict, Verdict::kOk) << r.sample_id << ": " << r.reason << " | " << r.infra_error;
    }
  }
}

// A judge that finds no device memory for its CUDA context (another lane judges a published-size
// problem alone) waits for the memory instead of failing its candidate (H100: L1/28_HardSigmoid
// became an infra error so). CPU analogue: a copy of the harness whose judge answers its first
// four starts with CUDA's out-of-memory greeting (each lane's warm-up takes one, the lane that
// judges two more, which used to be its two tries); the candidate is then judged, and ok.
TEST(EvaluatorCpu, JudgeStartOutOfMemoryIsWaitedFor) {
  mc::TempDir dir;
  auto harness = dir.path() / "harness";
  mc::fs::copy(mc::test::source_dir() + "/python", harness, mc::fs::copy_options::recursive);
  auto judge_py = harness / "musacoder_harness" / "judge.py";
  std::string src = mc::read_file(judge_py);
  const std::string at = "    args = ap.parse_args()\n";
  ASSERT_NE(src.find(at), std::string::npos);
  const std::string count = (dir.path() / "starts").string();
  src.replace(src.find(at), at.size(),
              at + "    with open(" + "'" + count + "', 'a+') as f:\n"
                   "        f.write('x')\n        f.seek(0)\n        n = len(f.read())\n"
                   "    if n <= 4:\n"
                   "        print(json.dumps({'op': 'hello', 'ok': False, 'error': 'AcceleratorError: CUDA error: "
                   "out of memory'}), flush=True)\n        return 3\n");
  mc::write_file_atomic(judge_py, src);
  setenv("MUSACODER_HARNESS_DIR", harness.c_str(), 1);
  auto problems = load_problems(mc::test::cases_dir() + "/problems");
  ProblemPtr add;
  for (const auto& p : problems)
    if (p->key == "1_Add") add = p;
  ASSERT_TRUE(add);
  Candidate c = candidate_from_file(mc::test::cases_dir() + "/cpu/honest_add.py", add);
  EvalConfig cfg;
  cfg.timing = false;
  EvaluatorOptions o = cpu_options();
  o.lanes = 2;
  std::vector<EvalResult> rows;
  {
    Evaluator ev(cfg, o);
    rows = ev.run({c}, nullptr);
  }
  unsetenv("MUSACODER_HARNESS_DIR");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].verdict, Verdict::kOk) << rows[0].reason << " | " << rows[0].infra_error;
  EXPECT_GE(mc::read_file(count).size(), 5u);  // four starts refused, then one that served
}

// A process of the verifier that holds memory for the test: its ledger entry (the CPU
// analogue of another lane's judge holding device memory, python/musacoder_harness/ledger.py)
// says it holds 50 GiB; it lives until `until` (a shell condition) is true.
struct LedgerHolder {
  pid_t pid = -1;
  LedgerHolder(const mc::fs::path& ledger, const std::string& until) {
    mc::fs::create_directories(ledger);
    pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", ("until " + until + "; do sleep 0.05; done; sleep 0.3").c_str(), (char*)nullptr);
      _exit(127);
    }
    mc::write_file_atomic(ledger / (std::to_string(pid) + ".json"),
                          nlohmann::json{{"pid", pid}, {"state", "waiting"}, {"held_bytes", 50LL << 30},
                                         {"processes", 1}}.dump());
  }
  ~LedgerHolder() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

Candidate memory_hog(const ProblemPtr& add) {
  Candidate c = candidate_from_file(mc::test::cases_dir() + "/cpu/memory_hog.py", add);
  c.sample_id = "hog";
  return c;
}

// A candidate that runs out of memory while the rest of the verifier holds memory beside it did
// not get what the plan promised: never a score. It is judged again alone (beside the other lane
// first, then with the gate held exclusive, twice more after pauses) and stays an infra error.
TEST(EvaluatorCpu, OutOfMemoryBesideTheVerifiersMemoryIsNeverScored) {
  auto add = problem_named("1_Add");
  EvalConfig cfg;
  cfg.timing = false;
  EvaluatorOptions o = cpu_options();
  o.lanes = 2;
  mc::fs::remove_all(o.scratch_dir);
  LedgerHolder holder(mc::fs::path(o.scratch_dir) / "gpu0.lock.ledger", "false");
  Evaluator ev(cfg, o);
  auto rows = ev.run({memory_hog(add)}, nullptr);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].verdict, Verdict::kInfraError) << rows[0].reason;
  EXPECT_FALSE(rows[0].reward.has_value());
  EXPECT_NE(rows[0].infra_error.find("while the rest of the verifier held 50.0 GiB"), std::string::npos)
      << rows[0].infra_error;
  EXPECT_EQ(rows[0].judge_details.value("not_alone_retries", 0), 2) << rows[0].judge_details.dump();
}

// The twin that must still fail: once the other holder gives its memory back (here: as soon as a
// judge holds the gate exclusive and waits for the others), the same candidate, alone, gets its
// runtime_error, and the row says it was alone.
TEST(EvaluatorCpu, OutOfMemoryAloneIsTheCandidatesRuntimeError) {
  auto add = problem_named("1_Add");
  EvalConfig cfg;
  cfg.timing = false;
  EvaluatorOptions o = cpu_options();
  o.lanes = 2;
  mc::fs::remove_all(o.scratch_dir);
  const auto ledger = mc::fs::path(o.scratch_dir) / "gpu0.lock.ledger";
  LedgerHolder holder(ledger, "grep -qs '\"exclusive\"' " + ledger.string() + "/*.json");
  Evaluator ev(cfg, o);
  auto rows = ev.run({memory_hog(add)}, nullptr);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].verdict, Verdict::kRuntimeError) << rows[0].reason << " | " << rows[0].infra_error;
  EXPECT_EQ(rows[0].reward, -1.0);
  const auto& promise = rows[0].judge_details["memory_promise"];
  EXPECT_TRUE(promise.value("alone", false)) << rows[0].judge_details.dump();
  EXPECT_GT(promise.value("waited_s", 0.0), 0.0) << promise.dump();
}

// The answers to one problem share its trials' references (the first answer pays for them,
// python/musacoder_harness/trial_cache.py), and each still gets its own copy of the inputs: an
// answer that writes into them is caught, and the honest answer judged after it is not harmed.
TEST(EvaluatorCpu, AnswersToOneProblemShareItsTrialReferences) {
  auto add = problem_named("1_Add");
  EvalConfig cfg;
  cfg.timing = false;
  EvaluatorOptions o = cpu_options();
  o.skip_static = true;  // the input-writing answer is caught at run time
  auto cands = honest_adds(add, 2);
  Candidate writer = candidate_from_file(mc::test::cases_dir() + "/cpu/mutate_input.py", add);
  writer.sample_id = "writer";
  cands.insert(cands.begin() + 1, writer);
  cands.push_back(honest_adds(add, 3).back());  // add_2
  Evaluator ev(cfg, o);
  auto rows = ev.run(cands, nullptr);
  ASSERT_EQ(rows.size(), 4u);
  std::map<std::string, EvalResult> by;
  for (auto& r : rows) by[r.sample_id] = r;
  EXPECT_EQ(by["writer"].verdict, Verdict::kIllegal) << by["writer"].reason;
  EXPECT_EQ(by["writer"].rule, "input_mutation");
  for (const char* id : {"add_0", "add_1", "add_2"}) {
    EXPECT_EQ(by[id].verdict, Verdict::kOk) << id << ": " << by[id].reason << " | " << by[id].infra_error;
    EXPECT_EQ(by[id].trials_passed, cfg.trials) << id;
  }
  // The first honest answer computed its trials; the ones after it were served every trial.
  EXPECT_EQ(by["add_0"].judge_details.value("trials_shared", 0), 0) << by["add_0"].judge_details.dump();
  EXPECT_EQ(by["add_1"].judge_details.value("trials_shared", 0), cfg.trials) << by["add_1"].judge_details.dump();
  EXPECT_EQ(by["add_2"].judge_details.value("trials_shared", 0), cfg.trials);
}

// GPU indices count within this process's CUDA_VISIBLE_DEVICES (as CUDA's do): under SLURM or
// torchrun, GPU 0 of a job given GPUs 4 and 5 is the machine's GPU 4, and its judge and lane gate
// must be that one's.
TEST(Executor, GpuIndicesFollowCudaVisibleDevices) {
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(visible_gpu(3), "3");
  setenv("CUDA_VISIBLE_DEVICES", "4, GPU-5f1c2b,MIG-GPU-aa/1/0", 1);
  EXPECT_EQ(visible_gpu(0), "4");
  EXPECT_EQ(visible_gpu(1), "GPU-5f1c2b");
  EXPECT_EQ(visible_gpu(2), "MIG-GPU-aa/1/0");
  try {
    (void)visible_gpu(3);
    FAIL() << "GPU 3 is not visible";
  } catch (const mc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU 3 is not visible to this process: CUDA_VISIBLE_DEVICES="),
              std::string::npos) << e.what();
  }
  Toolchain tc;
  auto a = judge_options(tc, "cuda", 0, "/c", "/c/scratch", "", 0, 1, 2);
  auto b = judge_options(tc, "cuda", 2, "/c", "/c/scratch", "", 0, 0, 2);
  EXPECT_EQ(a.gpu_lock, "/c/scratch/gpu4.lock");
  EXPECT_EQ(b.gpu_lock, "/c/scratch/gpuMIG-GPU-aa_1_0.lock");
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_THROW((void)visible_gpu(0), mc::Error);
  EXPECT_EQ(judge_options(tc, "cpu", 0, "/c", "/c/scratch", "", 0, 0, 1).gpu_lock, "/c/scratch/gpu0.lock");
  unsetenv("CUDA_VISIBLE_DEVICES");
}

// A judge's torch threads: on a GPU the evaluator's compile share split among its judges (five
// RL arms on one host otherwise ran ~100 processes sized to every core); on the CPU torch's own.
TEST(EvaluatorCpu, JudgeThreadsShareTheCores) {
  unsetenv("MUSACODER_JUDGE_THREADS");
  EXPECT_EQ(default_judge_threads("cuda", 32, 4), 8);   // one evaluator alone on a 64-core host
  EXPECT_EQ(default_judge_threads("cuda", 6, 8), 1);    // a recipe stage beside four others
  EXPECT_EQ(default_judge_threads("cpu", 32, 1), 0);    // torch's default
  setenv("MUSACODER_JUDGE_THREADS", "3", 1);
  EXPECT_EQ(default_judge_threads("cpu", 32, 1), 3);
  setenv("MUSACODER_JUDGE_THREADS", "0", 1);
  EXPECT_THROW((void)default_judge_threads("cuda", 32, 4), mc::Error);
  unsetenv("MUSACODER_JUDGE_THREADS");
}

// MUSACODER_TIMING_QUIESCE=wait (sessions 21-27): timing waits for the spares still starting
// instead of pausing them; honest verdicts and timings as with the default.
TEST(EvaluatorCpu, TimingThatWaitsForStartingSparesStillJudges) {
  ProblemPtr add = case_problem("1_Add");
  std::vector<Candidate> cands = honest_adds(add, 4);
  EvalConfig cfg;
  cfg.trial_timeout_s = 10;
  cfg.timing_budget_s = 0.1;
  setenv("MUSACODER_TIMING_QUIESCE", "wait", 1);
  setenv("MUSACODER_JUDGE_THREADS", "1", 1);  // and torch's threads capped in the judge (below)
  EvaluatorOptions o = cpu_options();
  o.compile_workers = 2;
  std::vector<EvalResult> rows;
  {
    Evaluator ev(cfg, o);
    rows = ev.run(cands, nullptr);
  }
  unsetenv("MUSACODER_TIMING_QUIESCE");
  unsetenv("MUSACODER_JUDGE_THREADS");
  ASSERT_EQ(rows.size(), cands.size());
  for (const auto& r : rows) {
    EXPECT_EQ(r.verdict, Verdict::kOk) << r.sample_id << ": " << r.reason << " | " << r.infra_error;
    EXPECT_TRUE(r.candidate_time.has_value()) << r.sample_id;
    EXPECT_EQ(r.judge_details.value("cpu_threads", -1), 1) << r.judge_details.dump();
    EXPECT_TRUE(r.judge_details.contains("timing_spares_wait_s")) << r.judge_details.dump();
    EXPECT_FALSE(r.judge_details.contains("timing_spares_paused")) << r.judge_details.dump();
  }
}

// Lanes: two judges share the device. A candidate that hangs holds its lane, not the device: the
// honest candidates behind it are checked in the other lane and, when one of them waits to time,
// the hanging trial is preempted and judged again later alone, where it gets its full limit and
// its timeout. No honest row waits for the hang, and the hang's verdict is the same as alone.
TEST(EvaluatorCpu, HangingCandidateDoesNotHoldUpTheOthers) {
  ProblemPtr add = case_problem("1_Add");
  std::vector<Candidate> cands;
  Candidate hang = candidate_from_file(mc::test::cases_dir() + "/cpu/infinite_loop.py", add);
  hang.sample_id = "hang";
  cands.push_back(hang);
  for (auto& c : honest_adds(add, 5)) cands.push_back(c);
  EvalConfig cfg;
  cfg.trial_timeout_floor_s = 10;  // the hang's first trial: 2 x (10 s + 200 x the reference)
  cfg.trial_timeout_s = 40;
  cfg.timing_budget_s = 0.1;
  EvaluatorOptions o = cpu_options();
  o.lanes = 2;
  o.compile_workers = 2;
  Evaluator ev(cfg, o);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, double>> order;  // sample, seconds from the start
  auto rows = ev.run(cands, [&](const EvalResult& r) {
    order.emplace_back(r.sample_id, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
  ASSERT_EQ(order.size(), cands.size());
  EXPECT_EQ(order.back().first, "hang") << "an honest row waited for the hanging one";
  double limit = 0;
  for (const auto& r : rows) {
    if (r.sample_id == "hang") {
      EXPECT_EQ(r.verdict, Verdict::kTimeout) << r.reason << " | " << r.infra_error;
      EXPECT_TRUE(r.judge_details.value("preempted", false)) << r.judge_details.dump();
      // Sent back because an honest lane waited to time, not because its limit ran out: the
      // honest rows did not wait for the hang. (Wall clock is no proof on a loaded 2-core host.)
      EXPECT_NE(r.judge_details.value("preempted_why", "").find("while another lane waited to time"),
                std::string::npos) << r.judge_details.dump();
      ASSERT_TRUE(r.judge_details.contains("lane")) << r.judge_details.dump();
      EXPECT_EQ(r.judge_details["lane"].value("mode", ""), "exclusive");
      limit = r.judge_details["trial_limits_s"][0].get<double>();
    } else {
      EXPECT_EQ(r.verdict, Verdict::kOk) << r.sample_id << ": " << r.reason << " | " << r.infra_error;
      EXPECT_TRUE(r.candidate_time.has_value()) << r.sample_id;
      EXPECT_EQ(r.judge_details["lane"].value("lanes", 0), 2);
    }
  }
  EXPECT_GE(limit, 20.0);
}

// What a lane's judge.log says of it: when its judge started and was ready (its "ready (started
// S)" line), and when each of its verdicts came ("eval" lines), on the wall clock the judges share.
struct JudgeLog {
  double started = -1, ready = -1;
  std::vector<double> evals;
};
JudgeLog read_judge_log(const mc::fs::path& log) {
  JudgeLog j;
  std::ifstream f(log);
  for (std::string line; std::getline(f, line);) {
    double at = 0, started = 0;
    if (std::sscanf(line.c_str(), "judge: at %lf ready (started %lf)", &at, &started) == 2 && j.ready < 0) {
      j.ready = at;
      j.started = started;
    } else if (line.find(" eval ") != std::string::npos && std::sscanf(line.c_str(), "judge: at %lf", &at) == 1) {
      j.evals.push_back(at);
    }
  }
  return j;
}

// A later lane is started but stands by while the first keeps up (fresh candidate processes
// beside other lanes' work slowed tiny kernels' judging on the H100): here it never judges.
TEST(EvaluatorCpu, StandbyLaneJudgesNothingWhileTheFirstKeepsUp) {
  ProblemPtr add = case_problem("1_Add");
  std::vector<Candidate> cands = honest_adds(add, 3);
  EvalConfig cfg;
  cfg.timing_budget_s = 0.1;
  EvaluatorOptions o = cpu_options();
  o.lanes = 2;
  o.standby_after_s = 600;
  {
    Evaluator ev(cfg, o);
    // A service's GPU-pool gauge is running candidates over every lane (2 here), not over GPUs.
    EXPECT_EQ(ev.stats().judges, 2u);
    for (const auto& r : ev.run(cands)) EXPECT_EQ(r.verdict, Verdict::kOk) << r.reason << " | " << r.infra_error;
  }
  const mc::fs::path scratch = o.scratch_dir;
  EXPECT_EQ(read_judge_log(scratch / "gpu0" / "judge.log").evals.size(), 3u);
  EXPECT_EQ(read_judge_log(scratch / "gpu0-lane1" / "judge.log").evals.size(), 0u);
}

// One standby lane starts with the first (so that it is ready when the first candidate hangs);
// a lane after it starts only once the lane before it has taken a candidate.
TEST(EvaluatorCpu, EarlyStandbyStartsWithTheFirstLaneAndTheNextOnlyOnceItJudges) {
  ProblemPtr add = case_problem("1_Add");
  std::vector<Candidate> cands = honest_adds(add, 6);
  EvalConfig cfg;
  cfg.timing_budget_s = 0.1;
  EvaluatorOptions o = cpu_options();
  o.lanes = 3;
  o.early_standby = 1;
  o.standby_after_s = 600;  // the standby never judges here
  {
    Evaluator ev(cfg, o);
    for (const auto& r : ev.run(cands)) EXPECT_EQ(r.verdict, Verdict::kOk) << r.reason << " | " << r.infra_error;
  }
  const mc::fs::path scratch = o.scratch_dir;
  const JudgeLog first = read_judge_log(scratch / "gpu0" / "judge.log");
  const JudgeLog early = read_judge_log(scratch / "gpu0-lane1" / "judge.log");
  ASSERT_GT(first.ready, 0) << "no ready line in the first lane's judge.log";
  ASSERT_GT(early.started, 0) << "the early standby lane never started";
  EXPECT_LT(early.started, first.ready) << "the early standby waited for the first judge";
  EXPECT_FALSE(mc::fs::exists(scratch / "gpu0-lane2" / "judge.log"))
      << "the third lane started though the second never took a candidate";
}

// With a hang in the first lane, the standby steps in, and the lane after it starts then.
TEST(EvaluatorCpu, NextLaneStartsOnceTheStandbyJudges) {
  ProblemPtr add = case_problem("1_Add");
  std::vector<Candidate> cands;
  Candidate hang = candidate_from_file(mc::test::cases_dir() + "/cpu/infinite_loop.py", add);
  hang.sample_id = "hang";
  cands.push_back(hang);
  // Each honest answer takes 4 s to import, so that the standby's first verdict comes well
  // after the third lane's judge could start: on a loaded 2-core host a quick verdict in a warm
  // judge came before a new process's first line.
  for (auto& c : honest_adds(add, 4)) {
    c.answer = "import time\ntime.sleep(4)\n" + c.answer;
    cands.push_back(c);
  }
  EvalConfig cfg;
  cfg.trial_timeout_floor_s = 4;
  cfg.trial_timeout_s = 10;
  cfg.timing_budget_s = 0.1;
  EvaluatorOptions o = cpu_options();
  o.lanes = 3;
  o.standby_after_s = 0.5;
  {
    Evaluator ev(cfg, o);
    for (const auto& r : ev.run(cands))
      EXPECT_EQ(r.verdict, r.sample_id == "hang" ? Verdict::kTimeout : Verdict::kOk) << r.sample_id << ": " << r.reason;
  }
  const mc::fs::path scratch = o.scratch_dir;
  const JudgeLog first = read_judge_log(scratch / "gpu0" / "judge.log");
  const JudgeLog standby = read_judge_log(scratch / "gpu0-lane1" / "judge.log");
  const JudgeLog third = read_judge_log(scratch / "gpu0-lane2" / "judge.log");
  ASSERT_GT(third.started, 0) << "the third lane never started";
  ASSERT_FALSE(standby.evals.empty()) << "the standby never judged";
  EXPECT_GT(third.started, first.ready);
  EXPECT_LT(third.started, standby.evals.front()) << "started only after the standby finished its first (want: when it took it)";
}

// A trial that runs out of its limit while the device is shared is no verdict (beside other lanes
// an honest candidate can be slowed past it): the candidate is judged again alone, and only there
// does the limit decide. Here nothing waits to time, so it is the limit, not a preemption, that
// sends it back.
TEST(EvaluatorCpu, TimeoutBesideOtherLanesIsJudgedAgainAlone) {
  ProblemPtr add = case_problem("1_Add");
  Candidate hang = candidate_from_file(mc::test::cases_dir() + "/cpu/infinite_loop.py", add);
  EvalConfig cfg;
  cfg.trial_timeout_floor_s = 2;
  cfg.trial_timeout_s = 4;
  cfg.timing = false;
  EvaluatorOptions o = cpu_options();
  o.lanes = 2;
  Evaluator ev(cfg, o);
  auto rows = ev.run({hang}, nullptr);
  ASSERT_EQ(rows.size(), 1u);
  const EvalResult& r = rows[0];
  EXPECT_EQ(r.verdict, Verdict::kTimeout) << r.reason << " | " << r.infra_error;
  EXPECT_TRUE(r.judge_details.value("preempted", false)) << r.judge_details.dump();
  EXPECT_NE(r.judge_details.value("preempted_why", "").find("limit beside other lanes"), std::string::npos)
      << r.judge_details.dump();
  EXPECT_EQ(r.judge_details["lane"].value("mode", ""), "exclusive") << r.judge_details.dump();
  EXPECT_EQ(r.judge_details["lane"].value("exclusive_why", ""), "request");
}

// A problem judged with the GPU to itself (too large to share it) is imported first with the gate
// shared: an answer that cannot be imported gets its load_error beside the other lanes' work,
// without waiting for the GPU alone (here another lane, this test, holds the gate shared until
// the verdict has come); one that imports is then judged alone.
TEST(EvaluatorCpu, AnAnswerThatCannotBeImportedNeverWaitsForTheGpuAlone) {
  ProblemPtr add = case_problem("1_Add");
  EvalConfig cfg;
  cfg.timing = false;
  EvaluatorOptions o = cpu_options();
  o.lanes = 2;
  mc::fs::remove_all(o.scratch_dir);
  mc::fs::create_directories(o.scratch_dir);
  const std::string lock = (mc::fs::path(o.scratch_dir) / "gpu0.lock").string();
  // The judges' marker of a problem seen too large to share the device (judge.py mark_exclusive).
  ASSERT_EQ(std::system(("python3 -c 'import hashlib, os, sys; d = sys.argv[1] + \".exclusive\"; "
                         "os.makedirs(d, exist_ok=True); "
                         "open(os.path.join(d, hashlib.sha1(sys.argv[2].encode()).hexdigest()), \"w\").close()' " +
                         lock + " " + add->path).c_str()),
            0);
  const std::string broken = (mc::fs::path(o.scratch_dir) / "broken_import.py").string();
  std::string honest_src = mc::read_file(mc::test::cases_dir() + "/cpu/honest_add.py");
  mc::write_file_atomic(broken, honest_src + "\nadd_ext.no_such_function\n");  // AttributeError at import
  Candidate bad = candidate_from_file(broken, add);
  bad.sample_id = "broken";
  {
    // Another lane: the gate held shared until this run is over (at most two minutes).
    int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_SH), 0);
    std::promise<void> done;
    auto release = std::async(std::launch::async, [fd, over = done.get_future()] {
      over.wait_for(std::chrono::minutes(2));
      ::flock(fd, LOCK_UN);
      ::close(fd);
    });
    Evaluator ev(cfg, o);
    auto rows = ev.run({bad}, nullptr);
    done.set_value();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].verdict, Verdict::kLoadError) << rows[0].reason << " | " << rows[0].infra_error;
    EXPECT_NE(rows[0].runtime_error.find("no_such_function"), std::string::npos) << rows[0].runtime_error;
    const auto& lane = rows[0].judge_details["lane"];
    EXPECT_EQ(lane.value("mode", ""), "shared") << lane.dump();
    EXPECT_EQ(lane.value("exclusive_why", ""), "problem size") << lane.dump();
  }
  // With nobody beside it, the honest answer is imported the same way, then judged alone.
  Evaluator ev(cfg, o);
  auto rows = ev.run(honest_adds(add, 1), nullptr);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].verdict, Verdict::kOk) << rows[0].reason << " | " << rows[0].infra_error;
  const auto& lane = rows[0].judge_details["lane"];
  EXPECT_EQ(lane.value("mode", ""), "exclusive") << lane.dump();
  EXPECT_TRUE(lane.contains("imported_beside_others_s")) << lane.dump();
}

// A trainer sharing the judges' GPU holds timing while its own kernels run: the candidate is
// compiled and checked, but its timing waits for the release; then it is timed and passes.
TEST(EvaluatorCpu, HeldTimingWaitsForTheRelease) {
  ProblemPtr add = case_problem("1_Add");
  Candidate c = candidate_from_file(mc::test::cases_dir() + "/cpu/honest_add.py", add);
  EvalConfig cfg;
  cfg.trial_timeout_s = 10;
  cfg.timing_budget_s = 0.1;
  EvaluatorOptions o = cpu_options();
  o.timing_gate = true;
  Evaluator ev(cfg, o);
  ev.hold_timing(true);
  std::promise<EvalResult> got;
  auto fut = got.get_future();
  ev.submit(c, [&](EvalResult r) { got.set_value(std::move(r)); });
  // Wait until the candidate is inside the judge, then give its trials time to finish: no result
  // may come while timing is held.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (ev.stats().executing == 0 && std::chrono::steady_clock::now() < until &&
         fut.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout) {
  }
  EXPECT_EQ(fut.wait_for(std::chrono::seconds(8)), std::future_status::timeout) << "timed while held";
  ev.hold_timing(false);
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  EvalResult r = fut.get();
  EXPECT_EQ(r.verdict, Verdict::kOk) << r.reason << " | " << r.infra_error;
  EXPECT_TRUE(r.candidate_time.has_value());
}

// Candidate::priority: a judge takes the lowest first, in arrival order among equals, so that a
// trainer's answers of this step are not queued behind the next step's (train rl --rollout overlapped). One
// lane is held by a candidate waiting for timing while three more arrive, the last with the
// lowest priority: it is judged right after the first.
TEST(EvaluatorCpu, LowerPriorityIsJudgedFirst) {
  ProblemPtr add = case_problem("1_Add");
  auto adds = honest_adds(add, 4);
  adds[0].sample_id = "first";
  adds[1].sample_id = "later_a";
  adds[1].priority = 2;
  adds[2].sample_id = "later_b";
  adds[2].priority = 2;
  adds[3].sample_id = "sooner";
  adds[3].priority = 1;
  EvalConfig cfg;
  cfg.trial_timeout_s = 10;
  cfg.timing_budget_s = 0.1;
  EvaluatorOptions o = cpu_options();
  o.timing_gate = true;
  o.lanes = 1;
  Evaluator ev(cfg, o);
  std::mutex mu;
  std::vector<std::string> order;
  std::vector<Verdict> verdicts;
  std::condition_variable cv;
  auto done = [&](EvalResult r) {
    std::lock_guard lk(mu);
    order.push_back(r.sample_id);
    verdicts.push_back(r.verdict);
    cv.notify_all();
  };
  ev.hold_timing(true);
  ev.submit(adds[0], done);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (ev.stats().executing == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(ev.stats().executing, 1u) << "the first candidate never reached the judge";
  for (int i = 1; i < 4; ++i) ev.submit(adds[i], done);
  while (ev.stats().ready < 3 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(ev.stats().ready, 3u) << "the three later candidates were not compiled and waiting";
  ev.hold_timing(false);
  std::unique_lock lk(mu);
  ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(240), [&] { return order.size() == 4; }));
  EXPECT_EQ(order, (std::vector<std::string>{"first", "sooner", "later_a", "later_b"}));
  for (Verdict v : verdicts) EXPECT_EQ(v, Verdict::kOk);
}

// submit() returns at once: extraction and static checks run on the evaluator's preparing
// thread (an RL rollout submits from the thread that drives the generation engine). A
// candidate they settle is finished there, with the same verdict as before, in submission order.
TEST(EvaluatorCpu, SubmitLeavesExtractionAndStaticChecksToThePreparingThread) {
  ProblemPtr add = case_problem("1_Add");
  Candidate none = candidate_from_file(mc::test::cases_dir() + "/cpu/honest_add.py", add);
  none.answer = "I would write a kernel, but here is only prose.";
  none.sample_id = "no_code";
  Candidate banned = candidate_from_file(mc::test::cases_dir() + "/cpu/honest_add.py", add);
  banned.answer = "```python\nimport torch\nimport subprocess\nclass ModelNew(torch.nn.Module):\n"
                  "    def forward(self, a, b):\n        return a + b\n```";
  banned.sample_id = "banned";
  Evaluator ev(EvalConfig{}, cpu_options());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::string, Verdict>> got;
  std::vector<std::thread::id> on;
  auto done = [&](EvalResult r) {
    std::lock_guard lk(mu);
    got.emplace_back(r.sample_id, r.verdict);
    on.push_back(std::this_thread::get_id());
    cv.notify_all();
  };
  ev.submit(none, done);
  ev.submit(banned, done);
  std::unique_lock lk(mu);
  ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return got.size() == 2; }));
  EXPECT_EQ(got, (std::vector<std::pair<std::string, Verdict>>{{"no_code", Verdict::kExtractError},
                                                               {"banned", Verdict::kStaticViolation}}));
  for (const auto& id : on) EXPECT_NE(id, std::this_thread::get_id()) << "finished on the submitting thread";
}

// With defer_timing, a judge does not sit on a candidate that passed while timing is held: it
// gives it back and takes the next, so a failing answer queued behind gets its verdict while the
// trainer still generates (what --rollout overlapped waits for). The passing one is loaded afresh
// after the release and timed, its trials not repeated (HeldTimingWaitsForTheRelease: without
// defer_timing, the judge waits). The timed runs' outputs are still checked in that fresh
// process: an answer honest for its first six calls (its trials) and wrong after them, in each
// process, fails at timing as it would have without the deferral.
TEST(EvaluatorCpu, DeferredTimingLetsTheNextCandidateThrough) {
  ProblemPtr add = case_problem("1_Add");
  Candidate good = candidate_from_file(mc::test::cases_dir() + "/cpu/honest_add.py", add);
  Candidate bad = candidate_from_file(mc::test::cases_dir() + "/cpu/wrong_add.py", add);
  Candidate stale = candidate_from_file(mc::test::cases_dir() + "/cpu/honest_add.py", add);
  good.sample_id = "good";
  bad.sample_id = "bad";
  stale.sample_id = "stale";
  stale.answer =
      "```python\nimport torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
      "src = r'''\n#include <torch/extension.h>\n"
      "torch::Tensor f(torch::Tensor a, torch::Tensor b) {\n"
      "    static int calls = 0;\n    const bool honest = ++calls <= 6;\n"
      "    auto out = torch::empty_like(a);\n"
      "    const float* pa = a.data_ptr<float>(); const float* pb = b.data_ptr<float>(); float* po = out.data_ptr<float>();\n"
      "    for (int64_t i = 0; i < a.numel(); ++i) po[i] = honest ? pa[i] + pb[i] : 0.0f;\n"
      "    return out;\n}\n'''\n"
      "ext = load_inline(name='stale_after_six', cpp_sources=src, functions=['f'], with_cuda=False)\n"
      "class ModelNew(nn.Module):\n    def forward(self, a, b):\n        return ext.f(a.contiguous(), b.contiguous())\n```";
  EvalConfig cfg;
  cfg.trial_timeout_s = 10;
  cfg.timing_budget_s = 0.1;
  EvaluatorOptions o = cpu_options();
  o.timing_gate = true;
  o.defer_timing = true;
  o.lanes = 1;
  o.skip_static = true;  // the stale answer's static counter: the run-time check alone
  Evaluator ev(cfg, o);
  ev.hold_timing(true);
  std::promise<EvalResult> got_good, got_bad, got_stale;
  auto fg = got_good.get_future(), fb = got_bad.get_future(), fs = got_stale.get_future();
  ev.submit(good, [&](EvalResult r) { got_good.set_value(std::move(r)); });
  ev.submit(bad, [&](EvalResult r) { got_bad.set_value(std::move(r)); });
  ev.submit(stale, [&](EvalResult r) { got_stale.set_value(std::move(r)); });
  ASSERT_EQ(fb.wait_for(std::chrono::seconds(120)), std::future_status::ready) << "the failing one waited for the release";
  EvalResult b = fb.get();
  EXPECT_EQ(b.verdict, Verdict::kIncorrect) << b.reason << " | " << b.infra_error;
  // Both passing answers given back before the release: under load the third one's trials may
  // still run when the second one's verdict is in.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (ev.stats().deferred < 2) {
    ASSERT_TRUE(std::chrono::steady_clock::now() < until) << "the passing answers were not given back";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(fg.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "timed while held";
  EXPECT_EQ(fs.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "timed while held";
  ev.hold_timing(false);
  ASSERT_EQ(fg.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  EvalResult r = fg.get();
  EXPECT_EQ(r.verdict, Verdict::kOk) << r.reason << " | " << r.infra_error;
  EXPECT_TRUE(r.candidate_time.has_value());
  EXPECT_EQ(r.judge_details.value("timing_deferred", 0), 1) << r.judge_details.dump();
  EXPECT_EQ(r.trials_passed, r.trials_total);
  EXPECT_EQ(r.trials_total, cfg.trials);
  // Timed without repeating its trials: the second judging has a load and a timing, no trials.
  EXPECT_TRUE(r.judge_details.value("trials_reused", false)) << r.judge_details.dump();
  EXPECT_TRUE(r.exec_stages.contains("load") && r.exec_stages.contains("timing")) << r.exec_stages.dump();
  EXPECT_FALSE(r.exec_stages.contains("trials")) << r.exec_stages.dump();
  ASSERT_EQ(fs.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  EvalResult st = fs.get();
  EXPECT_EQ(st.verdict, Verdict::kTimingError) << st.reason << " | " << st.infra_error;
  EXPECT_EQ(st.rule, "stale_result") << st.reason;
  EXPECT_EQ(st.judge_details.value("timing_deferred", 0), 1) << st.judge_details.dump();
  EXPECT_TRUE(st.judge_details.value("trials_reused", false)) << st.judge_details.dump();
}

// `musacoder selftest` on the CPU: valid re-implementations (float64, another summation order,
// renamed parameters) accepted on every problem, the negative controls rejected.
TEST(EvaluatorCpu, SelftestAcceptsValidNumericsAndRejectsNegatives) {
  mc::TempDir dir;
  auto l1 = dir.path() / "KernelBench" / "level1";
  mc::fs::create_directories(l1);
  for (const char* p : {"4_LayerNorm.py", "7_SumRows.py"})
    mc::fs::copy(mc::test::cases_dir() + "/problems/" + p, l1 / p);
  // A forward that reaches its MLP through a closure (as level 3's MiniGPTBlock does): the
  // float64 reference must still reach those weights, else the comparison loses its yardstick.
  mc::write_file_atomic(l1 / "8_ClosureMLP.py",
                        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                        "    def __init__(self):\n        super().__init__()\n"
                        "        self.mlp = nn.ModuleDict(dict(a=nn.Linear(64, 256), b=nn.Linear(256, 64)))\n"
                        "        m = self.mlp\n        self.mlpf = lambda x: m.b(torch.relu(m.a(x)))\n\n"
                        "    def forward(self, x):\n        return x + self.mlpf(x)\n\n"
                        "def get_inputs():\n    return [torch.rand(32, 64)]\n\n"
                        "def get_init_inputs():\n    return []\n");
  mc::SubprocessOptions o;
  std::string out = (dir.path() / "st").string();
  o.argv = {MUSACODER_BINARY, "selftest", "--problems", dir.path().string(), "--levels", "1",
            "--device", "cpu", "--cache-dir", mc::test::test_cache_dir(), "--negatives", "1",
            "--trial-timeout", "30", "--out", out, "--no-progress"};
  auto r = mc::run_command(o, 600000);
  ASSERT_TRUE(r.status.ok()) << r.out << r.err;
  EXPECT_NE(r.out.find("selftest: PASS"), std::string::npos) << r.out;
  auto rep = nlohmann::json::parse(mc::read_file(out + "/report.json"));
  const auto& all = rep["all"];
  EXPECT_EQ(all["problems"].get<int>(), 3);
  EXPECT_EQ(all["honest_judged"].get<int>(), 9);
  EXPECT_EQ(all["honest_accepted"].get<int>(), 9) << all.dump();
  EXPECT_EQ(all["infra_errors"].get<int>(), 0);
  EXPECT_EQ(all["negatives"].get<int>(), 3);
  EXPECT_EQ(all["negatives_rejected"].get<int>(), 3) << all.dump();
  // One queue for every level: a level's wall runs until its last verdict, all's is the run's.
  auto wall = nlohmann::json::parse(mc::read_file(out + "/wall.json"));
  EXPECT_GT(wall["1"].get<double>(), 0) << wall.dump();
  EXPECT_GE(wall["all"].get<double>(), wall["1"].get<double>()) << wall.dump();
  EXPECT_DOUBLE_EQ(all["wall_s"].get<double>(), wall["all"].get<double>());
  EXPECT_GT(all["judge_exec_s"].get<double>(), 0) << all.dump();
  // How close the honest rows came to their relative-norm bound is measured (and under it).
  EXPECT_GT(all["closest_to_norm_bound"].get<double>(), 0) << all.dump();
  EXPECT_LT(all["closest_to_norm_bound"].get<double>(), 1) << all.dump();
  // The renamed LayerNorm's re-draws reached its parameters by order and shape.
  bool seen = false;
  std::istringstream rows(mc::read_file(out + "/rows.jsonl"));
  int closure_rows = 0;
  for (std::string line; std::getline(rows, line);) {
    auto row = nlohmann::json::parse(line);
    if (row["problem"] == "L1/8_ClosureMLP") {
      ++closure_rows;
      for (const auto& t : row["judge_details"]["truth_on"])
        EXPECT_EQ(t.get<std::string>().rfind("none", 0), std::string::npos) << row["judge_details"].dump();
    }
    if (row["problem"] != "L1/4_LayerNorm" || row["sample_id"] != "renamed") continue;
    seen = true;
    EXPECT_EQ(row["judge_details"]["param_redraw"]["renamed"].get<int>(), 2) << row.dump();
    EXPECT_FALSE(row["judge_details"]["param_redraw"]["skipped"].get<bool>());
  }
  EXPECT_TRUE(seen);
  EXPECT_EQ(closure_rows, 3);
  // --resume judges only what is missing: here nothing, and the report is the same. Rows it
  // cannot read (cut short by a killed run, or an older format) are named, the first 3 of them,
  // then counted in one line.
  {
    std::ofstream app(out + "/rows.jsonl", std::ios::app);
    for (int i = 0; i < 5; ++i) app << "{\"problem\": \"L1/4_LayerNorm\", \"sample_id\": \"cut" << i << "\"\n";
  }
  o.argv.push_back("--resume");
  r = mc::run_command(o, 600000);
  ASSERT_TRUE(r.status.ok()) << r.out << r.err;
  EXPECT_NE(r.err.find("0 candidates to judge"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("5 rows of " + out + "/rows.jsonl skipped in all"), std::string::npos) << r.err;
  size_t named = 0;
  for (size_t at = r.err.find(" skipped ("); at != std::string::npos; at = r.err.find(" skipped (", at + 1)) ++named;
  EXPECT_EQ(named, 3u) << r.err;
  auto again = nlohmann::json::parse(mc::read_file(out + "/report.json"));
  EXPECT_EQ(again["all"]["honest_accepted"], all["honest_accepted"]);
  EXPECT_EQ(again["all"]["negatives_rejected"], all["negatives_rejected"]);
  // --redo judges chosen rows again (a tolerance change: the negatives), the rest are kept.
  o.argv.insert(o.argv.end(), {"--redo", "negatives"});
  r = mc::run_command(o, 600000);
  ASSERT_TRUE(r.status.ok()) << r.out << r.err;
  EXPECT_NE(r.err.find("(3 to judge again: --redo)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("3 candidates to judge"), std::string::npos) << r.err;
  auto redone = nlohmann::json::parse(mc::read_file(out + "/report.json"));
  EXPECT_EQ(redone["all"]["negatives_rejected"], all["negatives_rejected"]);
  EXPECT_EQ(redone["all"]["honest_judged"], all["honest_judged"]);
  o.argv.back() = "halfs";
  r = mc::run_command(o, 60000);
  EXPECT_EQ(r.status.exit_code, 2);
  EXPECT_NE(r.err.find("--redo: 'halfs' is no variant"), std::string::npos) << r.err;
}
