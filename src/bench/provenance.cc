#include "bench/provenance.h"

#include <filesystem>
#include <regex>

#include "common/fs.h"

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

// Whether two paths name the same benchmark: one holds the other (a checkout and its
// KernelBench/ folder, or a level folder).
bool same_benchmark(const fs::path& a, const fs::path& b) {
  auto ca = fs::weakly_canonical(a).string(), cb = fs::weakly_canonical(b).string();
  return ca == cb || ca.starts_with(cb + "/") || cb.starts_with(ca + "/");
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
  int clean = 0, other = 0, dirty = 0, unknown = 0;
  std::string others;
  for (const auto& d : data) {
    fs::path report = fs::path(d.get<std::string>()).parent_path() / "report.json";
    json r = fs::exists(report) ? json::parse(read_file(report), nullptr, false) : json();
    if (!r.is_object() || !r.contains("families")) {  // not a `musacoder synth` report
      ++unknown;
    } else if (!r.contains("decontamination")) {
      ++dirty;
    } else if (same_benchmark(r["decontamination"].value("benchmark", ""), problems)) {
      ++clean;
    } else {
      ++other;
      others = r["decontamination"].value("benchmark", "?");
    }
  }
  std::string files = std::to_string(data.size()) + " training file(s) named in " + state.string();
  if (dirty) return note("not_decontaminated", files + ": synthesized without --decontaminate.", data);
  if (other) return note("other_benchmark", files + ": decontaminated against " + others + ", not against " + problems + ".", data);
  if (unknown) return note("unknown", files + ": " + std::to_string(unknown) + " of them without a `musacoder synth` report.", data);
  return note("decontaminated", files + ": all synthesized by `musacoder synth --decontaminate` against these problems.", data);
}

}  // namespace mc::bench
