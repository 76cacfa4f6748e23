// Service counters for /metrics (Prometheus text format): verdicts, HTTP answers by code,
// refused submissions, and job latency percentiles over a sliding window. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

namespace mc::serve {

class Metrics {
 public:
  void job_done(const std::string& verdict, double latency_s);  // latency < 0: unknown
  void http_answer(int status);
  void submitted(size_t n);
  void cached_hit(size_t n);

  struct Latency {
    size_t n = 0;
    double p50 = 0, p90 = 0, p99 = 0, max = 0;
  };
  Latency latency() const;
  std::map<std::string, uint64_t> verdicts() const;

  // Appends this object's series; `gauges` are added as given (name -> value).
  std::string prometheus(const std::map<std::string, double>& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> verdicts_;
  std::map<int, uint64_t> http_;
  uint64_t submitted_ = 0, cached_ = 0;
  std::deque<double> window_;  // latest latencies, seconds
  static constexpr size_t kWindow = 20000;
};

}  // namespace mc::serve
