#include "train/sft.h"

#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <ATen/Context.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/progress.h"
#include "model/device.h"
#include "model/qwen_model.h"
#include "tokenizer/bpe_tokenizer.h"
#include "train/batching.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/determinism.h"
#include "train/distributed.h"
#include "train/loss.h"
#include "train/metrics.h"
#include "train/token_loss.h"

namespace mc::train {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void check_writable(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  MC_CHECK(!ec, "cannot create the output folder ", dir, ": ", ec.message());
  fs::path probe = fs::path(dir) / ".write-test";
  {
    std::ofstream f(probe);
    MC_CHECK(f && (f << "ok") && f.flush(), "the output folder ", dir, " is not writable");
  }
  fs::remove(probe);
}

// Model FLOPs of a training step: 6 per parameter-token for the decoder's matrices, the LM head
// at the target tokens only (the others are never projected), and attention (4 * q_size per
// causal pair per layer forward, 3x for training).
double step_flops(const model::QwenConfig& c, double tokens, double loss_tokens, double pairs) {
  double layer = static_cast<double>(c.hidden_size) * (c.q_size() + 2 * c.kv_size()) +
                 static_cast<double>(c.q_size()) * c.hidden_size + 3.0 * c.hidden_size * c.intermediate_size;
  return 6.0 * layer * c.num_layers * tokens + 6.0 * static_cast<double>(c.vocab_size) * c.hidden_size * loss_tokens +
         12.0 * static_cast<double>(c.q_size()) * c.num_layers * pairs;
}

double peak_tflops_for(const std::string& name) {
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos || name.find("H800") != std::string::npos)
    return 989.0;
  if (name.find("A100") != std::string::npos || name.find("A800") != std::string::npos) return 312.0;
  return 0;
}

// Steps that E epochs take.
int64_t steps_for_epochs(const DataOrder& order, const std::vector<Example>& data, int64_t tokens_per_step, int64_t epochs) {
  DataPosition p;
  int64_t steps = 0;
  do {
    order.next_step(data, tokens_per_step, p);
    ++steps;
  } while (!(p.epoch == epochs - 1 && p.index >= static_cast<int64_t>(data.size())));
  return steps;
}

json data_fingerprint(const std::vector<std::string>& paths) {
  json j = json::array();
  for (const auto& p : paths) j.push_back({{"path", fs::absolute(p).string()}, {"bytes", fs::file_size(p)}});
  return j;
}

}  // namespace

SftResult run_sft(const SftOptions& o) {
  MC_CHECK(o.tokens_per_step > 0 && o.micro_batch_tokens > 0, "--tokens-per-step and --micro-batch-tokens must be positive");
  MC_CHECK(o.max_len <= o.micro_batch_tokens, "--max-len ", o.max_len, " exceeds --micro-batch-tokens ", o.micro_batch_tokens,
           ": an example must fit one micro-batch");
  MC_CHECK(o.max_steps > 0 || o.epochs > 0, "give --epochs or --max-steps");
  MC_CHECK(o.save_every >= 0 && o.eval_every >= 0 && o.keep_last >= 1, "--save-every and --eval-every must be >= 0, --keep >= 1");
  MC_CHECK(fs::is_regular_file(fs::path(o.model_dir) / "config.json"), "--model ", o.model_dir,
           " is not a model directory (no config.json)");
  MC_CHECK(fs::is_regular_file(fs::path(o.model_dir) / "tokenizer.json"), "--model ", o.model_dir,
           " has no tokenizer.json (training renders chat data with the model's own tokenizer)");
  DistEnv env = dist_env_from_environment();
  const bool main = env.rank == 0;
  // Before any CUDA work: cuBLAS reads its workspace setting when its handle is created.
  if (o.deterministic) {
    const std::string what = use_deterministic_algorithms();
    if (main) fmt::print(stderr, "sft: {}\n", what);
  }
  c10::Device device = model::parse_device(o.device, env.local_rank);
  check_writable(o.out_dir);
  std::optional<CheckpointInfo> ckpt;
  if (o.resume) {
    ckpt = latest_checkpoint(o.out_dir);
    MC_CHECK(ckpt, "--resume: no checkpoint under ", (fs::path(o.out_dir) / "checkpoints").string(),
             " (a run saves with --save-every N and at its end)");
  }
  Distributed dist(env, device);
  at::manual_seed(o.seed);

  auto tok = tok::BpeTokenizer::from_file((fs::path(o.model_dir) / "tokenizer.json").string());
  auto model = model::QwenModel::load(ckpt ? ckpt->dir : o.model_dir, device, model::parse_dtype(o.dtype));
  check_tokenizer_fits(tok, model.config().vocab_size, o.model_dir);
  DatasetStats stats;
  const auto chat = tok::read_chat_format(o.model_dir);  // the model's default system turn, if any
  auto data = load_examples(o.data, tok, o.max_len, &stats, chat);
  std::vector<Example> eval_data;
  if (!o.eval_data.empty()) eval_data = load_examples(o.eval_data, tok, o.max_len, nullptr, chat);
  if (main)
    fmt::print(stderr, "sft: {} examples ({} tokens, {} targets; {} truncated to {}, {} documents split into pieces of "
               "that length, {} without targets skipped), {} rank(s) on {}{}\n",
               data.size(), stats.tokens, stats.loss_tokens, stats.truncated, o.max_len, stats.split, stats.skipped_no_loss, dist.world(),
               model::device_name(device), dist.world() > 1 ? " over " + dist.backend_name() : "");

  ShardedAdamW opt(model, dist, o.adamw);
  DataOrder order(static_cast<int64_t>(data.size()), o.seed);
  LrSchedule sched = o.schedule;
  sched.total_steps = o.max_steps > 0 ? o.max_steps : steps_for_epochs(order, data, o.tokens_per_step, o.epochs);
  const json fingerprint = {{"data", data_fingerprint(o.data)}, {"seed", o.seed}, {"tokens_per_step", o.tokens_per_step},
                            {"max_len", o.max_len}};

  DataPosition pos;
  int64_t start = 0;
  double tokens_seen = 0, elapsed_before = 0;
  if (ckpt) {
    json st = load_checkpoint(*ckpt, opt, dist);
    for (auto& [k, v] : fingerprint.items())
      MC_CHECK(st["fingerprint"][k] == v, "--resume: ", k, " differs from the run in ", ckpt->dir, " (was ", st["fingerprint"][k].dump(),
               ", now ", v.dump(), ")");
    start = st.at("step").get<int64_t>();
    pos = {st.at("data_position").at("epoch").get<int64_t>(), st.at("data_position").at("index").get<int64_t>()};
    tokens_seen = st.value("tokens_seen", 0.0);
    elapsed_before = st.value("elapsed_s", 0.0);
    if (main) fmt::print(stderr, "sft: resumed from {} (step {})\n", ckpt->dir, start);
  }
  MetricsLog log(o.out_dir, start, main);
  const double peak = o.peak_tflops > 0 ? o.peak_tflops : peak_tflops_for(model::device_name(device));

  SftResult result;
  result.steps = start;
  result.main_rank = main;
  auto save = [&](int64_t step) {
    json st = {{"step", step}, {"data_position", {{"epoch", pos.epoch}, {"index", pos.index}}}, {"tokens_seen", tokens_seen},
               {"elapsed_s", elapsed_before}, {"world_size", dist.world()}, {"fingerprint", fingerprint},
               {"total_steps", sched.total_steps}, {"kind", "sft"}};
    save_checkpoint(o.out_dir, step, model, o.model_dir, opt, st, dist, static_cast<int>(o.keep_last));
    result.last_checkpoint = (fs::path(o.out_dir) / "checkpoints" / fmt::format("step-{:08d}", step)).string();
  };

  ProgressBar bar("sft", static_cast<size_t>(std::max<int64_t>(0, sched.total_steps - start)), main && o.progress);
  for (int64_t step = start; step < sched.total_steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    model::reset_peak_memory(device);
    auto examples = order.next_step(data, o.tokens_per_step, pos);
    std::vector<MicroBatch> mbs;
    if (o.packing) {
      mbs = pack(data, examples, o.micro_batch_tokens);
    } else {
      for (int64_t e : examples) mbs.push_back(make_micro_batch(data, {e}));
    }
    double step_tokens = 0, loss_tokens = 0, pairs = 0;
    for (const auto& mb : mbs) {
      step_tokens += mb.num_tokens;
      loss_tokens += mb.loss_tokens;
      pairs += mb.attention_pairs;
    }
    std::vector<const MicroBatch*> mine;
    for (size_t i = 0; i < mbs.size(); ++i)
      if (static_cast<int>(i % dist.world()) == dist.rank()) mine.push_back(&mbs[i]);

    opt.zero_grad();
    at::Tensor loss_sum = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
    // With sharded weights a rank short of micro-batches makes idle passes (ShardedAdamW::passes).
    const auto passes = static_cast<size_t>(opt.passes(static_cast<int64_t>(mine.size())));
    for (size_t j = 0; j < passes; ++j) {
      opt.set_last_micro_batch(j + 1 == passes);
      if (j >= mine.size()) {
        opt.idle_backward(model);
        opt.after_backward();
        continue;
      }
      auto l = micro_batch_loss(model, *mine[j], o.grad_checkpoint);
      (l / loss_tokens).backward();
      opt.after_backward();
      loss_sum += l.detach().to(at::kDouble);
    }
    if (passes == 0) {
      opt.set_last_micro_batch(true);
      opt.after_backward();
    }
    double grad_norm = opt.finish_gradients(o.grad_clip);
    double lr = sched.at(step);
    opt.step(lr);
    dist.all_reduce_sum(loss_sum);
    double loss = loss_sum.item<double>() / loss_tokens;
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    elapsed_before += dt;
    tokens_seen += step_tokens;
    result.steps = step + 1;
    result.last_loss = loss;

    json row = {{"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm}, {"tokens", step_tokens}, {"loss_tokens", loss_tokens},
                {"examples", examples.size()}, {"micro_batches", mbs.size()}, {"tokens_per_s", step_tokens / dt},
                {"step_s", dt}, {"epoch", pos.epoch + static_cast<double>(pos.index) / data.size()}, {"tokens_seen", tokens_seen}};
    if (peak > 0) row["mfu"] = step_flops(model.config(), step_tokens, loss_tokens, pairs) / dt / (peak * 1e12 * dist.world());
    if (auto mem = model::peak_memory_gib(device)) {
      auto t = at::tensor({mem->first, mem->second}, at::kDouble).to(device);
      dist.all_reduce_max(t);
      row["peak_alloc_gib"] = t[0].item<double>();
      row["peak_reserved_gib"] = t[1].item<double>();
    }
    if (o.eval_every > 0 && !eval_data.empty() && (step + 1) % o.eval_every == 0) {
      double el = mean_token_loss(model, eval_data, o.micro_batch_tokens, dist);
      log.log("eval", step + 1, {{"loss", el}});
      row["eval_loss"] = el;
    }
    log.log("train", step + 1, row);
    bar.advance(1, fmt::format("loss {:.4f} lr {:.2e} {:.0f} tok/s", loss, lr, step_tokens / dt));
    if (o.kill_after_step == step + 1) std::raise(SIGKILL);
    if ((o.save_every > 0 && (step + 1) % o.save_every == 0) || step + 1 == sched.total_steps) save(step + 1);
  }
  if (result.last_checkpoint.empty() && ckpt) result.last_checkpoint = ckpt->dir;
  return result;
}

}  // namespace mc::train
