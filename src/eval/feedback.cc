#include "eval/feedback.h"

#include <fmt/format.h>

namespace mc::eval {
namespace {

std::string tail_lines(const std::string& s, size_t max_lines) {
  size_t pos = s.size(), n = 0;
  while (pos > 0 && n <= max_lines) {
    pos = s.rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
    ++n;
  }
  return s.substr(pos == 0 ? 0 : pos + 1);
}

}  // namespace

std::string make_feedback(const EvalResult& r) {
  switch (r.verdict) {
    case Verdict::kExtractError:
      return "No usable code: " + r.reason +
             ". Answer with one code block holding the complete solution (class ModelNew).";
    case Verdict::kStaticViolation: {
      std::string s = "The solution breaks the rules:\n";
      for (const auto& v : r.violations)
        s += fmt::format("- [{}] line {}: {}\n    {}\n", v.rule, v.line, v.message, v.snippet);
      return s;
    }
    case Verdict::kCompileError:
      return "Compilation failed:\n" + r.compile_log;
    case Verdict::kLoadError:
      return "Loading the module or constructing ModelNew failed: " + r.reason + "\n" +
             tail_lines(r.runtime_error, 15);
    case Verdict::kRuntimeError:
      return "Running forward failed: " + r.reason + "\n" + tail_lines(r.runtime_error, 15);
    case Verdict::kTimeout:
      return "Time limit exceeded: " + r.reason + " (an infinite loop or a deadlock?)";
    case Verdict::kIncorrect: {
      std::string s = fmt::format("Wrong result: {} of {} trials matched the reference.\n",
                                  r.trials_passed, r.trials_total);
      const auto& m = r.mismatch;
      if (m.is_object()) {
        std::string kind = m.value("kind", "");
        if (kind == "shape" || kind == "dtype" || kind == "output_count")
          s += fmt::format("Output {} has {} {}, expected {}.\n", m.value("output", 0), kind,
                           m["got"].dump(), m["expected"].dump());
        else
          s += fmt::format(
              "First mismatch in trial {} ({} inputs), output {} at index {}: expected {}, got {}; "
              "{} of {} elements differ; max abs error {}, max rel error {}.\n",
              m.value("trial", 0), m.value("variant", std::string("native")), m.value("output", 0),
              m.value("index", nlohmann::json::array()).dump(), m["expected"].dump(),
              m["got"].dump(), m.value("mismatched", 0), m.value("total", 0),
              m.value("max_abs_error", nlohmann::json()).dump(),
              m.value("max_rel_error", nlohmann::json()).dump());
        if (m.value("variant", std::string("native")) != "native")
          s += "Inputs in this trial were not restricted to [0, 1): check negative and large "
               "values.\n";
      }
      return s;
    }
    case Verdict::kIllegal:
      return "Illegal solution [" + r.rule + "]: " + r.reason +
             ". Compute the result with your own CUDA kernels in forward.";
    case Verdict::kTimingError:
      return "Rejected during timing [" + r.rule + "]: " + r.reason;
    case Verdict::kInfraError:
      return "";  // not the candidate's fault: nothing to repair
    case Verdict::kCompiled:
      return "It compiles (compile-only check: nothing was run).";
    case Verdict::kOk: {
      std::string s = "Correct and legal.";
      if (r.speedup && r.candidate_time && r.reference_time)
        s += fmt::format(" Your kernel: {:.1f} us (median), PyTorch eager: {:.1f} us, speedup "
                         "{:.2f}x.",
                         r.candidate_time->median_us, r.reference_time->median_us, *r.speedup);
      if (r.speedup_flagged) s += " The speedup is implausibly large and was flagged for review.";
      return s;
    }
  }
  return "";
}

}  // namespace mc::eval
