#include "serve/redis_queue.h"

#include "serve/job.h"

namespace mc::serve {
namespace {

constexpr const char* kGroup = "workers";

// Atomic admission: a finished or running job is not queued twice, and the queue is bounded.
// KEYS: result, job, compile stream, gpu stream. ARGV: job JSON, job id, max depth.
constexpr const char* kEnqueueScript = R"lua(
if redis.call('EXISTS', KEYS[1]) == 1 then return 2 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local depth = redis.call('XLEN', KEYS[3]) + redis.call('XLEN', KEYS[4])
if depth >= tonumber(ARGV[3]) then return -1 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('XADD', KEYS[3], '*', 'id', ARGV[2], 'job', ARGV[1])
return 1
)lua";

// Exactly one result per job: SET NX, and only the writer that won announces it.
// KEYS: result, job, done stream. ARGV: row JSON, ttl seconds (0: none), job id.
constexpr const char* kFinishScript = R"lua(
local ok
if tonumber(ARGV[2]) > 0 then
  ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2])
else
  ok = redis.call('SET', KEYS[1], ARGV[1], 'NX')
end
if ok then
  redis.call('DEL', KEYS[2])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', '100000', '*', 'id', ARGV[3])
  return 1
end
return 0
)lua";

std::string field(const RedisReply& fields, const std::string& name) {
  for (size_t i = 0; i + 1 < fields.elements.size(); i += 2)
    if (fields.elements[i].str == name) return fields.elements[i + 1].str;
  return "";
}

}  // namespace

const char* to_string(QueueStage s) { return s == QueueStage::kCompile ? "compile" : "gpu"; }

RedisQueue::RedisQueue(Redis& redis, QueueOptions opts) : r_(redis), opts_(std::move(opts)) {}

std::string RedisQueue::stream(QueueStage s) const {
  return key(std::string("stream:") + to_string(s));
}

void RedisQueue::ensure_groups() {
  for (QueueStage s : {QueueStage::kCompile, QueueStage::kGpu}) {
    try {
      r_.command({"XGROUP", "CREATE", stream(s), kGroup, "0", "MKSTREAM"});
    } catch (const RedisError& e) {
      if (std::string(e.what()).find("BUSYGROUP") == std::string::npos) throw;
    }
  }
}

RedisQueue::Enqueued RedisQueue::enqueue(const std::string& job_id, const nlohmann::json& job) {
  RedisReply r = r_.command({"EVAL", kEnqueueScript, "4", key("result:" + job_id),
                             key("job:" + job_id), stream(QueueStage::kCompile),
                             stream(QueueStage::kGpu), job.dump(), job_id,
                             std::to_string(opts_.max_depth)});
  switch (r.as_integer()) {
    case 1: return Enqueued::kQueued;
    case 0: return Enqueued::kInFlight;
    case 2: return Enqueued::kDone;
    default: return Enqueued::kFull;
  }
}

std::optional<nlohmann::json> RedisQueue::result(const std::string& job_id) {
  RedisReply r = r_.command({"GET", key("result:" + job_id)});
  if (r.is_nil()) return std::nullopt;
  return nlohmann::json::parse(r.as_string());
}

bool RedisQueue::in_flight(const std::string& job_id) {
  return r_.command({"EXISTS", key("job:" + job_id)}).as_integer() == 1;
}

size_t RedisQueue::depth() {
  return static_cast<size_t>(r_.command({"XLEN", stream(QueueStage::kCompile)}).as_integer() +
                             r_.command({"XLEN", stream(QueueStage::kGpu)}).as_integer());
}

long long RedisQueue::delivery_count(QueueStage stage, const std::string& entry_id) {
  RedisReply r = r_.command({"XPENDING", stream(stage), kGroup, entry_id, entry_id, "1"});
  if (!r.is_array() || r.elements.empty() || r.elements[0].elements.size() < 4) return 1;
  return r.elements[0].elements[3].integer;
}

std::optional<Delivery> RedisQueue::parse_entry(QueueStage stage, const RedisReply& entry) {
  if (!entry.is_array() || entry.elements.size() < 2 || !entry.elements[1].is_array())
    return std::nullopt;  // deleted while pending
  Delivery d;
  d.stage = stage;
  d.entry_id = entry.elements[0].str;
  const RedisReply& fields = entry.elements[1];
  d.job_id = field(fields, "id");
  d.deliveries = delivery_count(stage, d.entry_id);
  auto parse = [&](const std::string& text, nlohmann::json& out) {
    if (text.empty()) return;
    out = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  };
  parse(field(fields, "job"), d.job);
  parse(field(fields, "compiled"), d.compiled);
  return d;
}

std::optional<Delivery> RedisQueue::next(QueueStage stage, const std::string& consumer,
                                         int block_ms) {
  auto accept = [&](std::optional<Delivery> d) -> std::optional<Delivery> {
    if (!d) return d;
    if (d->deliveries > opts_.delivery_limit) {
      dead_letter(*d, "delivery limit reached (" + std::to_string(d->deliveries - 1) +
                          " deliveries ended without a result)");
      return std::nullopt;
    }
    note(d->job_id, std::string(to_string(stage)) + " delivery " +
                        std::to_string(d->deliveries) + " to " + consumer);
    return d;
  };
  // 1. Janitor: entries of dead workers, idle past claim_idle_ms.
  std::string cursor = "0-0";
  for (int round = 0; round < 8; ++round) {
    RedisReply r = r_.command({"XAUTOCLAIM", stream(stage), kGroup, consumer,
                               std::to_string(opts_.claim_idle_ms), cursor, "COUNT", "1"});
    if (!r.is_array() || r.elements.size() < 2) break;
    for (const auto& e : r.elements[1].elements) {
      auto d = accept(parse_entry(stage, e));
      if (d) return d;
      // the entry was dead-lettered or deleted: keep looking
    }
    cursor = r.elements[0].str;
    if (cursor == "0-0") break;
  }
  // 2. New entries.
  RedisReply r = r_.blocking({"XREADGROUP", "GROUP", kGroup, consumer, "COUNT", "1", "BLOCK",
                              std::to_string(block_ms), "STREAMS", stream(stage), ">"},
                             block_ms);
  if (!r.is_array() || r.elements.empty()) return std::nullopt;
  const RedisReply& entries = r.elements[0].elements.at(1);
  if (entries.elements.empty()) return std::nullopt;
  return accept(parse_entry(stage, entries.elements[0]));
}

void RedisQueue::touch(QueueStage stage, const std::string& consumer, const std::string& entry_id) {
  r_.command({"XCLAIM", stream(stage), kGroup, consumer, "0", entry_id, "JUSTID"});
}

void RedisQueue::ack(const Delivery& d) {
  r_.transaction({{"XACK", stream(d.stage), kGroup, d.entry_id},
                  {"XDEL", stream(d.stage), d.entry_id}});
}

bool RedisQueue::finish(const Delivery& d, const nlohmann::json& row, bool infra) {
  RedisReply r = r_.command({"EVAL", kFinishScript, "3", key("result:" + d.job_id),
                             key("job:" + d.job_id), key("stream:done"), row.dump(),
                             std::to_string(infra ? opts_.infra_result_ttl_s : 0), d.job_id});
  bool stored = r.as_integer() == 1;
  note(d.job_id, std::string("result ") + row.value("verdict", std::string("?")) +
                     (stored ? " stored" : " discarded (a result existed)"));
  ack(d);
  return stored;
}

void RedisQueue::forward_to_gpu(const Delivery& d, const nlohmann::json& compiled) {
  r_.transaction({{"XADD", stream(QueueStage::kGpu), "*", "id", d.job_id, "job", d.job.dump(),
                   "compiled", compiled.dump()},
                  {"XACK", stream(d.stage), kGroup, d.entry_id},
                  {"XDEL", stream(d.stage), d.entry_id}});
  note(d.job_id, "compiled; queued for a GPU");
}

void RedisQueue::requeue_alone(const Delivery& d, const std::string& why) {
  nlohmann::json compiled = d.compiled;
  compiled["alone"] = true;
  r_.transaction({{"XADD", stream(QueueStage::kGpu), "*", "id", d.job_id, "job", d.job.dump(),
                   "compiled", compiled.dump()},
                  {"XACK", stream(d.stage), kGroup, d.entry_id},
                  {"XDEL", stream(d.stage), d.entry_id}});
  note(d.job_id, why + "; queued again, to be judged alone");
}

void RedisQueue::dead_letter(const Delivery& d, const std::string& why) {
  note(d.job_id, "dead-lettered: " + why);
  nlohmann::json hist = history(d.job_id);
  r_.command({"XADD", key("stream:dead"), "*", "id", d.job_id, "stage", to_string(d.stage),
              "deliveries", std::to_string(d.deliveries), "reason", why, "history", hist.dump(),
              "job", d.job.dump()});
  finish(d, infra_result_row(d.job_id, "dead-lettered: " + why), /*infra=*/true);
}

void RedisQueue::note(const std::string& job_id, const std::string& event) {
  if (job_id.empty()) return;
  char ts[32];
  std::snprintf(ts, sizeof ts, "%.3f ", unix_now());
  std::string k = key("hist:" + job_id);
  r_.transaction({{"RPUSH", k, ts + event}, {"LTRIM", k, "-200", "-1"}, {"EXPIRE", k, "604800"}});
}

std::vector<std::string> RedisQueue::history(const std::string& job_id) {
  std::vector<std::string> out;
  RedisReply r = r_.command({"LRANGE", key("hist:" + job_id), "0", "-1"});
  for (const auto& e : r.elements) out.push_back(e.str);
  return out;
}

void RedisQueue::put_artifact(const std::string& digest, const std::string& bytes) {
  r_.command({"SET", key("artifact:" + digest), bytes, "EX", std::to_string(opts_.artifact_ttl_s)});
}

std::optional<std::string> RedisQueue::get_artifact(const std::string& digest) {
  RedisReply r = r_.command({"GET", key("artifact:" + digest)});
  if (r.is_nil()) return std::nullopt;
  return r.as_string();
}

void RedisQueue::heartbeat(const std::string& worker, const nlohmann::json& info) {
  nlohmann::json j = info;
  j["ts"] = unix_now();
  r_.command({"HSET", key("workers"), worker, j.dump()});
}

nlohmann::json RedisQueue::workers() {
  nlohmann::json out = nlohmann::json::object();
  RedisReply r = r_.command({"HGETALL", key("workers")});
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2)
    out[r.elements[i].str] = nlohmann::json::parse(r.elements[i + 1].str, nullptr, false);
  return out;
}

}  // namespace mc::serve
