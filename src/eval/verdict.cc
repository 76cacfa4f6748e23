#include "eval/verdict.h"

#include <array>
#include <utility>

namespace mc::eval {
namespace {

constexpr std::array<std::pair<Verdict, const char*>, 12> kVerdictNames = {{
    {Verdict::kOk, "ok"},
    {Verdict::kExtractError, "extract_error"},
    {Verdict::kStaticViolation, "static_violation"},
    {Verdict::kCompileError, "compile_error"},
    {Verdict::kLoadError, "load_error"},
    {Verdict::kRuntimeError, "runtime_error"},
    {Verdict::kTimeout, "timeout"},
    {Verdict::kIncorrect, "incorrect"},
    {Verdict::kIllegal, "illegal"},
    {Verdict::kTimingError, "timing_error"},
    {Verdict::kInfraError, "infra_error"},
    {Verdict::kCompiled, "compiled"},
}};

constexpr std::array<std::pair<Stage, const char*>, 8> kStageNames = {{
    {Stage::kExtract, "extract"},
    {Stage::kStatic, "static"},
    {Stage::kCompile, "compile"},
    {Stage::kLoad, "load"},
    {Stage::kCorrectness, "correctness"},
    {Stage::kLegality, "legality"},
    {Stage::kTiming, "timing"},
    {Stage::kDone, "done"},
}};

}  // namespace

const char* to_string(Verdict v) {
  for (const auto& [k, name] : kVerdictNames)
    if (k == v) return name;
  return "unknown";
}

const char* to_string(Stage s) {
  for (const auto& [k, name] : kStageNames)
    if (k == s) return name;
  return "unknown";
}

std::optional<Verdict> verdict_from_string(const std::string& s) {
  for (const auto& [k, name] : kVerdictNames)
    if (s == name) return k;
  return std::nullopt;
}

std::optional<Stage> stage_from_string(const std::string& s) {
  for (const auto& [k, name] : kStageNames)
    if (s == name) return k;
  return std::nullopt;
}

Stage stage_of(Verdict v) {
  switch (v) {
    case Verdict::kOk: return Stage::kDone;
    case Verdict::kExtractError: return Stage::kExtract;
    case Verdict::kStaticViolation: return Stage::kStatic;
    case Verdict::kCompileError: return Stage::kCompile;
    case Verdict::kLoadError: return Stage::kLoad;
    case Verdict::kRuntimeError:
    case Verdict::kTimeout:
    case Verdict::kIncorrect: return Stage::kCorrectness;
    case Verdict::kIllegal: return Stage::kLegality;
    case Verdict::kTimingError: return Stage::kTiming;
    case Verdict::kInfraError: return Stage::kDone;
    case Verdict::kCompiled: return Stage::kCompile;
  }
  return Stage::kDone;
}

}  // namespace mc::eval
