#include "rl/retry_buffer.h"

#include <algorithm>
#include <sstream>

#include "common/check.h"

namespace mc::rl {

RetryBuffer::RetryBuffer(RetryBufferOptions o) : o_(o), rng_(o.seed) {
  MC_CHECK(o_.capacity >= 1, "retry buffer: capacity must be at least 1");
  MC_CHECK(o_.reissue_prob >= 0 && o_.reissue_prob <= 1, "retry buffer: re-issue probability ", o_.reissue_prob,
           " is not within [0, 1]");
  MC_CHECK(o_.max_reissues >= 1, "retry buffer: max re-issues must be at least 1");
}

void RetryBuffer::add(RetryEntry e) {
  auto it = std::find_if(q_.begin(), q_.end(), [&](const RetryEntry& x) { return x.problem == e.problem; });
  if (it != q_.end()) {
    it->failed_answer = std::move(e.failed_answer);
    it->feedback = std::move(e.feedback);
    return;
  }
  if (q_.size() == o_.capacity) {
    q_.pop_front();
    ++c_.evicted;
  }
  e.reissues = 0;
  q_.push_back(std::move(e));
  ++c_.added;
}

std::vector<RetryEntry> RetryBuffer::draw(size_t slots) {
  std::bernoulli_distribution coin(o_.reissue_prob);
  size_t n = 0;
  for (size_t i = 0; i < slots; ++i) n += coin(rng_);
  n = std::min(n, q_.size());
  std::vector<RetryEntry> out;
  for (size_t i = 0; i < n; ++i) {
    RetryEntry e = std::move(q_.front());
    q_.pop_front();
    ++e.reissues;
    ++c_.reissued;
    out.push_back(e);
    if (e.reissues >= o_.max_reissues) ++c_.expired;
    else q_.push_back(std::move(e));
  }
  return out;
}

void RetryBuffer::repaired(const std::string& problem) {
  auto it = std::find_if(q_.begin(), q_.end(), [&](const RetryEntry& x) { return x.problem == problem; });
  if (it == q_.end()) return;  // not waiting (expired, evicted, or never failed)
  ++c_.repaired;
  q_.erase(it);
}

nlohmann::json RetryBuffer::to_json() const {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : q_)
    entries.push_back({{"problem", e.problem}, {"failed_answer", e.failed_answer}, {"feedback", e.feedback},
                       {"reissues", e.reissues}, {"added_step", e.added_step}});
  std::ostringstream rng;
  rng << rng_;
  return {{"format_version", 1}, {"entries", entries}, {"rng", rng.str()},
          {"counters", {{"added", c_.added}, {"evicted", c_.evicted}, {"reissued", c_.reissued},
                        {"repaired", c_.repaired}, {"expired", c_.expired}}}};
}

RetryBuffer RetryBuffer::from_json(const nlohmann::json& j, RetryBufferOptions o) {
  MC_CHECK(j.is_object() && j.value("format_version", 0) == 1 && j.contains("entries") && j.contains("rng"),
           "retry buffer state: not a format_version 1 object");
  RetryBuffer b(o);
  for (const auto& e : j["entries"])
    b.q_.push_back({e.at("problem"), e.at("failed_answer"), e.at("feedback"), e.at("reissues"), e.at("added_step")});
  MC_CHECK(b.q_.size() <= o.capacity, "retry buffer state: ", b.q_.size(), " entries exceed the capacity ", o.capacity);
  std::istringstream rng(j["rng"].get<std::string>());
  rng >> b.rng_;
  MC_CHECK(!rng.fail(), "retry buffer state: unreadable random state");
  const auto& c = j.at("counters");
  b.c_ = {c.at("added"), c.at("evicted"), c.at("reissued"), c.at("repaired"), c.at("expired")};
  return b;
}

}  // namespace mc::rl
