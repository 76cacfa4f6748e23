#include "bench/provenance.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>
#include <set>
#include <utility>
#include <vector>

#include "common/fs.h"
#include "common/hash.h"
#include "eval/problem.h"

namespace mc::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json note(const std::string& status, const std::string& text, json data = json::array()) {
  return {{"status", status}, {"text", text}, {"data", std::move(data)}};
}

// The model folder's own trainer_state.json, or its newest checkpoint's (a run folder).
fs::path trainer_state(const fs::path& dir) {
  if (fs::exists(dir / "trainer_state.json")) return dir / "trainer_state.json";
  static const std::regex kStep("step-[0-9]+");
  fs::path best;
  if (fs::is_directory(dir / "checkpoints"))
    for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
      if (std::regex_match(e.path().filename().string(), kStep) && fs::exists(e.path() / "trainer_state.json") &&
          (best.empty() || e.path().filename() > best.parent_path().filename()))
        best = e.path() / "trainer_state.json";
  return best;
}

// A `musacoder synth` set is one folder holding problems/ and problems.jsonl: either names it.
fs::path set_folder(const fs::path& p) {
  fs::path c = fs::weakly_canonical(p);
  if (c.filename() == "problems.jsonl" || (c.filename() == "problems" && fs::exists(c.parent_path() / "report.json")))
    return c.parent_path();
  return c;
}

// Whether two paths name the same benchmark: one holds the other (a checkout and its
// KernelBench/ folder, or a level folder; a synthesized set's problems/ and problems.jsonl).
bool same_benchmark(const fs::path& a, const fs::path& b) {
  auto ca = set_folder(a).string(), cb = set_folder(b).string();
  return ca == cb || ca.starts_with(cb + "/") || cb.starts_with(ca + "/");
}

// What a `musacoder synth` report in `dir` was decontaminated against, one path per folder: the
// absolute path, or, where that is gone (the folder was made elsewhere and moved), the same path
// relative to `dir` if it exists. Empty when the report has no decontamination.
std::vector<std::string> decontaminated_against(const json& r, const fs::path& dir) {
  std::vector<std::string> out;
  if (!r.is_object() || !r.contains("decontamination")) return out;
  const json& d = r["decontamination"];
  auto resolve = [&](const std::string& abs, const std::string& rel) {
    if (!abs.empty() && fs::exists(abs)) return abs;
    if (!rel.empty() && fs::exists(dir / rel)) return fs::weakly_canonical(dir / rel).string();
    return abs;
  };
  if (d.contains("against") && d["against"].is_array()) {
    for (const auto& a : d["against"]) out.push_back(resolve(a.value("path", ""), a.value("relative", "")));
  } else {  // reports made before there could be several, with the absolute path only
    out.push_back(resolve(d.value("benchmark", ""), ""));
  }
  return out;
}

// The sha256 of every problem's source that `problems` holds (a folder of problems or a
// KernelBench checkout); empty where it holds none that load.
std::set<std::string> problem_sources(const std::string& problems) {
  std::set<std::string> out;
  if (!fs::is_directory(problems)) return out;
  try {
    for (const auto& p : eval::load_problems(problems)) out.insert(sha256_hex(p->source));
  } catch (const std::exception&) {
    out.clear();
  }
  return out;
}

// Whether a `musacoder synth` report was decontaminated against every one of `evaluated` by
// content: a folder it names lists each of them among its problems' hashes. So a copy of the
// benchmark at another path (a checkout carried to /tmp) is still known (evaluations of a carried
// KernelBench once named it "other").
bool holds_by_content(const json& r, const std::set<std::string>& evaluated) {
  if (evaluated.empty() || !r.is_object() || !r.contains("decontamination")) return false;
  const json& d = r["decontamination"];
  if (!d.contains("against") || !d["against"].is_array()) return false;
  for (const auto& a : d["against"]) {
    if (!a.contains("problem_sha256") || !a["problem_sha256"].is_array()) continue;
    std::set<std::string> have;
    for (const auto& h : a["problem_sha256"])
      if (h.is_string()) have.insert(h.get<std::string>());
    if (std::includes(have.begin(), have.end(), evaluated.begin(), evaluated.end())) return true;
  }
  return false;
}

bool any_same(const std::vector<std::string>& paths, const fs::path& b) {
  for (const auto& a : paths)
    if (!a.empty() && same_benchmark(a, b)) return true;
  return false;
}

std::string joined(const std::vector<std::string>& paths) {
  std::string s;
  for (const auto& p : paths) s += (s.empty() ? "" : ", ") + p;
  return s;
}

// A folder's report.json (any command's), else null.
json folder_report(const fs::path& dir) {
  fs::path report = dir / "report.json";
  json r = fs::exists(report) ? json::parse(read_file(report), nullptr, false) : json();
  return r.is_object() ? r : json();
}

bool is_synth_report(const json& r) { return r.is_object() && r.contains("families"); }

// A folder's `musacoder synth` report.json, else null.
json synth_report(const fs::path& dir) {
  json r = folder_report(dir);
  return is_synth_report(r) ? r : json();
}

// The `musacoder synth` folder behind a training file, with its report: its own folder, or, for
// `musacoder rft`'s dataset and repair rows, the folder of the problems that run sampled from
// (its report.json's problems_source). An empty folder where neither is one.
std::pair<fs::path, json> synth_folder(const fs::path& data_file) {
  const fs::path dir = data_file.parent_path();
  json j = folder_report(dir);
  if (is_synth_report(j)) return {dir, j};
  if (j.contains("problems_source") && j["problems_source"].is_string()) {
    fs::path src = fs::path(j["problems_source"].get<std::string>()).parent_path();
    if (json r = synth_report(src); !r.is_null()) return {src, r};
  }
  return {};
}

// What the evaluated problems were decontaminated against, when `musacoder synth` made them
// (a problems.jsonl or its problems/ folder): empty otherwise.
std::vector<std::string> eval_set_against(const std::string& problems) {
  fs::path p(problems);
  std::vector<fs::path> dirs = {p.parent_path()};  // a problems.jsonl's folder, or a problems/ folder's parent
  if (fs::is_directory(p)) dirs.insert(dirs.begin(), p);
  for (const fs::path& dir : dirs) {
    json r = synth_report(dir);
    if (!r.is_null() && r.contains("decontamination")) return decontaminated_against(r, dir);
  }
  return {};
}

}  // namespace

json decontamination_note(const std::string& model_dir, const std::string& problems) {
  if (model_dir.empty()) return note("unknown", "The model was reached through an endpoint: its training data is not known here.");
  fs::path state = trainer_state(model_dir);
  if (state.empty())
    return note("unknown", "No trainer_state.json in " + model_dir + ": not a MusaCoder training checkpoint, so its data is not known.");
  json st = json::parse(read_file(state), nullptr, false);
  json data = json::array();
  if (st.is_object() && st.contains("fingerprint")) {
    const json& f = st["fingerprint"];
    if (f.contains("data") && f["data"].is_array())
      for (const auto& d : f["data"])
        if (d.contains("path")) data.push_back(d["path"]);
    if (f.contains("problems") && f["problems"].is_string()) data.push_back(f["problems"]);
  }
  if (data.empty()) return note("unknown", state.string() + " names no training data.");
  int clean = 0, by_content = 0, kept_out = 0, other = 0, dirty = 0, unknown = 0;
  std::string others;
  // Held-out problems synthesized against the training problems (`synth --decontaminate
  // TRAIN/problems`, as the recipe makes them) are clean the other way round.
  const std::vector<std::string> eval_against = eval_set_against(problems);
  // The evaluated problems' hashes, computed the first time a path does not tell.
  std::optional<std::set<std::string>> evaluated;
  auto evaluated_sources = [&]() -> const std::set<std::string>& {
    if (!evaluated) evaluated = problem_sources(problems);
    return *evaluated;
  };
  for (const auto& d : data) {
    const auto [train_dir, r] = synth_folder(d.get<std::string>());
    if (!train_dir.empty() && any_same(eval_against, train_dir)) {
      ++kept_out;
    } else if (r.is_null()) {  // not a `musacoder synth` report
      ++unknown;
    } else if (!r.contains("decontamination")) {
      ++dirty;
    } else if (any_same(decontaminated_against(r, train_dir), problems)) {
      ++clean;
    } else if (holds_by_content(r, evaluated_sources())) {
      ++clean, ++by_content;
    } else {
      ++other;
      others = joined(decontaminated_against(r, train_dir));
    }
  }
  std::string files = std::to_string(data.size()) + " training file(s) named in " + state.string();
  if (dirty) return note("not_decontaminated", files + ": synthesized without --decontaminate.", data);
  if (other) return note("other_benchmark", files + ": decontaminated against " + others + ", not against " + problems + ".", data);
  if (unknown) return note("unknown", files + ": " + std::to_string(unknown) + " of them without a `musacoder synth` report.", data);
  std::string how;
  if (clean)
    how = std::to_string(clean) + " synthesized by `musacoder synth --decontaminate` against these problems" +
          (by_content ? " (" + std::to_string(by_content) + " of them by content: the same problems at another path)" : "");
  if (kept_out)
    how += (how.empty() ? "" : "; ") + std::to_string(kept_out) + " kept out of them: the evaluated problems were "
           "synthesized with --decontaminate against " + joined(eval_against);
  return note("decontaminated", files + ": " + how + ".", data);
}

}  // namespace mc::bench
