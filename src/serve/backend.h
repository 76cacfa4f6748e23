// Where the HTTP service sends jobs. Two implementations behind one interface:
//   LocalBackend  the embedded default: an in-process Evaluator (local compile pool and one judge
//                 per local GPU); results persisted under the cache folder.
//   RedisBackend  distributed: jobs go to Redis Streams, `musacoder worker`s anywhere run them.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "eval/evaluator.h"
#include "serve/job.h"
#include "serve/metrics.h"
#include "serve/redis_queue.h"

namespace mc::serve {

struct JobStatus {
  enum class State { kUnknown, kQueued, kDone };
  State state = State::kUnknown;
  nlohmann::json result;  // kDone
};

enum class Admission {
  kQueued,  // new job, queued
  kKnown,   // queued or finished before: the same job, not run twice
  kFull,    // the queue is at its bound: try later
};

// Threads waiting for particular jobs. notify() wakes the waiters of one id; waiters also
// re-check every 200 ms, so a missed notification costs latency, never a hang.
class Waiters {
 public:
  void notify(const std::string& id);
  // Waits until check() is true or the deadline passes; returns check()'s last value.
  bool wait(const std::string& id, double timeout_s, const std::function<bool()>& check);

 private:
  struct Slot {
    std::condition_variable cv;
    bool fired = false;
  };
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Slot>> slots_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string mode() const = 0;
  virtual Admission submit(const Job& job) = 0;
  virtual JobStatus status(const std::string& id) = 0;
  // Returns as soon as the job is done, or after timeout_s with its current status.
  JobStatus wait(const std::string& id, double timeout_s);
  virtual nlohmann::json health() = 0;                   // {"ok": bool, ...}
  virtual std::map<std::string, double> gauges() = 0;    // for /metrics

 protected:
  Waiters waiters_;  // implementations notify() when a job finishes
};

class LocalBackend : public Backend {
 public:
  LocalBackend(std::unique_ptr<eval::Evaluator> ev, std::string cache_dir, size_t max_queue,
               Metrics& metrics);
  ~LocalBackend() override;
  std::string mode() const override { return "embedded"; }
  Admission submit(const Job& job) override;
  JobStatus status(const std::string& id) override;
  nlohmann::json health() override;
  std::map<std::string, double> gauges() override;

 private:
  std::optional<nlohmann::json> stored_result(const std::string& id) const;
  std::string result_path(const std::string& id) const;
  std::unique_ptr<eval::Evaluator> ev_;
  std::string cache_dir_;
  size_t max_queue_;
  Metrics& metrics_;
  std::mutex mu_;
  struct Entry {
    bool done = false;
    nlohmann::json result;
  };
  std::map<std::string, Entry> entries_;
  std::deque<std::string> done_order_;  // finished ids, oldest first (memory is bounded)
  size_t in_flight_ = 0;
};

class RedisBackend : public Backend {
 public:
  RedisBackend(const std::string& redis_url, QueueOptions qopts, Metrics& metrics);
  ~RedisBackend() override;
  std::string mode() const override { return "redis"; }
  Admission submit(const Job& job) override;
  JobStatus status(const std::string& id) override;
  nlohmann::json health() override;
  std::map<std::string, double> gauges() override;

 private:
  void follow_done_stream();
  RedisPool pool_;
  QueueOptions qopts_;
  Metrics& metrics_;
  std::mutex mu_;
  std::map<std::string, double> submitted_at_;  // jobs this server queued, until their result
  std::atomic<bool> stop_{false};
  std::thread follower_;
};

}  // namespace mc::serve
