// The HTTP service as a user meets it: a real `musacoder serve` process on loopback, answered
// through plain HTTP requests and through the C++ client. Embedded mode, and distributed mode
// with real workers on a real redis-server.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <set>

#include "eval/candidates.h"
#include "serve/client.h"
#include "serve_test_util.h"

using namespace mc;
using namespace mc::serve;
using mc::test::wait_for;

namespace {

const char* kToken = "test-token-0123456789abcdef";

std::string token_file(const fs::path& dir) {
  fs::create_directories(dir);
  std::string p = (dir / "tokens").string();
  write_file_atomic(p, std::string("# service tokens\n") + kToken + "\n");
  return p;
}

httplib::Headers auth(const std::string& tok = kToken) {
  return {{"Authorization", "Bearer " + tok}};
}

nlohmann::json body_of(const httplib::Result& r) {
  return nlohmann::json::parse(r->body, nullptr, false);
}

std::string native_add() { return read_file(test::cases_dir() + "/gpu/native/1_Add.cu"); }

// Distinct answers that stop at the static stage (fast): PyTorch computes in forward.
std::string torch_answer(int i) {
  return "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
         "        return torch.add(a, b)  # variant " + std::to_string(i) + "\n";
}

}  // namespace

TEST(HttpApi, RejectsBadRequestsClearlyAndStaysUp) {
  mc::TempDir dir;
  test::ServeProc srv({"--device", "cpu", "--compile-only", "--cache-dir",
                       (dir.path() / "cache").string(), "--token-file",
                       token_file(dir.path()), "--max-body-mb", "1", "--allow-inline-problems"},
                      dir.path().string());
  httplib::Client cli(srv.url());
  cli.set_read_timeout(60, 0);
  nlohmann::json good = {{"problem", "1_Add"}, {"answer", "no code"}};
  // Authentication.
  auto r = cli.Post("/v1/verify", good.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(body_of(r).value("error", "").find("Bearer"), std::string::npos);
  r = cli.Post("/v1/verify", auth("wrong-token-wrong-token"), good.dump(), "application/json");
  EXPECT_EQ(r->status, 403);
  r = cli.Get("/v1/jobs/0123abcd");
  EXPECT_EQ(r->status, 401);
  // Malformed bodies.
  struct Bad {
    std::string body;
    int status;
    std::string says;
  };
  std::vector<Bad> bad = {
      {"{not json", 400, "not valid JSON"},
      {"[1,2]", 400, "JSON object"},
      {R"({"problem": "1_Add"})", 400, "answer"},
      {R"({"problem": "1_Add", "answer": "x", "colour": 1})", 400, "unknown field 'colour'"},
      {R"({"problem": 19, "answer": "x"})", 400, "problem key"},
      {R"({"problem": "99_Nope", "answer": "x"})", 422, "unknown problem '99_Nope'"},
      {R"x({"problem_source": "print(1)", "problem_name": "p", "answer": "x"})x", 422, "class Model"},
      {R"({"problem_source": "x", "problem_name": "../evil", "answer": "x"})", 422, "plain file name"},
      {R"({"candidates": []})", 400, "empty"},
      {R"({"candidates": [{"problem": "1_Add", "answer": "x"}, 5]})", 400, "candidate 1"},
      {R"({"problem": "1_Add", "answer": "x", "wait_s": "soon"})", 400, "wait_s"},
  };
  for (const auto& b : bad) {
    r = cli.Post("/v1/verify", auth(), b.body, "application/json");
    ASSERT_TRUE(r) << b.body;
    EXPECT_EQ(r->status, b.status) << b.body << " -> " << r->body;
    EXPECT_NE(body_of(r).value("error", "").find(b.says), std::string::npos)
        << b.body << " -> " << r->body;
  }
  // Oversized body: refused before it is read whole.
  std::string huge = nlohmann::json{{"problem", "1_Add"}, {"answer", std::string(2 << 20, 'x')}}.dump();
  r = cli.Post("/v1/verify", auth(), huge, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("too large"), std::string::npos) << r->body;
  // Unknown job, unknown endpoint.
  r = cli.Get("/v1/jobs/00000000000000000000000000000000", auth());
  EXPECT_EQ(r->status, 404);
  r = cli.Get("/v2/anything", auth());
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("no such endpoint"), std::string::npos);
  // Still up, and a good request is answered.
  r = cli.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = cli.Post("/v1/verify", auth(), nlohmann::json{{"problem", "1_Add"}, {"answer", "no code"}, {"wait_s", 30}}.dump(),
               "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  auto j = body_of(r);
  EXPECT_EQ(j["jobs"][0]["result"]["verdict"], "extract_error");
  std::string id = j["id"];
  r = cli.Get("/v1/jobs/" + id, auth());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(body_of(r)["status"], "done");
  r = cli.Get("/metrics");
  EXPECT_NE(r->body.find("mooreeval_http_responses_total{code=\"401\"}"), std::string::npos);
  EXPECT_NE(r->body.find("mooreeval_results_total{verdict=\"extract_error\"} 1"), std::string::npos)
      << r->body;
  EXPECT_TRUE(srv.running());
}

TEST(HttpApi, FullQueueAnswers429WithRetryAfter) {
  mc::TempDir dir;
  test::ServeProc srv({"--device", "cpu", "--compile-only", "--compile-workers", "1",
                       "--max-queue", "2", "--cache-dir", (dir.path() / "cache").string()},
                      dir.path().string());
  httplib::Client cli(srv.url());
  cli.set_read_timeout(300, 0);
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    auto r = cli.Post("/v1/verify", nlohmann::json{{"problem", "1_Add"},
                                                   {"answer", test::slow_native_source(6, "q" + std::to_string(i))}}.dump(),
                      "application/json");
    ASSERT_EQ(r->status, 202) << r->body;
    ids.push_back(body_of(r)["id"]);
  }
  auto r = cli.Post("/v1/verify", nlohmann::json{{"problem", "1_Add"}, {"answer", test::slow_native_source(6, "q3")}}.dump(),
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_TRUE(r->has_header("Retry-After"));
  EXPECT_NE(body_of(r).value("error", "").find("queue is full"), std::string::npos);
  // Problem sources are refused unless the operator allowed them: they would run in the judge.
  r = cli.Post("/v1/verify", nlohmann::json{{"problem_source", read_file(test::cases_dir() + "/problems/1_Add.py")},
                                            {"problem_name", "1_Add"}, {"answer", "x"}}.dump(),
               "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(body_of(r).value("error", "").find("--allow-inline-problems"), std::string::npos);
  // Resubmitting an accepted job is not refused: it is the same job.
  r = cli.Post("/v1/verify", nlohmann::json{{"problem", "1_Add"}, {"answer", test::slow_native_source(6, "q0")}}.dump(),
               "application/json");
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(body_of(r)["id"], ids[0]);
  // Once the queue drains, new work is taken again.
  r = cli.Post("/v1/results", nlohmann::json{{"ids", ids}, {"wait_s", 200}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  for (const auto& j : body_of(r)["jobs"]) EXPECT_EQ(j["result"]["verdict"], "compiled") << j.dump();
  r = cli.Post("/v1/verify", nlohmann::json{{"problem", "1_Add"}, {"answer", "x"}}.dump(), "application/json");
  EXPECT_TRUE(r->status == 200 || r->status == 202) << r->body;
}

// The C++ client against an embedded server: one row per item in order, cached resubmission.
TEST(HttpApi, CppClientVerifiesABatch) {
  mc::TempDir dir;
  test::ServeProc srv({"--device", "cpu", "--compile-only", "--cache-dir",
                       (dir.path() / "cache").string(), "--token-file", token_file(dir.path()),
                       "--allow-inline-problems"},
                      dir.path().string());
  ClientOptions co;
  co.url = srv.url();
  co.token = kToken;
  co.batch = 3;
  co.concurrency = 4;
  VerifyClient client(co);
  auto health = client.health();
  EXPECT_TRUE(health.value("ok", false));
  // The settings it judges under, which a client checks its own against (train rl --verifier).
  EXPECT_EQ(health["config"].value("compile_only", false), true) << health.dump();
  EXPECT_EQ(eval::eval_config_from_json(health["config"]).config_hash(), health.value("config_hash", "")) << health.dump();
  std::vector<VerifyItem> items;
  for (int i = 0; i < 8; ++i) {
    VerifyItem it;
    it.problem = "1_Add";
    it.answer = i == 0 ? native_add() : i == 1 ? native_add() + "\n#error nope\n" : torch_answer(i);
    it.sample_id = std::to_string(i);
    items.push_back(it);
  }
  VerifyItem inline_item;  // a problem the server does not have, sent with its source
  inline_item.problem_source = read_file(test::cases_dir() + "/problems/2_ReLU.py");
  inline_item.problem_name = "2_ReLU";
  inline_item.answer = "no code at all";
  items.push_back(inline_item);
  auto rows = client.verify(items);
  ASSERT_EQ(rows.size(), items.size());
  EXPECT_EQ(rows[0]["verdict"], "compiled") << rows[0].dump();
  EXPECT_EQ(rows[1]["verdict"], "compile_error");
  EXPECT_NE(rows[1]["feedback"].get<std::string>().find("nope"), std::string::npos);
  for (int i = 2; i < 8; ++i) {
    EXPECT_EQ(rows[i]["verdict"], "static_violation") << rows[i].dump();
    EXPECT_EQ(rows[i]["rule"], "torch_compute");
  }
  EXPECT_EQ(rows[8]["verdict"], "extract_error");
  EXPECT_EQ(rows[8]["problem"], "2_ReLU");
  // The same candidates again: answered from the stored results.
  auto again = client.verify({items[0]});
  EXPECT_EQ(again[0]["job_id"], rows[0]["job_id"]);
  EXPECT_EQ(again[0]["wall_s"], rows[0]["wall_s"]);
  // A rejected request is an error naming why, not a result.
  VerifyItem bad;
  bad.problem = "77_Unknown";
  bad.answer = "x";
  try {
    client.verify({bad});
    FAIL() << "unknown problem accepted";
  } catch (const ClientError& e) {
    EXPECT_EQ(e.status, 422);
    EXPECT_NE(std::string(e.what()).find("77_Unknown"), std::string::npos);
  }
  ClientOptions wrong = co;
  wrong.token = "not-the-right-token-at-all";
  EXPECT_THROW(VerifyClient(wrong).verify({items[0]}), ClientError);
}

// Distributed mode end to end: compile worker and GPU-role worker (judging on the CPU) on
// Redis; the compiled module crosses over through Redis, as between machines.
TEST(HttpApi, DistributedPipelineJudgesThroughRedis) {
  test::RedisServer redis;
  mc::TempDir dir;
  test::ServeProc srv({"--device", "cpu", "--redis", redis.url(), "--cache-dir",
                       (dir.path() / "server").string(), "--trials", "5", "--trial-timeout", "12"},
                      dir.path().string());
  test::WorkerProc compile(redis.url(), "c1", (dir.path() / "c1").string());
  // Two lanes: the hanging candidate shares the "GPU" with the others, is preempted there (a
  // timeout beside other lanes is no verdict), goes to the back of the queue and is judged alone.
  test::WorkerProc gpu(redis.url(), "g1", (dir.path() / "g1").string(),
                       {"--device", "cpu", "--lanes", "2"}, "gpu");
  httplib::Client cli(srv.url());
  // A hang is judged twice (beside the other lane, then alone), each time to its trial limit:
  // --trial-timeout 12 keeps that short (the default's first trial runs up to 60 s). The server
  // waits 600 s at most.
  cli.set_read_timeout(700, 0);
  std::string honest = read_file(test::cases_dir() + "/cpu/honest_add.py");
  std::string wrong = read_file(test::cases_dir() + "/cpu/wrong_add.py");
  std::string hang = read_file(test::cases_dir() + "/cpu/infinite_loop.py");
  nlohmann::json req = {{"candidates",
                         {{{"problem", "1_Add"}, {"answer", honest}},
                          {{"problem", "1_Add"}, {"answer", wrong}},
                          {{"problem", "1_Add"}, {"answer", torch_answer(0)}},
                          {{"problem", "1_Add"}, {"answer", hang}}}},
                        {"wait_s", 600}};
  auto r = cli.Post("/v1/verify", req.dump(), "application/json");
  ASSERT_TRUE(r) << srv.log();
  ASSERT_EQ(r->status, 200) << r->body << compile.log() << gpu.log();
  auto jobs = body_of(r)["jobs"];
  EXPECT_EQ(jobs[0]["result"]["verdict"], "ok") << jobs[0].dump() << gpu.log();
  EXPECT_EQ(jobs[0]["result"]["trials_passed"], 5);
  EXPECT_EQ(jobs[0]["result"]["judge_details"]["lane"].value("lanes", 0), 2) << jobs[0].dump();
  EXPECT_EQ(jobs[1]["result"]["verdict"], "incorrect") << jobs[1].dump();
  EXPECT_EQ(jobs[2]["result"]["verdict"], "static_violation");
  const auto& hung = jobs[3]["result"];
  EXPECT_EQ(hung["verdict"], "timeout") << jobs[3].dump() << gpu.log();
  EXPECT_EQ(hung["judge_details"]["lane"].value("mode", ""), "exclusive") << hung.dump();
  Redis rc(redis.url_struct());
  EXPECT_TRUE(test::history_has(rc, jobs[3].value("id", ""), "queued again, to be judged alone"))
      << test::join_lines(test::history(rc, jobs[3].value("id", "")));
  auto h = httplib::Client(srv.url()).Get("/health");
  auto hj = body_of(h);
  EXPECT_EQ(hj["mode"], "redis");
  EXPECT_EQ(hj["compile_workers"], 1);
  EXPECT_EQ(hj["gpu_workers"], 1);
}

// Many concurrent clients, 2,000 submissions (a quarter of them repeats): every submission is
// answered, every distinct job has exactly one result, and the latency percentiles are reported.
TEST(HttpApi, LoadTestEveryJobAnsweredExactlyOnce) {
  test::RedisServer redis;
  mc::TempDir dir;
  test::ServeProc srv({"--device", "cpu", "--compile-only", "--redis", redis.url(), "--cache-dir",
                       (dir.path() / "server").string(), "--http-threads", "96"},
                      dir.path().string());
  std::vector<std::unique_ptr<test::WorkerProc>> workers;
  for (int i = 0; i < 2; ++i)
    workers.push_back(std::make_unique<test::WorkerProc>(
        redis.url(), "load" + std::to_string(i), (dir.path() / ("w" + std::to_string(i))).string()));
  const int kSubmissions = 2000, kDistinct = 1500, kClients = 48;
  std::atomic<int> next{0}, answered{0}, failures{0};
  std::mutex mu;
  std::vector<double> latencies;
  std::map<int, std::string> id_of;  // distinct answer -> job id
  std::string first_failure;
  auto client = [&] {
    httplib::Client cli(srv.url());
    cli.set_read_timeout(120, 0);
    while (true) {
      int i = next++;
      if (i >= kSubmissions) return;
      int variant = i % kDistinct;
      nlohmann::json req = {{"problem", "1_Add"}, {"answer", torch_answer(variant)}, {"wait_s", 90}};
      auto t0 = std::chrono::steady_clock::now();
      auto r = cli.Post("/v1/verify", req.dump(), "application/json");
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard lk(mu);
      if (!r || r->status != 200) {
        if (first_failure.empty())
          first_failure = r ? fmt::format("HTTP {}: {}", r->status, r->body)
                            : "no answer: " + httplib::to_string(r.error());
        ++failures;
        continue;
      }
      auto j = body_of(r);
      if (j["jobs"][0]["result"]["verdict"] != "static_violation") {
        if (first_failure.empty()) first_failure = "wrong verdict: " + r->body;
        ++failures;
        continue;
      }
      std::string id = j["id"];
      if (id_of.count(variant) && id_of[variant] != id) ++failures;
      id_of[variant] = id;
      latencies.push_back(dt);
      ++answered;
    }
  };
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) threads.emplace_back(client);
  for (auto& t : threads) t.join();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_EQ(answered.load(), kSubmissions);
  EXPECT_EQ(id_of.size(), static_cast<size_t>(kDistinct));
  Redis r(redis.url_struct());
  // Exactly one stored result per distinct job, announced once.
  EXPECT_EQ(r({"XLEN", "mc:stream:done"}).as_integer(), kDistinct);
  std::set<std::string> ids;
  for (auto& [v, id] : id_of) ids.insert(id);
  EXPECT_EQ(ids.size(), static_cast<size_t>(kDistinct));
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) { return latencies[static_cast<size_t>(p * (latencies.size() - 1))]; };
  std::string report = fmt::format(
      "load test: {} submissions ({} distinct) from {} clients in {:.1f} s ({:.0f}/s); "
      "latency p50 {:.1f} ms, p90 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms",
      kSubmissions, kDistinct, kClients, wall, kSubmissions / wall, pct(0.5) * 1e3,
      pct(0.9) * 1e3, pct(0.99) * 1e3, latencies.back() * 1e3);
  std::printf("%s\n", report.c_str());
  RecordProperty("load_report", report);
  auto m = httplib::Client(srv.url()).Get("/metrics");
  EXPECT_NE(m->body.find("mooreeval_job_latency_seconds{quantile=\"0.99\"}"), std::string::npos);
}
