#include "eval/selftest.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "common/check.h"

namespace mc::eval {

namespace {

// Shared by every variant: the reference module, kept as self.impl (so every parameter name
// differs from the reference's), and float casts that leave integer tensors alone.
constexpr const char* kPrelude = R"PY(# musacoder selftest candidate: {variant}
import importlib.util

import torch
import torch.nn as nn

_spec = importlib.util.spec_from_file_location("mc_selftest_reference", {path})
_ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ref)


def _cast(v, dtype, device=None):
    if isinstance(v, torch.Tensor):
        if v.is_floating_point():
            return v.to(device=device or v.device, dtype=dtype)
        return v.to(device or v.device)
    if isinstance(v, (list, tuple)):
        return type(v)(_cast(x, dtype, device) for x in v)
    return v


def _floats(v, fn):
    if isinstance(v, torch.Tensor):
        return fn(v) if v.is_floating_point() else v
    if isinstance(v, (list, tuple)):
        return type(v)(_floats(x, fn) for x in v)
    return v


def _dtype(xs):
    for x in xs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.dtype
    return torch.get_default_dtype()


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.impl = _ref.Model(*args, **kwargs)

    def _call(self, xs, dtype, device=None):
        state = {{n: _cast(t, dtype, device) for n, t in self.impl.state_dict(keep_vars=True).items()}}
        return torch.func.functional_call(self.impl, state, tuple(_cast(list(xs), dtype, device)))

    def forward(self, *xs):
        dt = _dtype(xs)
{body})PY";

const std::map<std::string, std::string>& bodies() {
  static const std::map<std::string, std::string> b = {
      // A forward that makes float32 tensors of its own (LSTMs and GRUs of level 3 draw their
      // initial state with torch.randn in forward) cannot run in float64 throughout, and a
      // float64 draw would differ from the reference's: such problems keep their dtype.
      // At published sizes the float64 copies (inputs, intermediates, outputs: 5-7x a 6 GB
      // input) may not fit beside the verifier: then the same float64 computation on the host.
      {"fp64",
       "        try:\n"
       "            try:\n"
       "                return _cast(self._call(xs, torch.float64), dt)\n"
       "            except torch.OutOfMemoryError:\n"
       "                pass\n"
       "            torch.cuda.empty_cache()\n"
       "            dev = next(x.device for x in xs if isinstance(x, torch.Tensor))\n"
       "            return _cast(self._call(xs, torch.float64, torch.device('cpu')), dt, dev)\n"
       "        except RuntimeError as e:\n"
       "            if 'dtype' not in str(e):\n"
       "                raise\n"
       "            return self.impl(*xs)\n"},
      {"reorder",
       "        dev = next((x.device for x in xs if isinstance(x, torch.Tensor)), torch.device('cpu'))\n"
       "        size = sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))\n"
       "        if dev.type == 'cuda' and size <= (256 << 20):\n"
       "            return _cast(self._call(xs, dt, torch.device('cpu')), dt, dev)\n"
       "        if dev.type == 'cuda':\n"
       "            with torch.backends.cudnn.flags(enabled=False):\n"
       "                return self.impl(*xs)\n"
       "        threads = torch.get_num_threads()\n"
       "        torch.set_num_threads(1)\n"
       "        try:\n"
       "            return self.impl(*xs)\n"
       "        finally:\n"
       "            torch.set_num_threads(threads)\n"},
      {"renamed", "        return self.impl(*xs)\n"},
      {"constant", "        return _floats(self.impl(*xs), lambda o: torch.full_like(o, 0.5))\n"},
      {"half", "        return _cast(self._call(xs, torch.float16), dt)\n"},
      {"off_by_one",
       "        return _floats(self.impl(*xs), lambda o: o.reshape(-1).roll(1).reshape(o.shape))\n"},
  };
  return b;
}

std::string py_string(const std::string& s) {
  std::string out = "r'";
  for (char c : s) {
    MC_CHECK(c != '\'' && c != '\n', "problem path unusable in a selftest candidate: ", s);
    out += c;
  }
  return out + "'";
}

}  // namespace

bool selftest_is_negative(const std::string& variant) {
  return std::find(kSelftestNegative.begin(), kSelftestNegative.end(), variant) !=
         kSelftestNegative.end();
}

std::string selftest_source(const std::string& problem_path, const std::string& variant) {
  auto it = bodies().find(variant);
  MC_CHECK(it != bodies().end(), "unknown selftest variant '", variant, "'");
  return fmt::format(fmt::runtime(kPrelude), fmt::arg("variant", variant),
                     fmt::arg("path", py_string(problem_path)), fmt::arg("body", it->second));
}

std::vector<Candidate> selftest_candidates(const std::vector<ProblemPtr>& problems,
                                           int negatives_per_level) {
  std::vector<Candidate> out;
  std::map<int, int> negatives;  // per level, so far
  for (const auto& p : problems) {
    std::vector<std::string> variants = kSelftestHonest;
    if (negatives[p->level] < negatives_per_level) {
      ++negatives[p->level];
      variants.insert(variants.end(), kSelftestNegative.begin(), kSelftestNegative.end());
    }
    for (const auto& v : variants) {
      Candidate c;
      c.problem = p;
      c.problem_ref = p->key;
      c.sample_id = v;
      c.answer = selftest_source(p->path, v);
      c.origin = "selftest:" + v;
      out.push_back(std::move(c));
    }
  }
  return out;
}

namespace {

// The largest relative_norm_error / relative_norm_tolerance over a row's outputs (the bounds of
// its last trial, judge_details.tolerance), 0 where none was recorded.
double norm_bound_used(const EvalResult& r) {
  double worst = 0;
  if (!r.judge_details.is_object() || !r.judge_details.contains("tolerance")) return 0;
  const auto& bounds = r.judge_details["tolerance"];
  if (!bounds.is_array()) return 0;
  for (const auto& b : bounds) {
    if (!b.is_object()) continue;
    auto err = b.find("relative_norm_error"), tol = b.find("relative_norm_tolerance");
    if (err == b.end() || tol == b.end() || !err->is_number() || !tol->is_number()) continue;
    if (tol->get<double>() > 0) worst = std::max(worst, err->get<double>() / tol->get<double>());
  }
  return worst;
}

}  // namespace

nlohmann::json selftest_report(const std::vector<EvalResult>& rows,
                               const std::vector<SelftestLevel>& levels, double total_wall_s) {
  struct Acc {
    std::set<std::string> problems;
    int honest = 0, honest_ok = 0, infra = 0, negatives = 0, negatives_rejected = 0;
    double peak = 0, exec_s = 0;
    // The honest row that came closest to its norm bound: error / bound, and which row.
    double closest = 0;
    nlohmann::json closest_row;
    nlohmann::json rejected = nlohmann::json::array(), accepted_negatives = nlohmann::json::array(),
                   infra_rows = nlohmann::json::array();
  };
  std::map<int, Acc> by_level;
  for (const auto& r : rows) {
    for (Acc* a : {&by_level[r.level], &by_level[-1]}) {
      a->problems.insert(r.problem_key);
      a->exec_s += r.exec_s;
      if (r.judge_details.is_object() && r.judge_details.contains("judge_peak_mem_bytes"))
        a->peak = std::max(a->peak, r.judge_details["judge_peak_mem_bytes"].get<double>());
      nlohmann::json what = {{"problem", r.problem_key}, {"variant", r.sample_id},
                             {"verdict", to_string(r.verdict)},
                             {"reason", r.is_infra() ? r.infra_error.substr(0, 300) : r.reason}};
      if (r.is_infra()) {
        ++a->infra;
        a->infra_rows.push_back(what);
      } else if (selftest_is_negative(r.sample_id)) {
        ++a->negatives;
        if (r.verdict != Verdict::kOk) ++a->negatives_rejected;
        else a->accepted_negatives.push_back(what);
      } else {
        ++a->honest;
        if (r.verdict == Verdict::kOk) ++a->honest_ok;
        else a->rejected.push_back(what);
        double ratio = norm_bound_used(r);
        if (r.verdict == Verdict::kOk && ratio > a->closest) {
          a->closest = ratio;
          a->closest_row = {{"problem", r.problem_key}, {"variant", r.sample_id}};
        }
      }
    }
  }
  nlohmann::json out = {{"levels", nlohmann::json::array()}};
  double total_wall = 0;
  for (const auto& l : levels) total_wall += l.wall_s;
  if (total_wall_s >= 0) total_wall = total_wall_s;
  auto row = [&](int level, double wall) {
    const Acc& a = by_level[level];
    return nlohmann::json{{"level", level < 0 ? nlohmann::json("all") : nlohmann::json(level)},
                          {"problems", a.problems.size()},
                          {"honest_judged", a.honest},
                          {"honest_accepted", a.honest_ok},
                          {"honest_rejected", a.rejected},
                          {"infra_errors", a.infra},
                          {"infra", a.infra_rows},
                          {"negatives", a.negatives},
                          {"negatives_rejected", a.negatives_rejected},
                          {"negatives_accepted", a.accepted_negatives},
                          {"closest_to_norm_bound", a.closest},
                          {"closest_row", a.closest_row},
                          {"wall_s", wall},
                          {"judge_exec_s", a.exec_s},
                          {"peak_judge_mem_gib", a.peak / (1 << 30)}};
  };
  for (const auto& l : levels) out["levels"].push_back(row(l.level, l.wall_s));
  out["all"] = row(-1, total_wall);
  out["passed"] = by_level[-1].rejected.empty() && by_level[-1].infra == 0 &&
                  by_level[-1].accepted_negatives.empty();
  return out;
}

std::string selftest_table(const nlohmann::json& report) {
  std::string s = fmt::format("{:<6}{:>9}{:>18}{:>8}{:>15}{:>9}{:>10}{:>12}\n", "level", "problems",
                              "honest ok/judged", "infra", "negatives rej", "wall s", "peak GiB",
                              "norm used");
  auto line = [&](const nlohmann::json& l) {
    std::string lv = l["level"].is_string() ? l["level"].get<std::string>()
                                            : std::to_string(l["level"].get<int>());
    s += fmt::format("{:<6}{:>9}{:>18}{:>8}{:>15}{:>9.1f}{:>10.1f}{:>11.2g}%\n", lv, l["problems"].get<int>(),
                     fmt::format("{}/{}", l["honest_accepted"].get<int>(), l["honest_judged"].get<int>()),
                     l["infra_errors"].get<int>(),
                     fmt::format("{}/{}", l["negatives_rejected"].get<int>(), l["negatives"].get<int>()),
                     l["wall_s"].get<double>(), l["peak_judge_mem_gib"].get<double>(),
                     100 * l.value("closest_to_norm_bound", 0.0));
  };
  for (const auto& l : report["levels"]) line(l);
  line(report["all"]);
  for (const char* k : {"honest_rejected", "infra", "negatives_accepted"})
    for (const auto& r : report["all"][k])
      s += fmt::format("  {:<18} {:<34} {:<11} {:<15} {}\n", k, r["problem"].get<std::string>(),
                       r["variant"].get<std::string>(), r["verdict"].get<std::string>(),
                       r["reason"].get<std::string>().substr(0, 160));
  const auto& all = report["all"];
  if (all.value("closest_to_norm_bound", 0.0) > 0)
    s += fmt::format("  norm used: the largest share of its relative-norm bound an accepted honest row "
                     "used ({} {})\n", all["closest_row"].value("problem", ""),
                     all["closest_row"].value("variant", ""));
  s += "  wall s: levels share one queue; a level's wall runs until its last verdict, all's is the run's\n";
  s += report["passed"].get<bool>() ? "selftest: PASS\n" : "selftest: FAIL\n";
  return s;
}

}  // namespace mc::eval
