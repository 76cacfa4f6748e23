// A profile of one region of a run (an RL step, say) with libtorch's own profiler (Kineto:
// PyTorch ops on the host, and with CUDA every kernel, copy and CUDA runtime call). Events are
// summed by name, and the summary names where the region's time went:
//
//   BASE.md    the caller's phases (seconds it measured itself), then the GPU's busy share of
//              the wall clock and the kernels by total time, then host ops and CUDA runtime
//              calls by total time (inclusive: an op's time holds the ops it calls)
//   BASE.json  the same numbers, for programs
//   BASE.trace.json  with `trace`: the whole Chrome trace (ui.perfetto.dev opens it). Large: a
//              generation step has every kernel of every decode step.
//
// Only the thread that starts the profile is recorded, with the CUDA work it launches; other
// processes on the GPU (MooreEval's judges) are not, so their share shows as the GPU's idle
// time here and as longer kernels, not by name.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "generate/engine.h"

namespace mc::train {

// A generation's parts from the engine's own clocks, as phases under "generate" for stop():
// decode steps' model and sampling GPU time, the rest of those steps (host, copies), prefill.
nlohmann::json engine_phases(const gen::EngineStats& d);

class RegionProfiler {
 public:
  // Starts profiling now, on this thread: CPU ops, and CUDA activity when `cuda`.
  explicit RegionProfiler(bool cuda);
  ~RegionProfiler();  // stops a profile that was not stopped (its events are dropped)
  RegionProfiler(const RegionProfiler&) = delete;
  RegionProfiler& operator=(const RegionProfiler&) = delete;

  // Stops, writes BASE.md and BASE.json (and BASE.trace.json with `trace`), returns the JSON.
  // `phases`: {name: seconds} the caller measured over the same region, shown first; `top`
  // rows per table.
  nlohmann::json stop(const std::string& base, const std::string& title, const nlohmann::json& phases, bool trace,
                      int top = 25);

 private:
  bool running_ = false;
  bool cuda_ = false;
};

}  // namespace mc::train
