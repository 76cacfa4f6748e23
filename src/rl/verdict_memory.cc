#include "rl/verdict_memory.h"

#include "common/hash.h"

namespace mc::rl {

std::string problem_identity(const eval::Problem& p) { return p.key + "@" + sha256_hex(p.source).substr(0, 16); }

const eval::EvalResult* VerdictMemory::find(const std::string& problem, const std::string& answer) const {
  auto it = by_answer_.find({problem, answer});
  return it == by_answer_.end() ? nullptr : &it->second;
}

void VerdictMemory::remember(const std::string& problem, const std::string& answer, const eval::EvalResult& r) {
  if (capacity_ == 0 || r.is_infra() || !r.reward || !judged_here(r)) return;
  Key k{problem, answer};
  auto [it, fresh] = by_answer_.insert_or_assign(k, r);
  (void)it;
  if (!fresh) return;
  order_.push_back(std::move(k));
  while (order_.size() > capacity_) {
    by_answer_.erase(order_.front());
    order_.pop_front();
  }
}

nlohmann::json VerdictMemory::to_json() const {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& k : order_) a.push_back({k.first, k.second, eval::to_json(by_answer_.at(k))});
  return a;
}

VerdictMemory VerdictMemory::from_json(const nlohmann::json& j, size_t capacity, std::string config_hash) {
  VerdictMemory m(capacity, std::move(config_hash));
  for (const auto& e : j) {
    eval::EvalResult r = eval::result_from_json(e.at(2));
    if (!m.judged_here(r)) {
      ++m.dropped_on_load_;
      continue;
    }
    m.remember(e.at(0).get<std::string>(), e.at(1).get<std::string>(), r);
  }
  return m;
}

}  // namespace mc::rl
