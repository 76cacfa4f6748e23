#include "train/metrics.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/check.h"
#include "common/fs.h"

namespace mc::train {

MetricsLog::MetricsLog(const std::string& out_dir, int64_t resume_step, bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  path_ = (fs::path(out_dir) / "metrics.jsonl").string();
  // Keep the rows up to the resumed step; a fresh run starts an empty file.
  std::string kept;
  if (resume_step > 0 && fs::exists(path_)) {
    std::istringstream in(read_file(path_));
    std::string line;
    while (std::getline(in, line)) {
      try {
        if (nlohmann::json::parse(line).value("step", int64_t{0}) <= resume_step) kept += line + "\n";
      } catch (const nlohmann::json::exception&) {
        // A torn last line of a killed run.
      }
    }
  }
  write_file_atomic(path_, kept);
  tb_ = std::make_unique<TensorBoardWriter>((fs::path(out_dir) / "tensorboard").string());
}

void MetricsLog::log(const std::string& prefix, int64_t step, const nlohmann::json& row) {
  if (!enabled_) return;
  nlohmann::json r = row;
  r["step"] = step;
  r["kind"] = prefix;
  std::ofstream(path_, std::ios::app) << r.dump() << "\n";
  for (auto& [k, v] : row.items())
    if (v.is_number() && k != "step") tb_->scalar(prefix + "/" + k, v.get<double>(), step);
  tb_->flush();
}

}  // namespace mc::train
