#include "train/profiler.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "common/check.h"
#include "common/fs.h"

namespace mc::train {
namespace {

using nlohmann::json;
namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

struct Sum {
  int64_t calls = 0;
  double total_us = 0;
};

// Rows of a table, largest total first.
std::vector<std::pair<std::string, Sum>> largest(const std::map<std::string, Sum>& m, int top) {
  std::vector<std::pair<std::string, Sum>> v(m.begin(), m.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.total_us > b.second.total_us; });
  if (static_cast<int>(v.size()) > top) v.resize(static_cast<size_t>(top));
  return v;
}

// Kernel names from templates run to hundreds of characters; a table cell keeps the start.
std::string cell(const std::string& s) {
  std::string t = s.size() > 110 ? s.substr(0, 107) + "..." : s;
  std::string out;
  for (char c : t) out += c == '|' ? '/' : c;
  return out;
}

json table_json(const std::vector<std::pair<std::string, Sum>>& rows) {
  json a = json::array();
  for (const auto& [n, s] : rows) a.push_back({{"name", n}, {"calls", s.calls}, {"total_ms", s.total_us / 1e3}});
  return a;
}

}  // namespace

json engine_phases(const gen::EngineStats& d) {
  const double decode_s = d.step_wall_ms / 1e3, model_s = d.decode_gpu_ms / 1e3, sample_s = d.sample_gpu_ms / 1e3;
  return json::array(
      {{{"name", "decode: the model's GPU time"}, {"s", model_s}, {"of", "generate"}},
       {{"name", "decode: sampling's GPU time"}, {"s", sample_s}, {"of", "generate"}},
       {{"name", "decode: the rest of the step (host, copies)"}, {"s", std::max(0.0, decode_s - model_s - sample_s)}, {"of", "generate"}},
       {{"name", "prefill"}, {"s", d.prefill_wall_ms / 1e3}, {"of", "generate"}}});
}

RegionProfiler::RegionProfiler(bool cuda) : cuda_(cuda) {
  impl::ProfilerConfig cfg(impl::ProfilerState::KINETO);
  std::set<impl::ActivityType> acts{impl::ActivityType::CPU};
  if (cuda) acts.insert(impl::ActivityType::CUDA);
  prof::prepareProfiler(cfg, acts);
  prof::enableProfiler(cfg, acts);
  running_ = true;
}

RegionProfiler::~RegionProfiler() {
  if (running_) {
    try {
      (void)prof::disableProfiler();
    } catch (...) {
    }
  }
}

json RegionProfiler::stop(const std::string& base, const std::string& title, const json& phases, bool trace, int top) {
  MC_INTERNAL_ASSERT(running_, "profiler stopped twice");
  auto result = prof::disableProfiler();
  running_ = false;
  std::map<std::string, Sum> kernels, ops, runtime;
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // GPU intervals [start, end) in ns
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& e : result->events()) {
    const double us = static_cast<double>(e.durationNs()) / 1e3;
    const std::string name = e.name();
    first = std::min(first, e.startNs());
    last = std::max(last, e.endNs());
    Sum* s;
    if (e.deviceType() == c10::DeviceType::CUDA) {
      s = &kernels[name];
      busy.emplace_back(e.startNs(), e.endNs());
    } else if (name.rfind("cuda", 0) == 0) {
      s = &runtime[name];
    } else {
      s = &ops[name];
    }
    ++s->calls;
    s->total_us += us;
  }
  std::sort(busy.begin(), busy.end());
  double busy_ns = 0;
  uint64_t cur_s = 0, cur_e = 0;
  for (const auto& [s, e] : busy) {
    if (s > cur_e) {
      busy_ns += static_cast<double>(cur_e - cur_s);
      cur_s = s;
      cur_e = e;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  busy_ns += static_cast<double>(cur_e - cur_s);
  const double span_s = last > first ? static_cast<double>(last - first) / 1e9 : 0.0;
  double kernel_us = 0;
  for (const auto& [n, s] : kernels) kernel_us += s.total_us;

  auto k_rows = largest(kernels, top), o_rows = largest(ops, top), r_rows = largest(runtime, top);
  json out = {{"title", title},
              {"phases", phases},
              {"events", result->events().size()},
              {"span_s", span_s},
              {"gpu_busy_s", busy_ns / 1e9},
              {"gpu_busy_share", span_s > 0 ? busy_ns / 1e9 / span_s : 0.0},
              {"gpu_activity_s", kernel_us / 1e6},
              {"kernels", table_json(k_rows)},
              {"host_ops", table_json(o_rows)},
              {"cuda_runtime", table_json(r_rows)}};

  std::string md = fmt::format("# Profile: {}\n\n", title);
  if (phases.is_array() && !phases.empty()) {
    // Top-level phases (no "of") and their parts; the largest of each is what to look at first.
    std::string big, big_part;
    double big_s = -1, big_part_s = -1;
    for (const auto& p : phases)
      if (p.value("of", "").empty() && p.value("s", 0.0) > big_s) big_s = p.value("s", 0.0), big = p.value("name", "");
    for (const auto& p : phases)
      if (p.value("of", "") == big && p.value("s", 0.0) > big_part_s) big_part_s = p.value("s", 0.0), big_part = p.value("name", "");
    md += "| phase | seconds |\n| --- | ---: |\n";
    for (const auto& p : phases) {
      const bool part = !p.value("of", "").empty();
      md += fmt::format("| {}{} | {:.2f} |\n", part ? "&nbsp;&nbsp;&nbsp;" : "", p.value("name", ""), p.value("s", 0.0));
    }
    md += fmt::format("\n**Largest cost: {}** ({:.1f} s)", big, big_s);
    if (!big_part.empty()) md += fmt::format(", within it **{}** ({:.1f} s)", big_part, big_part_s);
    md += ".\n\n";
    out["largest"] = {{"phase", big}, {"part", big_part}};
  }
  if (cuda_)
    md += fmt::format(
        "This process's GPU work: busy {:.2f} s of the {:.2f} s profiled ({:.0f}%), {} kernels and copies taking {:.2f} s "
        "(overlapping streams counted once in the busy time). Other processes on the GPU (MooreEval's judges) are not "
        "recorded.\n\n",
        busy_ns / 1e9, span_s, span_s > 0 ? 100 * busy_ns / 1e9 / span_s : 0.0, busy.size(), kernel_us / 1e6);
  auto table = [&](const std::string& head, const std::vector<std::pair<std::string, Sum>>& rows, double whole_us) {
    if (rows.empty()) return;
    md += fmt::format("## {}\n\n| name | calls | total ms | mean us |{}\n| --- | ---: | ---: | ---: |{}\n", head,
                      whole_us > 0 ? " share |" : "", whole_us > 0 ? " ---: |" : "");
    for (const auto& [n, s] : rows) {
      md += fmt::format("| {} | {} | {:.1f} | {:.1f} |", cell(n), s.calls, s.total_us / 1e3, s.total_us / std::max<int64_t>(1, s.calls));
      if (whole_us > 0) md += fmt::format(" {:.1f}% |", 100 * s.total_us / whole_us);
      md += "\n";
    }
    md += "\n";
  };
  table("GPU kernels and copies by total time", k_rows, kernel_us);
  table("Host: PyTorch ops by total time (inclusive of the ops they call)", o_rows, 0);
  table("Host: CUDA runtime calls by total time", r_rows, 0);

  fs::create_directories(fs::path(base).parent_path());
  write_file_atomic(base + ".md", md);
  write_file_atomic(base + ".json", out.dump(1) + "\n");
  if (trace) result->save(base + ".trace.json");
  return out;
}

}  // namespace mc::train
