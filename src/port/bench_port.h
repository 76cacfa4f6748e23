// `musacoder port-bench`: a KernelBench tree carried to MUSA. Every problem file goes through the
// Porter (KernelBench's problems name no device today, so they come out unchanged, and the
// manifest says so); files the caller adds (the prompt's ported one-shot example, a rendered
// prompt) are written beside them; hardware-bound data (KernelBench's baseline timings, which
// are CUDA GPUs' times) is not carried, and the manifest names what was left and why. The
// manifest records every change and warning, file by file, with the rules that made them.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "port/porter.h"

namespace mc::port {

struct ExtraFile {
  std::string path;       // relative to the output folder
  std::string text;       // as written
  std::string from;       // what it was made from (for the manifest)
  PortResult port;        // the port that made it ({} where it was not ported)
};

// The problem folders of a KernelBench checkout: `root/levelN`, or `root/KernelBench/levelN`
// (the repository's root). Throws mc::Error naming root when there are none.
std::vector<std::string> kernelbench_levels(const std::string& root);

// Ports every level's files into out/levelN/ (same names), writes the extras, and returns the
// manifest, also written to out/manifest.json. Refuses an out that is inside root or holds
// files other than an earlier port's.
nlohmann::json port_benchmark(const std::string& root, const std::string& out, const Porter& porter,
                              const RuleTable& table, const std::vector<ExtraFile>& extras);

// The summary table of a manifest: one line per level, and the totals.
std::string port_bench_table(const nlohmann::json& manifest);

}  // namespace mc::port
