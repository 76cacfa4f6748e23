#include "generate/engine.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>

#include <ATen/Context.h>
#include <ATen/record_function.h>

#include "common/check.h"
#include "generate/counter_rng.h"
#include "generate/repetition.h"
#include "generate/sampler.h"
#include "model/device.h"
#ifdef MUSACODER_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace mc::gen {
namespace {

// Spans attended by the decode step are rounded up to this many positions, so that one graph
// serves many steps while little attention work is wasted on unused cache positions.
constexpr int64_t kSpanQuantum = 128;

// The length of the prefix a kept entry's tokens share with a continuing prompt, short of the
// prompt's last token (one token at least is prefilled: its logits give the first answer token).
int64_t shared_prefix(const std::vector<int32_t>& have, const std::vector<int32_t>& prompt) {
  const int64_t limit = std::min<int64_t>(have.size(), static_cast<int64_t>(prompt.size()) - 1);
  int64_t m = 0;
  while (m < limit && have[m] == prompt[m]) ++m;
  return m;
}

int64_t next_pow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

}  // namespace

struct Pending {
  GenerationRequest req;
  uint64_t seed = 0;
  std::vector<Completion> results;
  int remaining = 0;
  std::promise<std::vector<Completion>> promise;
  std::exception_ptr error;
  std::function<void(int, const Completion&)> on_complete;
};

struct Seq {
  std::shared_ptr<Pending> owner;
  uint64_t id = 0;        // never reused: names the sequence in a launched step's rows
  int sample = 0;
  int64_t slot = 0;
  int64_t pos = 0;        // where `last` is written by the next decode step
  int32_t last = 0;       // the most recently sampled token
  uint64_t seed = 0;
  Completion c;
  std::string bytes;      // decoded so far, for stop strings
};

struct GenerationEngine::Impl {
  const model::QwenModel& model;
  const tok::BpeTokenizer* tok;
  EngineOptions opts;
  EngineStats& stats;
  model::KvCache cache;
  std::set<int64_t> free_slots;
  std::vector<std::unique_ptr<Seq>> running;  // by slot
  int64_t num_running = 0;
  std::deque<std::shared_ptr<Pending>> waiting;
  // Kept cache entries by id (ids only grow, so a stale id never names another's slot; the
  // smallest is the oldest): the slot and the tokens whose K/V it holds, positions 0, 1, ...
  struct Kept {
    int64_t slot = 0;
    std::vector<int32_t> tokens;
  };
  std::map<int64_t, Kept> kept;
  int64_t next_kept = 0;
  int held_steps = 0;  // steps admission has held the waiting requests back (admit_together)
  std::vector<int32_t> eos;
  uint64_t next_id = 0;
  std::unordered_map<uint64_t, Seq*> live;  // running sequences by id
  at::Tensor tokens_buf, pos_buf, logits_buf;
  // A decode step's inputs, staged on the host (pinned on CUDA) and copied to the device in two
  // copies without a sync: rows of in_i64 are tokens, positions, seeds, steps and top-k; rows
  // of in_f32 temperatures and top-p. The model and the sampler (and so the graphs) read them in
  // place; tokens_buf and pos_buf are rows of in_i64. Sampled tokens and log-probs land in
  // out_tok / out_lp, and are copied back into out_*_h.
  at::Tensor in_i64, in_f32, out_tok, out_lp;
  at::Tensor in_i64_h, in_f32_h, out_tok_h, out_lp_h;
  bool graphs = false;
  // A decode step launched: its events, and (output row, sequence id) for each sequence it
  // decoded.
  struct Launch {
    std::vector<std::pair<int64_t, uint64_t>> rows;
#ifdef MUSACODER_CUDA
    std::optional<at::cuda::CUDAEvent> e0, e1, e2;
#endif
  };

  std::mutex mu;
  std::condition_variable cv;
  std::thread worker;
  bool stopping = false;

#ifdef MUSACODER_CUDA
  std::optional<c10::cuda::CUDAStream> stream;
  decltype(at::cuda::graph_pool_handle()) pool{0, 0};
  // (batch, span, what the graph samples: -1 nothing, 0 plain, 1 with top-p) -> graph
  std::map<std::tuple<int64_t, int64_t, int>, std::unique_ptr<at::cuda::CUDAGraph>> captured;
#endif

  Impl(const model::QwenModel& m, const tok::BpeTokenizer* t, EngineOptions o, EngineStats& s)
      : model(m), tok(t), opts(o), stats(s) {
    cache = model.make_cache(opts.max_batch, opts.max_seq_len);
    for (int64_t i = 0; i < opts.max_batch; ++i) free_slots.insert(i);
    running.resize(opts.max_batch);
    eos = model.config().eos_token_ids;
    auto dev = at::TensorOptions().device(model.device());
    auto host = at::TensorOptions().pinned_memory(model.device().is_cuda());
    in_i64_h = at::zeros({5, opts.max_batch}, host.dtype(at::kLong));
    in_f32_h = at::zeros({2, opts.max_batch}, host.dtype(at::kFloat));
    out_tok_h = at::zeros({opts.max_batch}, host.dtype(at::kLong));
    out_lp_h = at::zeros({opts.max_batch}, host.dtype(at::kFloat));
    in_i64 = at::zeros({5, opts.max_batch}, dev.dtype(at::kLong));
    in_f32 = at::zeros({2, opts.max_batch}, dev.dtype(at::kFloat));
    out_tok = at::zeros({opts.max_batch}, dev.dtype(at::kLong));
    out_lp = at::zeros({opts.max_batch}, dev.dtype(at::kFloat));
    tokens_buf = in_i64[0];
    pos_buf = in_i64[1];
    logits_buf = at::empty({opts.max_batch, model.config().vocab_size}, dev.dtype(model.dtype()));
#ifdef MUSACODER_CUDA
    if (model.device().is_cuda()) {
      stream = at::cuda::getStreamFromPool(/*isHighPriority=*/false, model.device().index());
      graphs = opts.cuda_graphs;
      if (graphs) pool = at::cuda::graph_pool_handle();
    }
#endif
  }

  // --- finishing --------------------------------------------------------------------------
  void finish(Seq& s, const char* reason, size_t text_bytes) {
    s.c.finish_reason = reason;
    if (tok) s.c.text = s.bytes.substr(0, text_bytes);
    Pending& p = *s.owner;
    if (p.req.keep_kv) {
      // The cache holds positions 0 .. pos - 1: the prompt and every sampled token but the last
      // (never fed back).
      Kept k{s.slot, p.req.prompt};
      k.tokens.insert(k.tokens.end(), s.c.tokens.begin(), s.c.tokens.begin() + (s.pos - static_cast<int64_t>(p.req.prompt.size())));
      s.c.kept = next_kept++;
      kept.emplace(s.c.kept, std::move(k));
    } else {
      free_slots.insert(s.slot);
    }
    if (p.on_complete) p.on_complete(s.sample, s.c);
    p.results[s.sample] = std::move(s.c);
    if (--p.remaining == 0) p.promise.set_value(std::move(p.results));
    live.erase(s.id);
    running[s.slot].reset();
    --num_running;
  }

  void release(int64_t id) {
    auto it = kept.find(id);
    if (it == kept.end()) return;
    free_slots.insert(it->second.slot);
    kept.erase(it);
  }
  void release_all() {
    while (!kept.empty()) release(kept.begin()->first);
  }

  // Gives up the oldest kept entry, preferring one no waiting request continues; false: none kept.
  bool evict_kept() {
    if (kept.empty()) return false;
    std::set<int64_t> wanted;
    for (const auto& p : waiting) wanted.insert(p->req.continues);
    auto victim = kept.begin();
    for (auto it = kept.begin(); it != kept.end(); ++it)
      if (!wanted.count(it->first)) {
        victim = it;
        break;
      }
    release(victim->first);
    ++stats.kept_evicted;
    return true;
  }

  // Appends a sampled token; retires the sequence when it is done.
  void accept(Seq& s, int32_t token, float logprob) {
    const SamplingParams& sp = s.owner->req.params;
    s.c.tokens.push_back(token);
    s.c.logprobs.push_back(logprob);
    s.last = token;
    ++stats.generated_tokens;
    bool stop_token = std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), token) != sp.stop_token_ids.end() ||
                      (!sp.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end());
    if (stop_token) return finish(s, "stop", s.bytes.size());
    if (tok) {
      size_t before = s.bytes.size();
      s.bytes += tok->decode({token});
      for (const auto& stop : sp.stop) {
        size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
        size_t at = s.bytes.find(stop, from);
        if (at != std::string::npos) return finish(s, "stop", at);
      }
    }
    if (static_cast<int>(s.c.tokens.size()) >= sp.max_new_tokens) return finish(s, "length", s.bytes.size());
    if (caught_in_loop(s.c.tokens, sp.loop_window)) return finish(s, "loop", s.bytes.size());
  }

  // Per-row sampling parameters of the sequences admitted together (their first token; decode
  // steps read theirs from the staged inputs), filled through raw pointers: element-wise tensor indexing
  // costs microseconds per element, which at 512 rows a step dominated the whole step.
  SamplerBatch sampler_batch(const std::vector<Seq*>& rows) {
    const int64_t n = rows.size();
    auto temp = at::zeros({n}, at::kFloat), top_p = at::ones({n}, at::kFloat);
    auto top_k = at::zeros({n}, at::kLong), seed = at::zeros({n}, at::kLong), step = at::zeros({n}, at::kLong);
    float *tp = temp.data_ptr<float>(), *pp = top_p.data_ptr<float>();
    int64_t *kp = top_k.data_ptr<int64_t>(), *sp_ = seed.data_ptr<int64_t>(), *st = step.data_ptr<int64_t>();
    SamplerBatch b;
    for (int64_t i = 0; i < n; ++i) {
      if (!rows[i]) continue;
      const SamplingParams& sp = rows[i]->owner->req.params;
      tp[i] = sp.temperature;
      pp[i] = sp.top_p;
      kp[i] = sp.top_k;
      sp_[i] = static_cast<int64_t>(rows[i]->seed);
      st[i] = static_cast<int64_t>(rows[i]->c.tokens.size());
      b.any_top_p |= sp.top_p < 1.0f && sp.temperature > 0;
      b.any_top_k |= sp.top_k > 0 && sp.temperature > 0;
    }
    auto dev = model.device();  // uploaded without a stream sync each (model::upload)
    b.temperature = model::upload(temp, dev);
    b.top_p = model::upload(top_p, dev);
    b.top_k = model::upload(top_k, dev);
    b.seed = model::upload(seed, dev);
    b.step = model::upload(step, dev);
    return b;
  }

  // --- admission and prefill ----------------------------------------------------------------
  bool admit() {
    std::vector<std::shared_ptr<Pending>> batch;
    {
      std::lock_guard<std::mutex> lock(mu);
      // A request that continues a kept entry takes that entry's slot; any other needs n free
      // ones. When the first waiting request finds too few, kept entries are given up for it.
      std::set<int64_t> claimed;
      auto needs = [&](const Pending& p) {
        const bool own = p.req.continues >= 0 && kept.count(p.req.continues) && !claimed.count(p.req.continues);
        return own ? 0 : p.req.params.n;
      };
      if (!waiting.empty())
        while (needs(*waiting.front()) > static_cast<int64_t>(free_slots.size()) && evict_kept()) {
        }
      // What a request prefills: its prompt, or past the prefix it shares with its kept entry.
      auto cost = [&](const Pending& p) {
        const auto& prompt = p.req.prompt;
        auto it = p.req.continues >= 0 ? kept.find(p.req.continues) : kept.end();
        if (it == kept.end()) return static_cast<int64_t>(prompt.size());
        return static_cast<int64_t>(prompt.size()) - shared_prefix(it->second.tokens, prompt);
      };
      int64_t slots = free_slots.size(), tokens = 0;
      size_t fit = 0;  // the waiting requests one prefill call takes, from the front
      for (; fit < waiting.size(); ++fit) {
        const auto& p = waiting[fit];
        const int64_t need = needs(*p), c = need == 0 ? cost(*p) : static_cast<int64_t>(p->req.prompt.size());
        if (need > slots || (fit > 0 && tokens + c > opts.prefill_tokens)) break;
        if (need == 0) claimed.insert(p->req.continues);
        slots -= need;
        tokens += c;
      }
      // Held: everything waiting fits, too few of them, others are decoding, not held too long.
      if (fit > 0 && fit == waiting.size() && static_cast<int>(fit) < opts.admit_together && num_running > 0 &&
          held_steps < opts.admit_wait_steps) {
        ++held_steps;
        ++stats.admissions_held;
        return false;
      }
      held_steps = 0;
      for (size_t k = 0; k < fit; ++k) {
        batch.push_back(std::move(waiting.front()));
        waiting.pop_front();
      }
    }
    if (batch.empty()) return false;
    // Named in a profile (generate --profile, train rl --profile-step): the admission's host
    // work, the model's prefill and the first tokens' sampling.
    RECORD_USER_SCOPE("engine::prefill");
    auto t0 = std::chrono::steady_clock::now();
    const bool bucket = model.device().is_cuda();
    // The padding a prefill call of these row lengths computes (model::prefill_bucket).
    auto count_padding = [&](const at::Tensor& lengths) {
      if (!bucket) return;
      const int64_t n = lengths.sum().item<int64_t>();
      stats.padded_tokens += model::prefill_bucket(n) - n;
    };
    // Requests whose kept entry is still there continue it; the rest are prefilled from the start.
    std::vector<std::shared_ptr<Pending>> fresh;
    std::vector<std::pair<std::shared_ptr<Pending>, Kept>> conts;
    for (auto& p : batch) {
      stats.prompt_tokens += p->req.prompt.size();
      auto it = p->req.continues >= 0 ? kept.find(p->req.continues) : kept.end();
      if (it == kept.end()) {
        fresh.push_back(std::move(p));
        continue;
      }
      conts.emplace_back(std::move(p), std::move(it->second));
      kept.erase(it);
    }
    std::vector<Seq*> seqs;
    std::vector<at::Tensor> logits;
    // Prefill's GPU time: from just before its first model call (the host's preparation of the
    // ids is not in it) to its last call's end.
#ifdef MUSACODER_CUDA
    std::optional<at::cuda::CUDAEvent> e0, e1;
#endif
    auto gpu_begin = [&] {
#ifdef MUSACODER_CUDA
      if (stream && !e0) {
        e0.emplace(cudaEventDefault), e1.emplace(cudaEventDefault);
        e0->record();
      }
#endif
    };
    auto start_seq = [&](const std::shared_ptr<Pending>& p, int j, int64_t slot) {
      auto s = std::make_unique<Seq>();
      s->owner = p;
      s->id = next_id++;
      live.emplace(s->id, s.get());
      s->sample = j;
      s->slot = slot;
      s->pos = p->req.prompt.size();
      s->seed = mix64(p->seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(j));
      seqs.push_back(s.get());
      running[slot] = std::move(s);
      ++num_running;
    };
    if (!fresh.empty()) {
      int64_t b = fresh.size(), L = 0;
      for (auto& p : fresh) L = std::max<int64_t>(L, p->req.prompt.size());
      auto ids = at::zeros({b, L}, at::kLong), lengths = at::zeros({b}, at::kLong);
      auto acc = ids.accessor<int64_t, 2>();
      auto len_acc = lengths.accessor<int64_t, 1>();
      std::vector<int64_t> rows, slots;
      for (int64_t r = 0; r < b; ++r) {
        auto& p = fresh[r];
        for (size_t t = 0; t < p->req.prompt.size(); ++t) acc[r][t] = p->req.prompt[t];
        len_acc[r] = static_cast<int64_t>(p->req.prompt.size());
        for (int j = 0; j < p->req.params.n; ++j) {
          const int64_t slot = *free_slots.begin();
          free_slots.erase(free_slots.begin());
          rows.push_back(r);
          slots.push_back(slot);
          start_seq(p, j, slot);
        }
      }
      gpu_begin();
      auto out = model.prefill(ids, lengths, at::tensor(rows), at::tensor(slots), cache, bucket);
      count_padding(lengths);
      ++stats.prefill_calls;
      logits.push_back(out.index_select(0, model::upload(at::tensor(rows), out.device())));
    }
    if (!conts.empty()) {
      // Each prompt from the end of the prefix it shares with its kept tokens (one token at
      // least is prefilled: its logits give the first answer token).
      const int64_t b = conts.size();
      std::vector<int64_t> start(b);
      int64_t T = 0;
      for (int64_t r = 0; r < b; ++r) {
        const auto& prompt = conts[r].first->req.prompt;
        const int64_t m = shared_prefix(conts[r].second.tokens, prompt);
        start[r] = m;
        T = std::max<int64_t>(T, static_cast<int64_t>(prompt.size()) - m);
      }
      auto ids = at::zeros({b, T}, at::kLong), lengths = at::zeros({b}, at::kLong), slots = at::zeros({b}, at::kLong);
      auto acc = ids.accessor<int64_t, 2>();
      auto len_acc = lengths.accessor<int64_t, 1>(), slot_acc = slots.accessor<int64_t, 1>();
      for (int64_t r = 0; r < b; ++r) {
        const auto& prompt = conts[r].first->req.prompt;
        for (int64_t t = start[r]; t < static_cast<int64_t>(prompt.size()); ++t) acc[r][t - start[r]] = prompt[t];
        len_acc[r] = static_cast<int64_t>(prompt.size()) - start[r];
        slot_acc[r] = conts[r].second.slot;
        stats.reused_tokens += start[r];
        start_seq(conts[r].first, 0, conts[r].second.slot);
      }
      gpu_begin();
      logits.push_back(model.prefill_from(ids, at::tensor(start), lengths, slots, cache, bucket));
      count_padding(lengths);
      ++stats.prefill_calls;
      stats.continued += b;
    }
#ifdef MUSACODER_CUDA
    if (e0) e1->record();
#endif
    auto picked = logits.size() == 1 ? logits[0] : at::cat(logits, 0);
    auto out = sample(picked, sampler_batch(seqs));
    auto toks = out.tokens.cpu(), lps = out.logprobs.cpu();
#ifdef MUSACODER_CUDA
    if (e0) stats.prefill_gpu_ms += e0->elapsed_time(*e1);  // the .cpu() above has synchronized
#endif
    stats.prefill_wall_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (size_t i = 0; i < seqs.size(); ++i) accept(*seqs[i], toks.data_ptr<int64_t>()[i], lps.data_ptr<float>()[i]);
    return true;
  }

  // --- decode -------------------------------------------------------------------------------
  // The sampler's per-row parameters for the first `batch` rows of a decode step: views of the
  // staged device inputs (decode_step fills them).
  SamplerBatch staged_sampler_batch(int64_t batch, bool any_top_p, bool any_top_k) {
    SamplerBatch b;
    b.temperature = in_f32[0].narrow(0, 0, batch);
    b.top_p = in_f32[1].narrow(0, 0, batch);
    b.seed = in_i64[2].narrow(0, 0, batch);
    b.step = in_i64[3].narrow(0, 0, batch);
    b.top_k = in_i64[4].narrow(0, 0, batch);
    b.any_top_p = any_top_p;
    b.any_top_k = any_top_k;
    return b;
  }

  // The model step for `batch` rows over `span` cache positions into logits_buf, and with
  // `sampling` >= 0 the sampler into out_tok / out_lp (1: with top-p): replayed from a CUDA
  // graph per (batch, span, sampling) where graphs are on.
  void run_decode(int64_t batch, int64_t span, int sampling) {
    auto out = logits_buf.narrow(0, 0, batch);
    auto body = [&] {
      model.decode(tokens_buf, pos_buf, cache, batch, span, out, opts.decode_attention);
      if (sampling < 0) return;
      auto tok = out_tok.narrow(0, 0, batch), lp = out_lp.narrow(0, 0, batch);
      sample_into(out, staged_sampler_batch(batch, /*any_top_p=*/sampling == 1, /*any_top_k=*/false), tok, lp);
    };
#ifdef MUSACODER_CUDA
    if (graphs) {
      auto key = std::make_tuple(batch, span, sampling);
      auto it = captured.find(key);
      if (it != captured.end()) return it->second->replay();
      // Warm-up run (its results are this step's), then capture for the next steps: capturing
      // records the kernels without running them, so the cache is written once.
      body();
      auto g = std::make_unique<at::cuda::CUDAGraph>();
      g->capture_begin(pool);
      body();
      g->capture_end();
      captured.emplace(key, std::move(g));
      ++stats.graphs_captured;
      return;
    }
#endif
    body();
  }

  // Launches one decode step for every running sequence (accept() finishes a sequence at
  // max_new_tokens, so each running one may sample), without waiting for it: its tokens and
  // log-probs are copied back into the host buffers, read by read_decode. Needs a running
  // sequence.
  Launch launch_decode() {
    RECORD_USER_SCOPE("engine::decode_step");
    int64_t top = 0, max_pos = 0;
    for (int64_t i = 0; i < opts.max_batch; ++i)
      if (running[i]) {
        top = i + 1;
        max_pos = std::max(max_pos, running[i]->pos);
      }
    int64_t batch = std::min(next_pow2(std::max<int64_t>(top, 8)), opts.max_batch);
    int64_t span = std::min((max_pos + 1 + kSpanQuantum - 1) / kSpanQuantum * kSpanQuantum, opts.max_seq_len);
    // The step's inputs, rows without a sequence greedy on token 0 (their results are unused).
    // Such a row still writes its K/V: at the cache's last position, which no sequence reaches
    // (validate: prompt + max_new_tokens <= max_seq_len, and the last sampled token is never fed
    // back), so that a kept entry in that slot (GenerationRequest::keep_kv) stays whole.
    Launch L;
    int64_t* ip = in_i64_h.data_ptr<int64_t>();
    float* fp = in_f32_h.data_ptr<float>();
    const int64_t B = opts.max_batch;
    bool any_top_p = false, any_top_k = false;
    for (int64_t i = 0; i < batch; ++i) {
      Seq* s = i < top ? running[i].get() : nullptr;
      const SamplingParams* sp = s ? &s->owner->req.params : nullptr;
      ip[i] = s ? s->last : 0;
      ip[B + i] = s ? s->pos : opts.max_seq_len - 1;
      ip[2 * B + i] = s ? static_cast<int64_t>(s->seed) : 0;
      ip[3 * B + i] = s ? static_cast<int64_t>(s->c.tokens.size()) : 0;
      ip[4 * B + i] = sp ? sp->top_k : 0;
      fp[i] = sp ? sp->temperature : 0.f;
      fp[B + i] = sp ? sp->top_p : 1.f;
      if (s) {
        ++stats.decode_rows;
        any_top_p |= sp->top_p < 1.0f && sp->temperature > 0;
        any_top_k |= sp->top_k > 0 && sp->temperature > 0;
        L.rows.emplace_back(i, s->id);
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    in_i64.copy_(in_i64_h, /*non_blocking=*/true);
    in_f32.copy_(in_f32_h, /*non_blocking=*/true);
    // Top-k's cutoff reads k on the host, which a graph cannot: such steps sample outside it.
    const bool fused = graphs && !any_top_k;
#ifdef MUSACODER_CUDA
    if (stream) {
      L.e0.emplace(cudaEventDefault), L.e1.emplace(cudaEventDefault), L.e2.emplace(cudaEventDefault);
      L.e0->record();
    }
#endif
    run_decode(batch, span, fused ? (any_top_p ? 1 : 0) : -1);
#ifdef MUSACODER_CUDA
    if (stream) L.e1->record();
#endif
    ++stats.decode_steps;
    stats.decode_span += span;
    if (!fused) {
      auto out = sample(logits_buf.narrow(0, 0, batch), staged_sampler_batch(batch, any_top_p, any_top_k));
      out_tok.narrow(0, 0, batch).copy_(out.tokens);
      out_lp.narrow(0, 0, batch).copy_(out.logprobs);
    }
    out_tok_h.narrow(0, 0, batch).copy_(out_tok.narrow(0, 0, batch), /*non_blocking=*/true);
    out_lp_h.narrow(0, 0, batch).copy_(out_lp.narrow(0, 0, batch), /*non_blocking=*/true);
#ifdef MUSACODER_CUDA
    if (stream) L.e2->record();
#endif
    stats.step_wall_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return L;
  }

  // Waits for a launched step's tokens and hands them to their sequences.
  void read_decode(const Launch& L) {
#ifdef MUSACODER_CUDA
    if (L.e2) {
      const auto t0 = std::chrono::steady_clock::now();
      L.e2->synchronize();
      stats.step_wall_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      stats.decode_gpu_ms += L.e0->elapsed_time(*L.e1);
      stats.sample_gpu_ms += L.e1->elapsed_time(*L.e2);
    }
#endif
    const int64_t* ta = out_tok_h.data_ptr<int64_t>();
    const float* la = out_lp_h.data_ptr<float>();
    for (const auto& [row, id] : L.rows) {
      Seq& s = *live.at(id);
      ++s.pos;
      accept(s, static_cast<int32_t>(ta[row]), la[row]);
    }
  }

  // Moves the sequences of the highest slots into the lowest free ones (their cache rows
  // copied) when the running sequences fit a smaller batch bucket than the highest slot does.
  // Sampling depends on each sequence's seed and step, not on its slot, so the tokens are the
  // same.
  void compact() {
    int64_t top = 0;
    for (int64_t i = opts.max_batch - 1; i >= 0 && top == 0; --i)
      if (running[i]) top = i + 1;
    if (num_running == 0 || next_pow2(std::max<int64_t>(num_running, 8)) >= next_pow2(std::max<int64_t>(top, 8))) return;
    RECORD_USER_SCOPE("engine::compact");
    for (int64_t hi = top - 1; hi >= 0 && !free_slots.empty(); --hi) {
      if (!running[hi]) continue;
      const int64_t lo = *free_slots.begin();
      if (lo >= hi) break;
      Seq& s = *running[hi];
      const int64_t n = s.pos;
      for (size_t l = 0; l < cache.k.size(); ++l) {
        cache.k[l][lo].narrow(1, 0, n).copy_(cache.k[l][hi].narrow(1, 0, n));
        cache.v[l][lo].narrow(1, 0, n).copy_(cache.v[l][hi].narrow(1, 0, n));
      }
      free_slots.erase(free_slots.begin());
      free_slots.insert(hi);
      s.slot = lo;
      running[lo] = std::move(running[hi]);
      ++stats.slot_moves;
    }
  }

  // One engine iteration; returns false when there was nothing to do. Admits waiting requests,
  // launches a decode step and reads that step's tokens.
  bool step() {
#ifdef MUSACODER_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> guard;
    if (stream) guard.emplace(*stream);
#endif
    bool did = admit();
    if (num_running > 0) {
      read_decode(launch_decode());
      did = true;
    }
    compact();
    return did;
  }

  // A failure inside the engine (CUDA error, out of memory) fails the requests it touched, not
  // the process; the server answers them with an error and goes on.
  void fail_all(std::exception_ptr e) {
    live.clear();
    for (auto& s : running)
      if (s) {
        auto owner = s->owner;
        free_slots.insert(s->slot);
        s.reset();
        if (!owner->error) {
          owner->error = e;
          owner->promise.set_exception(e);
        }
      }
    num_running = 0;
    release_all();
  }
};

int64_t slots_for(int64_t sequences) { return next_pow2(std::max<int64_t>(sequences, 8)); }

EngineStats stats_between(const EngineStats& a, const EngineStats& b) {
  EngineStats d;
  d.prompt_tokens = b.prompt_tokens - a.prompt_tokens;
  d.generated_tokens = b.generated_tokens - a.generated_tokens;
  d.decode_steps = b.decode_steps - a.decode_steps;
  d.prefill_calls = b.prefill_calls - a.prefill_calls;
  d.graphs_captured = b.graphs_captured - a.graphs_captured;
  d.admissions_held = b.admissions_held - a.admissions_held;
  d.decode_rows = b.decode_rows - a.decode_rows;
  d.decode_span = b.decode_span - a.decode_span;
  d.slot_moves = b.slot_moves - a.slot_moves;
  d.reused_tokens = b.reused_tokens - a.reused_tokens;
  d.continued = b.continued - a.continued;
  d.kept_evicted = b.kept_evicted - a.kept_evicted;
  d.padded_tokens = b.padded_tokens - a.padded_tokens;
  d.decode_gpu_ms = b.decode_gpu_ms - a.decode_gpu_ms;
  d.sample_gpu_ms = b.sample_gpu_ms - a.sample_gpu_ms;
  d.step_wall_ms = b.step_wall_ms - a.step_wall_ms;
  d.prefill_wall_ms = b.prefill_wall_ms - a.prefill_wall_ms;
  d.prefill_gpu_ms = b.prefill_gpu_ms - a.prefill_gpu_ms;
  return d;
}

GenerationEngine::GenerationEngine(const model::QwenModel& model, const tok::BpeTokenizer* tokenizer, EngineOptions opts)
    : opts_(opts) {
  MC_CHECK(opts.max_batch > 0, "max batch must be positive");
  MC_CHECK(opts.admit_together >= 1 && opts.admit_wait_steps >= 0, "admit together (", opts.admit_together,
           ") must be at least 1 and admit wait steps (", opts.admit_wait_steps, ") at least 0");
  MC_CHECK(opts.max_seq_len > 1 && opts.max_seq_len <= model.config().max_position_embeddings, "max sequence length ",
           opts.max_seq_len, " must be in [2, max_position_embeddings = ", model.config().max_position_embeddings, "]");
  // cuDNN's SDPA attention (libtorch 2.11's choice on Hopper) plans each new prompt length
  // anew, ~8 ms a layer on the host; flash attention (GQA native) has no per-shape plan. The
  // switch is process-wide; training calls flash directly.
  if (model.device().is_cuda()) at::globalContext().setSDPUseCuDNN(false);
  impl_ = std::make_unique<Impl>(model, tokenizer, opts, stats_);
}

GenerationEngine::~GenerationEngine() { stop(); }

void GenerationEngine::validate(const GenerationRequest& r) const {
  const SamplingParams& p = r.params;
  MC_CHECK(!r.prompt.empty(), "empty prompt");
  for (int32_t id : r.prompt)
    MC_CHECK(id >= 0 && id < impl_->model.config().vocab_size, "prompt token id ", id, " is outside the vocabulary (",
             impl_->model.config().vocab_size, ")");
  MC_CHECK(p.n >= 1 && p.n <= opts_.max_batch, "n must be in [1, ", opts_.max_batch, "], got ", p.n);
  MC_CHECK(p.max_new_tokens >= 1, "max_new_tokens must be >= 1, got ", p.max_new_tokens);
  MC_CHECK(p.temperature >= 0, "temperature must be >= 0, got ", p.temperature);
  MC_CHECK(p.top_p > 0 && p.top_p <= 1, "top_p must be in (0, 1], got ", p.top_p);
  MC_CHECK(p.top_k >= 0, "top_k must be >= 0, got ", p.top_k);
  MC_CHECK(p.loop_window == 0 || p.loop_window >= 16, "loop_window must be 0 (off) or >= 16 tokens, got ", p.loop_window);
  MC_CHECK(static_cast<int64_t>(r.prompt.size()) + p.max_new_tokens <= opts_.max_seq_len, "prompt (", r.prompt.size(),
           " tokens) + max_new_tokens (", p.max_new_tokens, ") exceeds the engine's max sequence length (",
           opts_.max_seq_len, ")");
  MC_CHECK(p.stop.empty() || impl_->tok, "stop strings need a tokenizer");
  MC_CHECK(r.continues < 0 || p.n == 1, "a request that continues a kept cache entry samples once (n = 1), got n = ", p.n);
  for (const auto& s : p.stop) MC_CHECK(!s.empty(), "empty stop string");
}

std::future<std::vector<Completion>> GenerationEngine::submit(GenerationRequest request) {
  validate(request);
  auto p = std::make_shared<Pending>();
  p->seed = request.params.seed ? *request.params.seed : std::random_device{}() * 0x100000001ull + std::random_device{}();
  p->remaining = request.params.n;
  p->results.resize(request.params.n);
  p->req = std::move(request);
  auto fut = p->promise.get_future();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->waiting.push_back(std::move(p));
  }
  impl_->cv.notify_one();
  return fut;
}

std::vector<std::vector<Completion>> GenerationEngine::generate(const std::vector<GenerationRequest>& requests,
                                                                const std::function<void(int64_t)>& on_tokens,
                                                                const CompletionCallback& on_complete) {
  MC_CHECK(!impl_->worker.joinable(), "generate() while the engine's server thread runs; use submit()");
  for (const auto& r : requests) validate(r);
  std::vector<std::future<std::vector<Completion>>> futures;
  for (size_t i = 0; i < requests.size(); ++i) {
    futures.push_back(submit(requests[i]));
    if (on_complete) {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->waiting.back()->on_complete = [&on_complete, i](int sample, const Completion& c) { on_complete(i, sample, c); };
    }
  }
  int64_t seen = stats_.generated_tokens;
  while (impl_->step()) {
    if (on_tokens) on_tokens(stats_.generated_tokens - seen);
    seen = stats_.generated_tokens;
  }
  std::vector<std::vector<Completion>> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

void GenerationEngine::add(GenerationRequest request, std::function<void(int, const Completion&)> on_complete) {
  MC_CHECK(!impl_->worker.joinable(), "add() while the engine's server thread runs; use submit()");
  submit(std::move(request));  // its future is not needed: the samples go to on_complete
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->waiting.back()->on_complete = std::move(on_complete);
}

bool GenerationEngine::step() {
  MC_CHECK(!impl_->worker.joinable(), "step() while the engine's server thread runs");
  return impl_->step();
}

void GenerationEngine::release(int64_t kept) {
  MC_CHECK(!impl_->worker.joinable(), "release() while the engine's server thread runs");
  impl_->release(kept);
}

void GenerationEngine::release_kept() {
  MC_CHECK(!impl_->worker.joinable(), "release_kept() while the engine's server thread runs");
  impl_->release_all();
}

int64_t GenerationEngine::kept_entries() const { return static_cast<int64_t>(impl_->kept.size()); }

void GenerationEngine::start() {
  if (impl_->worker.joinable()) return;
  impl_->stopping = false;
  impl_->worker = std::thread([this] {
    Impl& m = *impl_;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(m.mu);
        m.cv.wait(lock, [&] { return m.stopping || !m.waiting.empty() || m.num_running > 0; });
        if (m.stopping) return;
      }
      try {
        m.step();
      } catch (...) {
        m.fail_all(std::current_exception());
      }
    }
  });
}

void GenerationEngine::stop() {
  if (!impl_ || !impl_->worker.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->worker.join();
}

}  // namespace mc::gen
