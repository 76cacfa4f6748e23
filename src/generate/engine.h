// Batched generation with continuous batching over a preallocated KV cache.
//
// Every sample of every request owns one cache slot while it runs. Each engine step first
// admits waiting requests into free slots (their prompts prefilled together, a prompt sampled
// n times computed once and copied into its n slots), then decodes one token for every running
// sequence in a single batched step, then retires finished sequences, freeing their slots for
// the next waiting request. On CUDA the decode step is captured as a CUDA graph per (batch,
// span) bucket and replayed, which removes the per-kernel launch cost of ~20 kernels x layers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model/qwen_model.h"
#include "tokenizer/bpe_tokenizer.h"

namespace mc::gen {

struct SamplingParams {
  int n = 1;                     // samples of this prompt
  float temperature = 1.0f;      // 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;                 // 0 = off
  int max_new_tokens = 256;
  std::optional<uint64_t> seed;  // unset: a random one
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids (unless ignore_eos)
  std::vector<std::string> stop;        // stop strings (need a tokenizer); not part of the text
  bool ignore_eos = false;
  // 0: off. Otherwise the sequence finishes ("loop") once its last loop_window tokens are one
  // block of at most loop_window / 4 tokens repeated (generate/repetition.h).
  int loop_window = 0;
};

struct Completion {
  std::vector<int32_t> tokens;   // generated ids, a stop token included
  std::vector<float> logprobs;   // one per token: log softmax(logits / T) at the sampled id
  std::string text;              // decoded (stop token and stop string excluded); needs a tokenizer
  std::string finish_reason;     // "stop" | "length" | "loop" (| "context_full": `generate` gave the prompt no room)
  int64_t kept = -1;             // GenerationRequest::keep_kv: the kept cache entry, for a next turn's `continues`
};

// A conversation's next turn need not prefill its whole history again. A request with keep_kv
// leaves each finished sample's cache slot filled (Completion::kept names the entry) instead of
// freeing it; a later request with `continues` set to that entry (n = 1) takes the slot over and
// prefills only its prompt beyond the longest prefix it shares with the kept tokens (the earlier
// prompt and answer). Kept entries are a cache, not a reservation: when a request needs slots and
// none is free, the oldest kept entries are given up (their continuations prefill everything),
// and an entry that is gone, released or never existed makes `continues` a plain request. The
// owner releases entries it will not continue (release(), release_kept(): after the weights
// change, since the kept K/V are the old weights').
struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
  bool keep_kv = false;
  int64_t continues = -1;
};

struct EngineOptions {
  int64_t max_batch = 256;       // cache slots = sequences decoded at once
  int64_t max_seq_len = 2048;    // prompt + generated tokens per sequence
  // Prompt tokens one prefill call computes (packed; a continued prompt's past its kept prefix):
  // more waiting requests wait for the next call. A single longer prompt is still admitted.
  int64_t prefill_tokens = 16384;
  bool cuda_graphs = true;
  // "matmul" measured faster than "sdpa" on the H100 (6.7 vs 7.9 ms a step at 512 x Qwen-0.5B).
  std::string decode_attention = "matmul";
  // With CUDA graphs, sampling is captured in the decode step's graph, and the step's inputs
  // (tokens, positions, seeds, temperatures, top-p) are copied from pinned memory without a
  // sync, so a step is one graph launch and one copy back (top-k rows take the eager path).
  // Running sequences move down into free cache slots whenever that shrinks the decode step's
  // batch bucket (a power of two over the highest slot in use), so the step's work follows the
  // sequences still running: a turn's tail is often a few long answers in high slots. On CUDA,
  // each prefill call's packed tokens are padded to model::prefill_bucket's count, so that its
  // GEMMs meet shapes cuBLAS has seen (a new one costs the host 0.4-1.3 ms a GEMM on an H200).
  // SDPA (prefill) uses flash attention, never cuDNN's, which plans each new prompt length anew.
  // Admitting prompts one call at a time costs a prefill call each (launches and a sync, ~the
  // same for one prompt as for eight), and stalls every running sequence for it. A caller whose
  // requests arrive one by one while others decode (RL's pipelined turns: each verdict asks for
  // one more answer) may hold them: while sequences are running and fewer than admit_together
  // requests wait (all of which fit), admission waits, for at most admit_wait_steps decode
  // steps, so that they are prefilled together. 0 steps: each is admitted at once. Sampling is
  // per sequence (its seed and position), so when a sequence starts does not change its tokens.
  int admit_together = 1;
  int admit_wait_steps = 0;
};

struct EngineStats {
  int64_t prompt_tokens = 0, generated_tokens = 0, decode_steps = 0, prefill_calls = 0, graphs_captured = 0;
  int64_t admissions_held = 0;  // engine steps that held waiting requests back (admit_together)
  // Summed over decode steps: the sequences decoded (running rows; the padded batch may be
  // larger) and the cache positions each attended to (the span, the longest sequence's).
  int64_t decode_rows = 0, decode_span = 0;
  int64_t slot_moves = 0;  // sequences moved to a lower cache slot (the batch follows the running ones)
  // Kept caches (GenerationRequest::keep_kv): prompt tokens not prefilled because a kept entry
  // held them, prompts that continued a kept entry, and entries given up for room.
  int64_t reused_tokens = 0, continued = 0, kept_evicted = 0;
  // Where decode steps spend their time (CUDA only; GPU times from events): the model step,
  // sampling, and on the host clock launching the step and waiting for its tokens (the rest of
  // a step's wall time is host work). With CUDA graphs, decode_gpu_ms is the graph's (model and
  // sampling) and sample_gpu_ms only what ran outside it.
  double decode_gpu_ms = 0, sample_gpu_ms = 0, step_wall_ms = 0;
  double prefill_wall_ms = 0;  // admitting prompts: prefill and their first token, host clock
  // Prefill's model calls on the GPU (CUDA events; CUDA only). Against prefill_wall_ms: whether
  // prefill computes or waits (a GPU shared with MooreEval's judges). What it computes is
  // prompt_tokens - reused_tokens, packed, plus padded_tokens (model::prefill_bucket, CUDA).
  double prefill_gpu_ms = 0;
  int64_t padded_tokens = 0;  // padding prefill computed and threw away (prefill buckets)
};

// Cache slots for a run that never decodes more than `sequences` at once: the power of two at
// or above it (8 at least), so that the decode step's batch buckets are those of any larger
// cache. Each slot holds max_seq_len positions of every layer: a cache sized to the work, not
// to EngineOptions::max_batch, leaves the GPU's memory to others (judges, other runs).
int64_t slots_for(int64_t sequences);

// What the engine did between two reads of its stats (after - before, field by field).
EngineStats stats_between(const EngineStats& before, const EngineStats& after);

class GenerationEngine {
 public:
  // The tokenizer (optional) is needed for text and stop strings. Both must outlive the engine.
  GenerationEngine(const model::QwenModel& model, const tok::BpeTokenizer* tokenizer, EngineOptions opts);
  ~GenerationEngine();

  // Every step() reads its tokens back before it returns, so between calls the engine has no
  // work in flight on the GPU and the caller may change the weights.
  //
  // Runs the requests to completion on the calling thread; result[i] has params.n completions.
  // on_tokens(k) is called as k more tokens are generated (for progress bars); on_complete
  // (request, sample, completion) as each sample finishes, before the others (a verifier can
  // start compiling it while the rest are still being generated).
  using CompletionCallback = std::function<void(size_t request, int sample, const Completion&)>;
  std::vector<std::vector<Completion>> generate(const std::vector<GenerationRequest>& requests,
                                                const std::function<void(int64_t)>& on_tokens = {},
                                                const CompletionCallback& on_complete = {});

  // The caller's own loop (RL's pipelined turns, where an answer's next turn is asked for while
  // others are still decoding): add() queues a request whose samples go to on_complete as each
  // finishes, and step() is one engine iteration (admit waiting requests, decode one token for
  // every running sequence), false when there was nothing to do. Not with the server thread.
  void add(GenerationRequest request, std::function<void(int sample, const Completion&)> on_complete);
  bool step();

  // For servers: a background thread runs the engine; submit() from any thread.
  void start();
  void stop();
  std::future<std::vector<Completion>> submit(GenerationRequest request);

  // Kept cache entries (GenerationRequest::keep_kv): give one up (an unknown id is ignored), or
  // all of them; how many are held. Not with the server thread.
  void release(int64_t kept);
  void release_kept();
  int64_t kept_entries() const;

  // Throws mc::Error when a request can never run (empty prompt, too long, bad parameters).
  void validate(const GenerationRequest& r) const;
  const EngineStats& stats() const { return stats_; }
  const EngineOptions& options() const { return opts_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  const EngineOptions opts_;
  EngineStats stats_;
};

}  // namespace mc::gen
