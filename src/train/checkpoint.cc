#include "train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>

#include "common/check.h"
#include "common/fs.h"
#include "model/safetensors.h"

namespace mc::train {
namespace {

std::string optimizer_file(int rank, int world) { return fmt::format("optimizer-rank{:05d}-of-{:05d}.safetensors", rank, world); }

std::vector<CheckpointInfo> list_checkpoints(const fs::path& root) {
  std::vector<CheckpointInfo> out;
  if (!fs::is_directory(root)) return out;
  static const std::regex name(R"(step-(\d{8}))");
  for (const auto& e : fs::directory_iterator(root)) {
    std::smatch m;
    std::string f = e.path().filename().string();
    if (e.is_directory() && std::regex_match(f, m, name) && fs::exists(e.path() / "trainer_state.json"))
      out.push_back({e.path().string(), std::stoll(m[1])});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

// Copies the tokenizer and generation files so the checkpoint is a model directory on its own.
void copy_model_files(const fs::path& from, const fs::path& to) {
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json", "vocab.json",
                        "merges.txt", "chat_template.jinja"})
    if (fs::exists(from / f)) fs::copy_file(from / f, to / f, fs::copy_options::overwrite_existing);
}

void fsync_dir_files(const fs::path& dir) {
  // Data reaches the disk before the rename makes the checkpoint visible.
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    FILE* f = std::fopen(e.path().c_str(), "rb");
    if (f) {
      ::fsync(fileno(f));
      std::fclose(f);
    }
  }
}

}  // namespace

std::optional<CheckpointInfo> latest_checkpoint(const std::string& out_dir) {
  auto all = list_checkpoints(fs::path(out_dir) / "checkpoints");
  if (all.empty()) return std::nullopt;
  return all.back();
}

void save_checkpoint(const std::string& out_dir, int64_t step, const model::QwenModel& model, const std::string& source_model_dir,
                     ShardedAdamW& opt, const nlohmann::json& state, Distributed& dist, int keep_last,
                     const std::function<void(const std::string& dir)>& write_extra) {
  fs::path root = fs::path(out_dir) / "checkpoints";
  std::string name = fmt::format("step-{:08d}", step);
  fs::path tmp = root / (".tmp-" + name), final_dir = root / name;
  if (dist.is_main()) {
    fs::create_directories(root);
    // Leftovers of a save that was killed.
    for (const auto& e : fs::directory_iterator(root))
      if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(e.path());
    fs::create_directories(tmp);
  }
  // Sharded weights: every rank takes part in gathering the layers rank 0 writes.
  opt.gather_weights();
  if (dist.is_main()) {
    // The model first: QwenModel::save clears *.safetensors in its folder.
    model.save(tmp.string(), model.dtype());
    copy_model_files(source_model_dir, tmp);
    std::ofstream((tmp / "trainer_state.json").string()) << state.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  opt.release_weights();
  dist.barrier();
  // Every rank: its optimizer shard.
  auto st = opt.state();
  std::vector<model::TensorView> views;
  for (auto& [n, t] : st) {
    model::TensorView v;
    v.name = n;
    v.dtype = model::DType::kF32;
    v.shape = t.sizes().vec();
    v.data = static_cast<const uint8_t*>(t.data_ptr());
    v.nbytes = t.nbytes();
    views.push_back(v);
  }
  model::write_safetensors((tmp / optimizer_file(dist.rank(), dist.world())).string(), views,
                           {{"layout", opt.layout_signature()}, {"step", std::to_string(step)}});
  if (write_extra) write_extra(tmp.string());
  dist.barrier();
  if (dist.is_main()) {
    fsync_dir_files(tmp);
    if (fs::exists(final_dir)) fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
    auto all = list_checkpoints(root);
    for (size_t i = 0; keep_last > 0 && i + keep_last < all.size(); ++i) fs::remove_all(all[i].dir);
  }
  dist.barrier();
}

nlohmann::json load_checkpoint(const CheckpointInfo& ckpt, ShardedAdamW& opt, Distributed& dist) {
  fs::path dir(ckpt.dir);
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(read_file(dir / "trainer_state.json"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat((dir / "trainer_state.json").string(), ": not valid JSON: ", e.what()));
  }
  fs::path shard = dir / optimizer_file(dist.rank(), dist.world());
  MC_CHECK(fs::exists(shard), ckpt.dir, " was written by ", state.value("world_size", 0), " rank(s); this run has ", dist.world(),
           " (resume with the same number of ranks)");
  model::SafetensorsFile f(shard.string());
  auto layout = f.metadata().count("layout") ? f.metadata().at("layout") : "";
  MC_CHECK(layout == opt.layout_signature(), shard.string(), " belongs to another optimizer layout (", layout, ") than this run's (",
           opt.layout_signature(), "): the model, --bucket-mb or --shard changed");
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& v : f.tensors())
    tensors.emplace_back(v.name, at::from_blob(const_cast<uint8_t*>(v.data), v.shape, at::kFloat).clone());
  opt.load_state(tensors);
  return state;
}

}  // namespace mc::train
