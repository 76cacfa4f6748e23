#include "cli/model_commands.h"

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <ATen/Context.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/run_options.h"
#include "common/check.h"
#include "common/jsonl.h"
#include "common/progress.h"
#include "generate/engine.h"
#include "generate/openai_server.h"
#include "model/device.h"
#include "model/gguf_import.h"
#include "model/qwen_model.h"
#include "model/safetensors.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "train/profiler.h"

namespace mc::cli {
namespace fs = std::filesystem;
using json = nlohmann::json;
using model::parse_device;
using model::parse_dtype;
using model::peak_memory_gib;

namespace {

struct ModelArgs {
  std::string dir, device = "auto", dtype = "auto";
  void add(CLI::App* cmd) {
    cmd->add_option("--model", dir, "Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")->required();
    cmd->add_option("--device", device, "auto, cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--dtype", dtype, "auto (bf16 on CUDA, fp32 on CPU), bf16, fp16 or fp32")->capture_default_str();
  }
};

std::optional<tok::BpeTokenizer> load_tokenizer(const std::string& dir) {
  auto path = fs::path(dir) / "tokenizer.json";
  if (!fs::exists(path)) return std::nullopt;
  return tok::BpeTokenizer::from_file(path.string());
}

}  // namespace

struct ModelCommands::Impl {
  // generate
  CLI::App* gen = nullptr;
  ModelArgs gm;
  std::string prompt, prompts_file, out, system;
  gen::SamplingParams sp;
  uint64_t seed = 0;
  bool has_seed = false, chat = false, no_progress = false, no_graphs = false, stream = false;
  std::string decode_attention = "matmul";
  int64_t max_batch = 256, max_seq_len = 0;
  int arrive_every = 0, admit_together = 1, admit_wait_steps = 0;
  std::string stats_file, profile_base;
  bool profile_trace = false;

  // score
  CLI::App* score = nullptr;
  ModelArgs sm;
  std::string score_in, score_out, logits_file;
  double score_temp = 1.0;

  // convert
  CLI::App* conv = nullptr;
  std::string conv_in, conv_gguf, conv_out, conv_dtype = "bf16";
  double shard_gb = 0;

  // init
  CLI::App* init = nullptr;
  std::string init_tok, init_out, init_arch = "qwen3", init_dtype = "bf16";
  int64_t init_hidden = 512, init_layers = 8, init_heads = 8, init_kv_heads = 2, init_head_dim = 0,
          init_intermediate = 0, init_max_pos = 8192;
  double init_rope = 1000000.0, init_std = 0.02;
  bool init_untied = false;
  uint64_t init_seed = 0;

  // serve-model
  CLI::App* serve = nullptr;
  ModelArgs vm;
  gen::ModelServerOptions so;
  int64_t serve_batch = 128, serve_len = 4096;

  int run_generate();
  int run_score();
  int run_convert();
  int run_init();
  int run_serve();
};

ModelCommands::ModelCommands(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.gen = app.add_subcommand("generate", "sample completions from a Qwen2/Qwen3 model (JSONL with tokens, text, log-probs)");
  m.gm.add(m.gen);
  auto* src = m.gen->add_option_group("prompts");
  src->add_option("--prompt", m.prompt, "one prompt");
  src->add_option("--prompts", m.prompts_file,
                  "JSONL: {\"prompt\": text} | {\"messages\": [...]} | {\"prompt_ids\": [...]} per line (optional \"id\")");
  src->require_option(1);
  m.gen->add_option("--n", m.sp.n, "samples per prompt")->capture_default_str();
  m.gen->add_option("--temperature", m.sp.temperature, "0 = greedy")->capture_default_str();
  m.gen->add_option("--top-p", m.sp.top_p, "nucleus sampling")->capture_default_str();
  m.gen->add_option("--top-k", m.sp.top_k, "0 = off")->capture_default_str();
  m.gen->add_option("--max-new-tokens", m.sp.max_new_tokens, "per sample")->capture_default_str();
  m.gen->add_option("--seed", m.seed, "seed (per prompt: seed + prompt index)")->each([&m](const std::string&) { m.has_seed = true; });
  m.gen->add_option("--stop", m.sp.stop, "stop string (repeatable)");
  m.gen->add_option("--stop-token-id", m.sp.stop_token_ids, "stop token id (repeatable)");
  m.gen->add_flag("--ignore-eos", m.sp.ignore_eos, "do not stop at the model's EOS tokens");
  add_stop_loops_option(m.gen, m.sp.loop_window);
  m.gen->add_flag("--chat", m.chat, "wrap text prompts in ChatML as a user turn (stops at <|im_end|>)");
  m.gen->add_option("--system", m.system, "system turn for --chat");
  m.gen->add_option("--max-batch", m.max_batch, "sequences decoded at once (KV cache slots)")->capture_default_str();
  m.gen->add_option("--max-seq-len", m.max_seq_len, "cache length per sequence (0: longest prompt + max new tokens)");
  m.gen->add_flag("--no-cuda-graphs", m.no_graphs, "decode without CUDA graphs");
  m.gen->add_option("--decode-attention", m.decode_attention, "sdpa or matmul")->capture_default_str();
  m.gen->add_option("--arrive-every", m.arrive_every,
                    "requests reach the engine one at a time, one every N engine steps, as a server's "
                    "or RL's pipelined turns' do (0: all at once)")
      ->check(CLI::NonNegativeNumber);
  m.gen->add_option("--admit-together", m.admit_together,
                    "while sequences decode, hold waiting requests until this many can be prefilled in one call "
                    "(for at most --admit-wait-steps engine steps)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  m.gen->add_option("--admit-wait-steps", m.admit_wait_steps, "see --admit-together (0: admit at once)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  m.gen->add_option("--out", m.out, "JSONL, one row per sample (default: stdout)");
  m.gen->add_flag("--stream", m.stream, "write each sample as it finishes (completion order), not at the end in prompt order");
  m.gen->add_option("--stats", m.stats_file, "write throughput and memory as JSON here");
  m.gen->add_option("--profile", m.profile_base,
                    "profile the generation with libtorch's profiler: BASE.md and BASE.json name where the time "
                    "went (prefill's parts, decode steps, kernels, host ops); slower while on");
  m.gen->add_flag("--profile-trace", m.profile_trace, "with --profile, also BASE.trace.json (Chrome trace; large)");
  m.gen->add_flag("--no-progress", m.no_progress, "no progress bar");

  m.score = app.add_subcommand("score", "per-token log-probs of given sequences (what RL ratios need)");
  m.sm.add(m.score);
  m.score->add_option("--input", m.score_in, "JSONL: {\"ids\": [...]} or {\"text\": ...} per line")->required();
  m.score->add_option("--output", m.score_out, "JSONL: {\"logprobs\": [...], \"sum\": x} per line")->required();
  m.score->add_option("--temperature", m.score_temp, "log softmax(logits / T)")->capture_default_str();
  m.score->add_option("--logits", m.logits_file, "also write each line's full logits (fp32) to this .safetensors");

  m.conv = app.add_subcommand("convert", "re-save a model directory (dtype, shards), or import a GGUF file, in Hugging Face format");
  auto* conv_src = m.conv->add_option("--model", m.conv_in, "source model directory");
  m.conv->add_option("--from-gguf", m.conv_gguf, "source GGUF file (llama.cpp's format: qwen2 / qwen3, dequantized)")
      ->excludes(conv_src);
  m.conv->add_option("--out", m.conv_out, "destination directory")->required();
  m.conv->add_option("--dtype", m.conv_dtype, "bf16, fp16 or fp32")->capture_default_str();
  m.conv->add_option("--max-shard-gb", m.shard_gb, "shard size limit in GB (0: one file)")->capture_default_str();

  m.init = app.add_subcommand("init", "a new Qwen2/Qwen3 model with fresh weights for a tokenizer (pretraining from scratch)");
  m.init->add_option("--tokenizer", m.init_tok, "tokenizer.json (its vocabulary sizes the model; ChatML tokens required)")
      ->required();
  m.init->add_option("--out", m.init_out, "the model directory to write")->required();
  m.init->add_option("--arch", m.init_arch, "qwen3 or qwen2")->capture_default_str()->check(CLI::IsMember({"qwen2", "qwen3"}));
  m.init->add_option("--hidden", m.init_hidden, "hidden size")->capture_default_str();
  m.init->add_option("--layers", m.init_layers, "decoder layers")->capture_default_str();
  m.init->add_option("--heads", m.init_heads, "attention heads")->capture_default_str();
  m.init->add_option("--kv-heads", m.init_kv_heads, "key/value heads (GQA)")->capture_default_str();
  m.init->add_option("--head-dim", m.init_head_dim, "0: hidden / heads")->capture_default_str();
  m.init->add_option("--intermediate", m.init_intermediate, "MLP size (0: 3 x hidden)")->capture_default_str();
  m.init->add_option("--max-positions", m.init_max_pos, "max_position_embeddings")->capture_default_str();
  m.init->add_option("--rope-theta", m.init_rope, "RoPE base")->capture_default_str();
  m.init->add_flag("--untied", m.init_untied, "a separate LM head (default: tied to the embedding)");
  m.init->add_option("--init-std", m.init_std, "initializer_range")->capture_default_str();
  m.init->add_option("--seed", m.init_seed, "weights seed")->capture_default_str();
  m.init->add_option("--dtype", m.init_dtype, "bf16 or fp32 (the saved weights)")->capture_default_str();

  m.serve = app.add_subcommand("serve-model", "OpenAI-compatible /v1/completions and /v1/chat/completions");
  m.vm.add(m.serve);
  m.serve->add_option("--host", m.so.host, "address to listen on")->capture_default_str();
  m.serve->add_option("--port", m.so.port, "port (0: any free one, printed)")->capture_default_str();
  m.serve->add_option("--served-model-name", m.so.model_name, "the name /v1/models reports")->capture_default_str();
  m.serve->add_option("--max-batch", m.serve_batch, "sequences decoded at once")->capture_default_str();
  m.serve->add_option("--max-seq-len", m.serve_len, "prompt + completion tokens per sequence")->capture_default_str();
  m.serve->add_flag("--no-cuda-graphs", m.no_graphs, "decode without CUDA graphs");
}

ModelCommands::~ModelCommands() = default;

std::optional<int> ModelCommands::run() {
  Impl& m = *impl_;
  if (*m.gen) return m.run_generate();
  if (*m.score) return m.run_score();
  if (*m.conv) return m.run_convert();
  if (*m.init) return m.run_init();
  if (*m.serve) return m.run_serve();
  return std::nullopt;
}

int ModelCommands::Impl::run_generate() {
  MC_CHECK(!profile_trace || !profile_base.empty(), "generate: --profile-trace needs --profile BASE");
  auto device = parse_device(gm.device);
  auto tokenizer = load_tokenizer(gm.dir);
  auto model = model::QwenModel::load(gm.dir, device, parse_dtype(gm.dtype));
  // Prompts -> token ids.
  struct Item {
    json id;
    std::vector<int32_t> ids;
  };
  std::vector<Item> items;
  auto need_tok = [&](const std::string& where) {
    MC_CHECK(tokenizer, where, ": text prompts need ", gm.dir, "/tokenizer.json (or give prompt_ids)");
  };
  const auto format = tok::read_chat_format(gm.dir);  // the model's default system turn, if any
  auto text_ids = [&](const std::string& text, const std::string& where) {
    need_tok(where);
    if (!chat) return tokenizer->encode(text);
    std::vector<tok::ChatTurn> turns;
    if (!system.empty()) turns.push_back({"system", system});
    turns.push_back({"user", text});
    return tokenizer->encode(tok::render_chat(format, turns, true));
  };
  if (!prompt.empty()) {
    items.push_back({nullptr, text_ids(prompt, "--prompt")});
  } else {
    auto rows = read_jsonl(prompts_file);
    for (size_t i = 0; i < rows.size(); ++i) {
      const json& r = rows[i];
      std::string where = fmt::format("{}:{}", prompts_file, i + 1);
      Item it{r.value("id", json(nullptr)), {}};
      if (r.contains("prompt_ids")) {
        it.ids = r["prompt_ids"].get<std::vector<int32_t>>();
      } else if (r.contains("messages")) {
        need_tok(where);
        it.ids = tokenizer->encode(tok::render_chat(format, tok::turns_from_json(r["messages"], where), true));
      } else {
        MC_CHECK(r.contains("prompt") && r["prompt"].is_string(), where,
                 ": expected \"prompt\" (string), \"messages\" or \"prompt_ids\"");
        it.ids = text_ids(r["prompt"], where);
      }
      items.push_back(std::move(it));
    }
  }
  MC_CHECK(!items.empty(), "no prompts");
  // ChatML turns end with <|im_end|>: --chat stops there.
  if (chat && tokenizer && tokenizer->token_to_id("<|im_end|>") >= 0)
    sp.stop_token_ids.push_back(tokenizer->token_to_id("<|im_end|>"));
  int64_t longest = 0;
  for (const auto& it : items) longest = std::max<int64_t>(longest, it.ids.size());
  gen::EngineOptions eo;
  eo.max_batch = std::min<int64_t>(max_batch, gen::slots_for(static_cast<int64_t>(items.size()) * sp.n));
  // A conversation may outgrow the model (a third turn after two long answers): the sequence
  // length stops at the model's context, each answer is cut where the context ends
  // (finish_reason "length"), and a prompt that fills it gets an empty answer ("context_full")
  // instead of failing every other prompt of the run. (An explicit --max-seq-len is taken as
  // asked: a prompt and answer that do not fit it are an error.)
  const int64_t context = model.config().max_position_embeddings;
  eo.max_seq_len = max_seq_len > 0 ? max_seq_len : std::min<int64_t>(context, longest + sp.max_new_tokens);
  eo.cuda_graphs = !no_graphs;
  eo.decode_attention = decode_attention;
  eo.admit_together = admit_together;
  eo.admit_wait_steps = admit_wait_steps;
  gen::GenerationEngine engine(model, tokenizer ? &*tokenizer : nullptr, eo);
  std::vector<gen::GenerationRequest> reqs;
  std::vector<size_t> req_item;  // reqs[k] answers items[req_item[k]]
  std::vector<size_t> full;      // items whose prompt leaves no room for an answer
  size_t cut = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t room = max_seq_len > 0 ? sp.max_new_tokens : eo.max_seq_len - static_cast<int64_t>(items[i].ids.size());
    if (room < 1) {
      full.push_back(i);
      continue;
    }
    gen::GenerationRequest r{items[i].ids, sp};
    if (room < r.params.max_new_tokens) r.params.max_new_tokens = room, ++cut;
    if (has_seed) r.params.seed = seed + i;
    reqs.push_back(std::move(r));
    req_item.push_back(i);
  }
  if (cut || !full.empty())
    fmt::print(stderr,
               "generate: the sequence length is {} tokens (the model's context: {}): {} prompt(s) leave fewer than "
               "--max-new-tokens {} for the answer (cut there), {} fill it (no answer: finish_reason context_full)\n",
               eo.max_seq_len, context, cut, sp.max_new_tokens, full.size());
  int64_t budget = 0;
  for (const auto& r : reqs) budget += int64_t{r.params.n} * r.params.max_new_tokens;
  std::ofstream file;
  if (!out.empty()) {
    file.open(out, std::ios::binary);
    MC_CHECK(file, "cannot write ", out);
  }
  std::ostream& os = out.empty() ? std::cout : file;
  int64_t samples = 0;
  auto write_row = [&](size_t i, size_t j, const gen::Completion& c) {
    json row{{"index", i}, {"sample", j}, {"prompt_tokens", items[i].ids.size()}, {"tokens", c.tokens},
             {"logprobs", c.logprobs}, {"finish_reason", c.finish_reason}};
    if (!items[i].id.is_null()) row["id"] = items[i].id;
    if (tokenizer) row["text"] = c.text;
    os << dump_json(row) << "\n";
    if (stream) os.flush();  // a reader (bench-model) verifies it while the rest are generated
    ++samples;
  };
  gen::Completion no_room;
  no_room.finish_reason = "context_full";
  for (size_t i : full)
    for (int j = 0; j < sp.n; ++j) write_row(i, j, no_room);
  std::optional<train::RegionProfiler> profiler;
  if (!profile_base.empty()) profiler.emplace(device.is_cuda());
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<gen::Completion>> results;
  if (!reqs.empty()) {
    ProgressBar bar("generate (tokens)", budget, !no_progress);
    gen::GenerationEngine::CompletionCallback on_complete;
    if (stream) on_complete = [&](size_t k, int j, const gen::Completion& c) { write_row(req_item[k], j, c); };
    if (arrive_every == 0) {
      results = engine.generate(reqs, [&](int64_t k) { bar.advance(k); }, on_complete);
    } else {  // the caller's own loop: one more request every arrive_every engine steps
      results.resize(reqs.size());
      size_t next = 0, done = 0, total = 0;
      for (size_t k = 0; k < reqs.size(); ++k) {
        results[k].resize(static_cast<size_t>(reqs[k].params.n));
        total += static_cast<size_t>(reqs[k].params.n);
      }
      for (int64_t steps = 0; done < total; ++steps) {
        if (next < reqs.size() && steps % arrive_every == 0) {
          engine.add(reqs[next], [&, k = next](int j, const gen::Completion& c) {
            bar.advance(static_cast<int64_t>(c.tokens.size()));
            if (on_complete) on_complete(k, j, c);
            results[k][static_cast<size_t>(j)] = c;
            ++done;
          });
          ++next;
        }
        engine.step();
      }
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!stream)
    for (size_t k = 0; k < results.size(); ++k)
      for (size_t j = 0; j < results[k].size(); ++j) write_row(req_item[k], j, results[k][j]);
  const auto& st = engine.stats();
  if (profiler) {
    // The engine's own clocks first; the profile's tables then name the ops inside them
    // (engine::prefill, prefill::prepare, prefill::layers, engine::decode_step, engine::compact).
    json phases = json::array({{{"name", "generate"}, {"s", secs}}});
    for (const auto& p : train::engine_phases(st)) phases.push_back(p);
    phases.push_back({{"name", "prefill: GPU events (model calls, host gaps included)"}, {"s", st.prefill_gpu_ms / 1e3},
                      {"of", "generate"}});
    phases.push_back({{"name", "between engine steps"},
                      {"s", std::max(0.0, secs - st.step_wall_ms / 1e3 - st.prefill_wall_ms / 1e3)}, {"of", "generate"}});
    json p = profiler->stop(profile_base,
                            fmt::format("generate: {} prompts, {} samples, {} prefill calls, {} decode steps (profiler on, "
                                        "so slower than without)",
                                        items.size(), samples, st.prefill_calls, st.decode_steps),
                            phases, profile_trace);
    fmt::print(stderr, "generate: profile in {}.md (GPU busy {:.0f}% of it)\n", profile_base,
               100 * p.value("gpu_busy_share", 0.0));
  }
  auto peak = peak_memory_gib(device);
  double tps = st.generated_tokens / secs;
  fmt::print(stderr,
             "\n{:<22}{}\n{:<22}{}\n{:<22}{} generated, {} prompt\n{:<22}{:.2f}\n{:<22}{:.0f}\n{:<22}{} decode steps, {} "
             "prefills ({:.2f} ms each), {} CUDA graphs\n{:<22}{}\n{:<22}{:.2f} ms wall, {:.2f} ms model (GPU), {:.2f} ms "
             "sampling (GPU)\n",
             "prompts", items.size(), "samples", samples, "tokens", st.generated_tokens, st.prompt_tokens, "seconds", secs,
             "tokens/s", tps, "engine", st.decode_steps, st.prefill_calls,
             st.prefill_wall_ms / std::max<int64_t>(1, st.prefill_calls), st.graphs_captured, "peak GPU memory",
             peak ? fmt::format("{:.2f} GiB allocated, {:.2f} GiB reserved", peak->first, peak->second) : "n/a (CPU)",
             "per decode step", st.step_wall_ms / std::max<int64_t>(1, st.decode_steps),
             st.decode_gpu_ms / std::max<int64_t>(1, st.decode_steps), st.sample_gpu_ms / std::max<int64_t>(1, st.decode_steps));
  if (!stats_file.empty()) {
    json s{{"prompts", items.size()}, {"samples", samples}, {"generated_tokens", st.generated_tokens},
           {"prompt_tokens", st.prompt_tokens}, {"seconds", secs}, {"tokens_per_s", tps},
           {"decode_steps", st.decode_steps}, {"prefill_calls", st.prefill_calls},
           {"prefill_wall_ms_total", st.prefill_wall_ms}, {"prefill_gpu_ms_total", st.prefill_gpu_ms},
           {"prefill_padded_tokens", st.padded_tokens},
           {"admissions_held", st.admissions_held}, {"cuda_graphs", st.graphs_captured}, {"slot_moves", st.slot_moves},
           {"decode_rows_total", st.decode_rows},
           {"step_wall_ms_total", st.step_wall_ms}, {"decode_gpu_ms_total", st.decode_gpu_ms},
           {"sample_gpu_ms_total", st.sample_gpu_ms}, {"peak_reserved_gib", peak ? peak->second : 0.0},
           {"device", device.str()}, {"max_batch", max_batch}};
    std::ofstream(stats_file) << s.dump(2) << "\n";
  }
  return 0;
}

int ModelCommands::Impl::run_score() {
  auto device = parse_device(sm.device);
  auto tokenizer = load_tokenizer(sm.dir);
  auto model = model::QwenModel::load(sm.dir, device, parse_dtype(sm.dtype));
  auto rows = read_jsonl(score_in);
  std::ofstream os(score_out, std::ios::binary);
  MC_CHECK(os, "cannot write ", score_out);
  std::vector<at::Tensor> keep;  // logits kept alive for the safetensors writer
  std::vector<model::TensorView> views;
  c10::InferenceMode no_grad;
  ProgressBar bar("score", rows.size(), true);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<int32_t> ids;
    if (rows[i].contains("ids")) {
      ids = rows[i]["ids"].get<std::vector<int32_t>>();
    } else {
      MC_CHECK(rows[i].contains("text") && tokenizer, score_in, ":", i + 1,
               ": expected \"ids\" (or \"text\" with a tokenizer.json in the model directory)");
      ids = tokenizer->encode(rows[i]["text"].get<std::string>());
    }
    MC_CHECK(!ids.empty(), score_in, ":", i + 1, ": empty sequence");
    for (int32_t id : ids)
      MC_CHECK(id >= 0 && id < model.config().vocab_size, score_in, ":", i + 1, ": token id ", id,
               " is outside the vocabulary (", model.config().vocab_size, ")");
    auto t = at::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
    auto lp = model.token_logprobs(t, score_temp).squeeze(0).cpu();
    std::vector<float> v(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
    double sum = 0;
    for (float x : v) sum += x;
    os << dump_json({{"logprobs", v}, {"sum", sum}, {"tokens", ids.size()}}) << "\n";
    if (!logits_file.empty()) {
      keep.push_back(model.forward(t).squeeze(0).to(at::kCPU, at::kFloat).contiguous());
      model::TensorView tv;
      tv.name = fmt::format("logits.{}", i);
      tv.dtype = model::DType::kF32;
      tv.shape = keep.back().sizes().vec();
      tv.data = static_cast<const uint8_t*>(keep.back().data_ptr());
      tv.nbytes = keep.back().nbytes();
      views.push_back(tv);
    }
    bar.advance();
  }
  if (!logits_file.empty()) model::write_safetensors(logits_file, views);
  return 0;
}

int ModelCommands::Impl::run_convert() {
  auto dtype = parse_dtype(conv_dtype);
  MC_CHECK(dtype != c10::ScalarType::Undefined, "--dtype must be bf16, fp16 or fp32");
  MC_CHECK(!conv_in.empty() || !conv_gguf.empty(), "convert needs --model DIR or --from-gguf FILE");
  if (!conv_gguf.empty()) {
    MC_CHECK(dtype == at::kBFloat16 || dtype == at::kFloat, "--from-gguf writes bf16 or fp32 weights, not ", conv_dtype);
    MC_CHECK(shard_gb == 0, "--from-gguf writes one model.safetensors (re-save it with --model to shard it)");
    // Written beside --out and moved into it only once it loads as every command will load it
    // (names, shapes, dtypes; on the meta device, so no weights are read again): a failed
    // import leaves no half-made model folder.
    const fs::path partial = fs::path(conv_out).string() + ".partial";
    fs::remove_all(partial);
    auto r = model::import_gguf(conv_gguf, partial.string(), dtype == at::kFloat ? model::DType::kF32 : model::DType::kBF16);
    size_t vocab = 0;
    try {
      (void)model::QwenModel::load(partial.string(), c10::Device(c10::kMeta), dtype);
      vocab = tok::BpeTokenizer::from_file((partial / "tokenizer.json").string()).vocab_size();
    } catch (...) {
      fs::remove_all(partial);
      throw;
    }
    fs::create_directories(conv_out);
    for (const auto& e : fs::directory_iterator(partial)) fs::rename(e.path(), fs::path(conv_out) / e.path().filename());
    fs::remove(partial);
    std::string types;
    for (const auto& [t, n] : r.types) types += fmt::format("{}{} {}", types.empty() ? "" : ", ", n, t);
    fmt::print(stderr, "wrote {}: {} \"{}\", {:.1f} M parameters ({}), vocabulary {}, from {} (sha256 {}; tensors: {})\n",
               conv_out, r.architecture, r.name, r.parameters / 1e6, conv_dtype, vocab, conv_gguf,
               r.sha256, types);
    return 0;
  }
  MC_CHECK(fs::weakly_canonical(conv_in) != fs::weakly_canonical(conv_out), "--out must differ from --model");
  // fp32 on the CPU: exact for every source dtype.
  auto model = model::QwenModel::load(conv_in, c10::Device(c10::kCPU), at::kFloat);
  model.save(conv_out, dtype, static_cast<int64_t>(shard_gb * 1e9));
  // The tokenizer and generation settings travel with the weights.
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json",
                        "vocab.json", "merges.txt", "chat_template.jinja"})
    if (fs::exists(fs::path(conv_in) / f))
      fs::copy_file(fs::path(conv_in) / f, fs::path(conv_out) / f, fs::copy_options::overwrite_existing);
  fmt::print(stderr, "wrote {} ({}, {} tensors)\n", conv_out, conv_dtype, model.named_parameters().size());
  return 0;
}

int ModelCommands::Impl::run_init() {
  auto dtype = parse_dtype(init_dtype);
  MC_CHECK(dtype == at::kBFloat16 || dtype == at::kFloat, "--dtype must be bf16 or fp32");
  MC_CHECK(init_hidden > 0 && init_layers > 0 && init_heads > 0 && init_kv_heads > 0, "init: sizes must be positive");
  MC_CHECK(init_heads % init_kv_heads == 0, "init: --heads (", init_heads, ") must be a multiple of --kv-heads (",
           init_kv_heads, ")");
  const int64_t head_dim = init_head_dim ? init_head_dim : init_hidden / init_heads;
  MC_CHECK(init_head_dim || init_hidden % init_heads == 0, "init: --hidden (", init_hidden,
           ") is not a multiple of --heads; give --head-dim");
  MC_CHECK(head_dim % 2 == 0, "init: the head dimension must be even (RoPE), got ", head_dim);
  auto tok = tok::BpeTokenizer::from_file(init_tok);
  const int32_t im_end = tok.token_to_id("<|im_end|>"), eot = tok.token_to_id("<|endoftext|>");
  MC_CHECK(im_end >= 0 && tok.token_to_id("<|im_start|>") >= 0, init_tok,
           " has no <|im_start|> / <|im_end|> tokens: the chat format needs them");
  const bool q3 = init_arch == "qwen3";
  json cfg = {{"architectures", {q3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM"}},
              {"model_type", init_arch},
              {"vocab_size", tok.vocab_size()},
              {"hidden_size", init_hidden},
              {"intermediate_size", init_intermediate ? init_intermediate : 3 * init_hidden},
              {"num_hidden_layers", init_layers},
              {"num_attention_heads", init_heads},
              {"num_key_value_heads", init_kv_heads},
              {"head_dim", head_dim},
              {"max_position_embeddings", init_max_pos},
              {"rope_theta", init_rope},
              {"rms_norm_eps", 1e-6},
              {"hidden_act", "silu"},
              {"initializer_range", init_std},
              {"tie_word_embeddings", !init_untied},
              {"use_cache", true},
              {"bos_token_id", eot >= 0 ? eot : im_end},
              {"eos_token_id", im_end},
              {"dtype", init_dtype == "bf16" ? "bfloat16" : "float32"}};
  if (q3) cfg["attention_bias"] = false;
  auto config = model::QwenConfig::from_json(cfg, "init");
  auto model = model::QwenModel::random(config, c10::Device(c10::kCPU), at::kFloat, init_seed, init_std);
  model.save(init_out, dtype);
  fs::copy_file(init_tok, fs::path(init_out) / "tokenizer.json", fs::copy_options::overwrite_existing);
  int64_t params = 0;
  for (const auto& [name, t] : model.named_parameters()) params += t.numel();  // a tied head is not listed
  fmt::print(stderr, "wrote {}: {} with {:.2f} M parameters (hidden {}, {} layers, vocab {}), seed {}\n", init_out,
             cfg["architectures"][0].get<std::string>(), params / 1e6, init_hidden, init_layers, tok.vocab_size(),
             init_seed);
  return 0;
}

namespace {
gen::OpenAIServer* g_server = nullptr;
void on_signal(int) {
  if (g_server) g_server->stop();
}
}  // namespace

int ModelCommands::Impl::run_serve() {
  auto device = parse_device(vm.device);
  auto tokenizer = load_tokenizer(vm.dir);
  MC_CHECK(tokenizer, "serve-model needs ", vm.dir, "/tokenizer.json");
  auto model = model::QwenModel::load(vm.dir, device, parse_dtype(vm.dtype));
  gen::EngineOptions eo;
  eo.max_batch = serve_batch;
  eo.max_seq_len = std::min<int64_t>(serve_len, model.config().max_position_embeddings);
  eo.cuda_graphs = !no_graphs;
  gen::GenerationEngine engine(model, &*tokenizer, eo);
  so.chat = tok::read_chat_format(vm.dir);
  gen::OpenAIServer server(engine, *tokenizer, so);
  int port = server.bind();
  g_server = &server;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  fmt::print("serving {} on http://{}:{}/v1 ({} on {})\n", so.model_name, so.host, port, model.config().architecture,
             device.str());
  std::fflush(stdout);
  server.serve();
  engine.stop();
  g_server = nullptr;
  return 0;
}

}  // namespace mc::cli
