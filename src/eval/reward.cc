#include "eval/reward.h"

#include <algorithm>

namespace mc::eval {

std::optional<double> compute_reward(const EvalResult& r, const RewardParams& p) {
  switch (r.verdict) {
    case Verdict::kInfraError:
    case Verdict::kCompiled:  // not judged: a compile-only job earns nothing either way
      return std::nullopt;
    case Verdict::kOk: {
      double nu = (r.speedup && !r.speedup_flagged) ? *r.speedup : 1.0;
      return 1.0 + p.lambda * std::min(std::max(nu - 1.0, 0.0), p.nu_max);
    }
    case Verdict::kIncorrect:
    case Verdict::kRuntimeError:
    case Verdict::kTimeout: {
      if (r.trials_total <= 0 || r.trials_passed <= 0) return -1.0;
      double q = static_cast<double>(r.trials_passed) / r.trials_total;
      return q >= 1.0 ? -1.0 : -0.5 + 0.5 * q;
    }
    default:  // extract, static, compile, load, illegal, timing forgery
      return -1.0;
  }
}

}  // namespace mc::eval
