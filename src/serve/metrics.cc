#include "serve/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace mc::serve {

void Metrics::job_done(const std::string& verdict, double latency_s) {
  std::lock_guard lk(mu_);
  ++verdicts_[verdict];
  if (latency_s >= 0) {
    window_.push_back(latency_s);
    if (window_.size() > kWindow) window_.pop_front();
  }
}

void Metrics::http_answer(int status) {
  std::lock_guard lk(mu_);
  ++http_[status];
}

void Metrics::submitted(size_t n) {
  std::lock_guard lk(mu_);
  submitted_ += n;
}

void Metrics::cached_hit(size_t n) {
  std::lock_guard lk(mu_);
  cached_ += n;
}

Metrics::Latency Metrics::latency() const {
  std::vector<double> v;
  {
    std::lock_guard lk(mu_);
    v.assign(window_.begin(), window_.end());
  }
  Latency l;
  l.n = v.size();
  if (v.empty()) return l;
  std::sort(v.begin(), v.end());
  auto q = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))]; };
  l.p50 = q(0.5);
  l.p90 = q(0.9);
  l.p99 = q(0.99);
  l.max = v.back();
  return l;
}

std::map<std::string, uint64_t> Metrics::verdicts() const {
  std::lock_guard lk(mu_);
  return verdicts_;
}

std::string Metrics::prometheus(const std::map<std::string, double>& gauges) const {
  std::string out;
  for (const auto& [name, v] : gauges) out += fmt::format("{} {}\n", name, v);
  Latency l = latency();
  std::lock_guard lk(mu_);
  out += "# TYPE mooreeval_results_total counter\n";
  for (const auto& [v, n] : verdicts_)
    out += fmt::format("mooreeval_results_total{{verdict=\"{}\"}} {}\n", v, n);
  out += "# TYPE mooreeval_http_responses_total counter\n";
  for (const auto& [code, n] : http_)
    out += fmt::format("mooreeval_http_responses_total{{code=\"{}\"}} {}\n", code, n);
  out += fmt::format("mooreeval_jobs_submitted_total {}\n", submitted_);
  out += fmt::format("mooreeval_jobs_cached_total {}\n", cached_);
  out += "# TYPE mooreeval_job_latency_seconds summary\n";
  out += fmt::format("mooreeval_job_latency_seconds{{quantile=\"0.5\"}} {:.6f}\n", l.p50);
  out += fmt::format("mooreeval_job_latency_seconds{{quantile=\"0.9\"}} {:.6f}\n", l.p90);
  out += fmt::format("mooreeval_job_latency_seconds{{quantile=\"0.99\"}} {:.6f}\n", l.p99);
  out += fmt::format("mooreeval_job_latency_seconds_count {}\n", l.n);
  return out;
}

}  // namespace mc::serve
