// The distributed job queue on Redis Streams.
//
//   <p>stream:compile   jobs waiting for (or being handled by) a compile worker
//   <p>stream:gpu       compiled jobs waiting for a GPU worker (entry carries the artifacts' keys)
//   <p>stream:dead      jobs that reached the delivery limit, with their history
//   <p>stream:done      one entry per stored result (servers wake their waiters from it)
//   <p>job:<id>         the job while it is in the system (queued or running)
//   <p>result:<id>      the final result row (JSON), written once: SET NX
//   <p>hist:<id>        what happened to the job, one line per event
//   <p>artifact:<sha>   a compiled module (.so bytes), so GPU machines need no shared disk
//   <p>workers          heartbeat of every worker (JSON per worker name)
//
// Delivery is at-least-once (consumer groups; entries of a dead worker are reclaimed with
// XAUTOCLAIM once idle for `claim_idle_ms`; live workers keep their entries fresh by touching
// them). Results are exactly-once: storing is SET NX plus the done entry, in one script, and a
// second completion of the same job only acknowledges its entry.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "serve/redis.h"

namespace mc::serve {

enum class QueueStage { kCompile, kGpu };
const char* to_string(QueueStage s);

struct QueueOptions {
  std::string prefix = "mc:";
  size_t max_depth = 10000;        // queued + running jobs; beyond: submissions are refused
  int delivery_limit = 3;          // deliveries of one entry before it is dead-lettered
  int claim_idle_ms = 30000;       // an entry untouched this long belongs to a dead worker
  int infra_result_ttl_s = 3600;   // infra results expire, so a resubmission runs again
  int artifact_ttl_s = 86400;
};

struct Delivery {
  QueueStage stage = QueueStage::kCompile;
  std::string entry_id;  // stream entry
  std::string job_id;
  nlohmann::json job;       // the job (job_to_json)
  nlohmann::json compiled;  // gpu stage: {"modules": [...], "compile_s", "compile_cached", ...}
  long long deliveries = 1;
};

class RedisQueue {
 public:
  RedisQueue(Redis& redis, QueueOptions opts);
  const QueueOptions& options() const { return opts_; }
  std::string key(const std::string& suffix) const { return opts_.prefix + suffix; }
  std::string stream(QueueStage s) const;
  void ensure_groups();  // idempotent; workers and servers call it at start

  // --- submitters
  enum class Enqueued { kQueued, kInFlight, kDone, kFull };
  Enqueued enqueue(const std::string& job_id, const nlohmann::json& job);
  std::optional<nlohmann::json> result(const std::string& job_id);
  bool in_flight(const std::string& job_id);
  size_t depth();  // entries in the compile and GPU streams (queued + running)

  // --- workers
  // A reclaimed entry of a dead worker if there is one, else a new entry (waits up to
  // block_ms). Entries past the delivery limit are dead-lettered here and skipped.
  std::optional<Delivery> next(QueueStage stage, const std::string& consumer, int block_ms);
  // Keeps a running entry from being reclaimed (resets its idle time).
  void touch(QueueStage stage, const std::string& consumer, const std::string& entry_id);
  // Stores the final result (once) and acknowledges the entry. False when a result existed.
  bool finish(const Delivery& d, const nlohmann::json& result_row, bool infra);
  // Compile stage done: hands the job to the GPU stream and acknowledges it, atomically.
  void forward_to_gpu(const Delivery& d, const nlohmann::json& compiled);
  // A GPU job preempted beside other lanes goes to the back of the GPU stream, marked to be
  // judged alone ("alone": true in its compile record): the jobs queued before it are judged
  // first, none waiting behind a hang's full limit.
  void requeue_alone(const Delivery& d, const std::string& why);
  void dead_letter(const Delivery& d, const std::string& why);
  void note(const std::string& job_id, const std::string& event);
  std::vector<std::string> history(const std::string& job_id);

  void put_artifact(const std::string& digest, const std::string& bytes);
  std::optional<std::string> get_artifact(const std::string& digest);

  void heartbeat(const std::string& worker, const nlohmann::json& info);
  nlohmann::json workers();  // name -> last heartbeat

 private:
  void ack(const Delivery& d);
  std::optional<Delivery> parse_entry(QueueStage stage, const RedisReply& entry);
  long long delivery_count(QueueStage stage, const std::string& entry_id);
  Redis& r_;
  QueueOptions opts_;
};

}  // namespace mc::serve
