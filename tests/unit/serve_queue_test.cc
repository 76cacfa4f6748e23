// The distributed queue against a real redis-server with real `musacoder worker` processes and
// real nvcc compiles (compile-only jobs: CI has no GPU).
#include <gtest/gtest.h>

#include "serve/redis_queue.h"
#include "serve_test_util.h"

using namespace mc;
using namespace mc::serve;
using mc::test::history;
using mc::test::history_has;
using mc::test::join_lines;
using mc::test::make_job;
using mc::test::wait_for;

namespace {

std::optional<nlohmann::json> result_of(Redis& r, const std::string& id) {
  return RedisQueue(r, {}).result(id);
}

long long xlen(Redis& r, const std::string& key) { return r({"XLEN", key}).as_integer(); }

}  // namespace

TEST(RedisUrl, ParsesAndRejects) {
  auto u = parse_redis_url("redis://:s3cret@10.0.0.5:6380/2");
  EXPECT_EQ(u.host, "10.0.0.5");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 2);
  EXPECT_EQ(u.password, "s3cret");
  EXPECT_EQ(parse_redis_url("redis://localhost").port, 6379);
  EXPECT_THROW(parse_redis_url("http://localhost:6379"), Error);
  EXPECT_THROW(parse_redis_url("redis://host:99999"), Error);
}

TEST(Job, IdDependsOnEverythingThatChangesTheResult) {
  auto a = make_job("answer A");
  EXPECT_EQ(a.id, make_job("answer A").id);
  EXPECT_NE(a.id, make_job("answer B").id);
  EXPECT_NE(a.id, make_job("answer A", /*compile_only=*/false).id);
  auto b = a;
  b.gpu_kind = "NVIDIA H200";
  EXPECT_NE(a.id, make_job_id(*b.problem, b.answer, b.config, b.gpu_kind));
  // Round trip through JSON, as jobs travel through Redis.
  mc::TempDir dir;
  Job back = job_from_json(job_to_json(a), dir.path().string());
  EXPECT_EQ(back.id, a.id);
  EXPECT_EQ(back.problem->source, a.problem->source);
  EXPECT_TRUE(back.config.compile_only);
  // A tampered entry is refused, naming why.
  auto j = job_to_json(a);
  j["answer"] = "something else";
  try {
    job_from_json(j, dir.path().string());
    FAIL() << "tampered job accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match"), std::string::npos) << e.what();
  }
  j = job_to_json(a);
  j["problem"]["stem"] = "../../etc/passwd";
  EXPECT_THROW(job_from_json(j, dir.path().string()), Error);
  j = job_to_json(a);
  j["config"]["precision"] = "fp8";
  EXPECT_THROW(job_from_json(j, dir.path().string()), Error);
}

TEST(EvalConfigJson, RoundTripsAndNamesBadFields) {
  eval::EvalConfig c;
  c.precision = "bf16";
  c.trials = 7;
  c.allow = {"cublas"};
  c.compile_only = true;
  auto back = eval::eval_config_from_json(eval::to_json(c));
  EXPECT_EQ(back.config_hash(), c.config_hash());
  try {
    eval::eval_config_from_json({{"trails", 5}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trails"), std::string::npos);
  }
  EXPECT_THROW(eval::eval_config_from_json({{"trials", "five"}}), Error);
}

// A worker killed in the middle of a job: the job is reclaimed by another worker and ends with
// exactly one result.
TEST(RedisQueue, JobOfAKilledWorkerFinishesElsewhereExactlyOnce) {
  test::RedisServer redis;
  mc::TempDir caches;
  Redis r(redis.url_struct());
  RedisQueue q(r, {});
  q.ensure_groups();
  Job job = make_job(test::slow_native_source(12, "killed-worker"));
  ASSERT_EQ(q.enqueue(job.id, job_to_json(job)), RedisQueue::Enqueued::kQueued);
  EXPECT_EQ(q.enqueue(job.id, job_to_json(job)), RedisQueue::Enqueued::kInFlight);

  std::map<std::string, std::unique_ptr<test::WorkerProc>> workers;
  for (std::string n : {"wa", "wb"})
    workers[n] = std::make_unique<test::WorkerProc>(redis.url(), n,
                                                    (caches.path() / n).string());
  std::string first;
  ASSERT_TRUE(wait_for([&] {
    for (auto& [n, w] : workers)
      if (history_has(r, job.id, "delivery 1 to " + n)) first = n;
    return !first.empty();
  }, 60)) << join_lines(history(r, job.id));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // well inside the compile
  workers[first]->kill();
  std::string second = first == "wa" ? "wb" : "wa";

  ASSERT_TRUE(wait_for([&] { return result_of(r, job.id).has_value(); }, 240, 200))
      << join_lines(history(r, job.id)) << workers[second]->log();
  auto res = *result_of(r, job.id);
  EXPECT_EQ(res.value("verdict", ""), "compiled") << res.dump();
  EXPECT_TRUE(history_has(r, job.id, "delivery 2 to " + second)) << join_lines(history(r, job.id));
  EXPECT_EQ(xlen(r, "mc:stream:done"), 1);        // announced once
  // Acknowledged and removed: the worker does that right after storing the result, so the
  // result can be seen a moment before (CI caught the moment in between once).
  EXPECT_TRUE(wait_for([&] { return xlen(r, "mc:stream:compile") == 0; }, 10)) << xlen(r, "mc:stream:compile");
  EXPECT_EQ(r({"EXISTS", "mc:job:" + job.id}).as_integer(), 0);
  EXPECT_EQ(q.enqueue(job.id, job_to_json(job)), RedisQueue::Enqueued::kDone);  // resubmission
}

// Jobs queued when Redis dies (SIGKILL, AOF on) are all there after the restart and all finish.
TEST(RedisQueue, NoQueuedJobIsLostWhenRedisRestarts) {
  test::RedisServer redis;
  mc::TempDir caches;
  std::vector<Job> jobs;
  {
    Redis r(redis.url_struct());
    RedisQueue q(r, {});
    q.ensure_groups();
    for (int i = 0; i < 6; ++i) {
      // Fast verdicts (extract errors and static violations) plus one real compile.
      std::string answer = i == 0 ? test::slow_native_source(1, "restart")
                                  : "no code here, attempt " + std::to_string(i);
      jobs.push_back(make_job(answer));
      ASSERT_EQ(q.enqueue(jobs.back().id, job_to_json(jobs.back())), RedisQueue::Enqueued::kQueued);
    }
  }
  redis.crash_and_restart();
  Redis r(redis.url_struct());
  EXPECT_EQ(xlen(r, "mc:stream:compile"), 6);
  test::WorkerProc w(redis.url(), "after-restart", (caches.path() / "w").string());
  ASSERT_TRUE(wait_for([&] { return xlen(r, "mc:stream:done") == 6; }, 180, 200)) << w.log();
  for (const auto& j : jobs) {
    auto res = result_of(r, j.id);
    ASSERT_TRUE(res) << j.id;
    EXPECT_EQ(res->value("verdict", ""), j.answer.find("no code") == 0 ? "extract_error" : "compiled");
  }
}

// A worker that restarts Redis under a running worker: the worker reconnects and goes on.
TEST(RedisQueue, WorkerSurvivesARedisRestart) {
  test::RedisServer redis;
  mc::TempDir caches;
  test::WorkerProc w(redis.url(), "steady", (caches.path() / "w").string());
  Redis r(redis.url_struct());
  ASSERT_TRUE(wait_for([&] { return r({"HEXISTS", "mc:workers", "steady"}).as_integer() == 1; }, 60));
  redis.crash_and_restart();
  Redis r2(redis.url_struct());
  RedisQueue q(r2, {});
  q.ensure_groups();
  Job job = make_job("still no code");
  q.enqueue(job.id, job_to_json(job));
  ASSERT_TRUE(wait_for([&] { return result_of(r2, job.id).has_value(); }, 60, 100)) << w.log();
}

// A job that takes down every worker that touches it ends in the dead-letter stream, with its
// history, once the delivery limit is reached; its result says so (infra, never scored).
TEST(RedisQueue, PoisonJobLandsInDeadLettersAfterTheDeliveryLimit) {
  test::RedisServer redis;
  mc::TempDir caches;
  Redis r(redis.url_struct());
  RedisQueue q(r, {});
  q.ensure_groups();
  Job job = make_job(test::slow_native_source(12, "poison"));
  q.enqueue(job.id, job_to_json(job));
  std::vector<std::string> extra = {"--delivery-limit", "2"};
  for (int k = 1; k <= 2; ++k) {
    std::string name = "victim" + std::to_string(k);
    test::WorkerProc w(redis.url(), name, (caches.path() / name).string(), extra);
    ASSERT_TRUE(wait_for([&] { return history_has(r, job.id, "to " + name); }, 60))
        << join_lines(history(r, job.id)) << w.log();
    w.kill();  // the "poison" kills whoever runs it
  }
  test::WorkerProc survivor(redis.url(), "survivor", (caches.path() / "s").string(), extra);
  ASSERT_TRUE(wait_for([&] { return result_of(r, job.id).has_value(); }, 60, 100))
      << join_lines(history(r, job.id)) << survivor.log();
  auto res = *result_of(r, job.id);
  EXPECT_EQ(res.value("verdict", ""), "infra_error");
  EXPECT_TRUE(res["reward"].is_null());
  EXPECT_NE(res.value("infra_error", "").find("delivery limit"), std::string::npos) << res.dump();
  auto dead = r({"XRANGE", "mc:stream:dead", "-", "+"});
  ASSERT_EQ(dead.elements.size(), 1u);
  std::string fields;
  for (const auto& f : dead.elements[0].elements[1].elements) fields += f.str + "\n";
  EXPECT_NE(fields.find(job.id), std::string::npos);
  EXPECT_NE(fields.find("victim1"), std::string::npos) << fields;  // the history travels along
  EXPECT_NE(fields.find("victim2"), std::string::npos) << fields;
  // The entry is acknowledged and deleted just after the result is stored (finish()).
  EXPECT_TRUE(wait_for([&] { return xlen(r, "mc:stream:compile") == 0; }, 10)) << xlen(r, "mc:stream:compile");
  // The survivor is still healthy: it takes the next job.
  Job next = make_job("plain text, no code");
  q.enqueue(next.id, job_to_json(next));
  EXPECT_TRUE(wait_for([&] { return result_of(r, next.id).has_value(); }, 30, 100));
}

// An entry that is not a job at all goes to dead letters at once (it fails the same way on
// every worker), and does not stop the worker.
TEST(RedisQueue, UnreadableEntryIsDeadLetteredAtOnce) {
  test::RedisServer redis;
  mc::TempDir caches;
  Redis r(redis.url_struct());
  RedisQueue q(r, {});
  q.ensure_groups();
  r({"XADD", "mc:stream:compile", "*", "id", "deadbeef", "job", "{not json"});
  r({"XADD", "mc:stream:compile", "*", "id", "cafe", "job", R"({"id": "cafe", "answer": 3})"});
  test::WorkerProc w(redis.url(), "reader", (caches.path() / "w").string());
  // dead_letter() writes the dead-letter entry first and the result just after, so wait
  // for both: the count alone can be seen before "cafe"'s result is stored.
  ASSERT_TRUE(wait_for([&] { return xlen(r, "mc:stream:dead") == 2 && result_of(r, "cafe").has_value(); },
                       60, 100))
      << w.log();
  auto res = result_of(r, "cafe");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->value("verdict", ""), "infra_error");
  EXPECT_NE(res->value("infra_error", "").find("bad job"), std::string::npos) << res->dump();
}
