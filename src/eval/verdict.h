// What MooreEval decides about one candidate. Enum values cross the wire as strings and are
// append-only: add new ones at the end, never rename.
#pragma once

#include <optional>
#include <string>

namespace mc::eval {

enum class Verdict {
  kOk,               // compiled, correct on every trial, legal, timed
  kExtractError,     // no usable code in the answer
  kStaticViolation,  // a static legality rule fired (no GPU touched)
  kCompileError,     // nvcc / host compiler rejected the sources
  kLoadError,        // import, extension load or ModelNew construction failed or crashed
  kRuntimeError,     // forward raised, crashed the process (illegal address, abort...)
  kTimeout,          // a stage ran past its wall-clock limit (hang, infinite loop)
  kIncorrect,        // ran, but outputs did not match the reference on some trial
  kIllegal,          // a run-time legality rule fired (torch compute, no own kernel, ...)
  kTimingError,      // outputs of timed runs were wrong, or the timing was inconsistent
  kInfraError,       // the verifier itself failed: never a score of the candidate
  kCompiled,         // compile-only job: it compiled; nothing was executed (no reward)
};

// Pipeline stages in order; a row names the stage its candidate stopped at.
enum class Stage { kExtract, kStatic, kCompile, kLoad, kCorrectness, kLegality, kTiming, kDone };

const char* to_string(Verdict v);
const char* to_string(Stage s);
std::optional<Verdict> verdict_from_string(const std::string& s);
std::optional<Stage> stage_from_string(const std::string& s);

// The stage a verdict belongs to when it is the final one.
Stage stage_of(Verdict v);

}  // namespace mc::eval
