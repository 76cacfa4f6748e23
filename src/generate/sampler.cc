#include "generate/sampler.h"

#include <limits>

#include "common/check.h"
#include "generate/counter_rng.h"
#ifdef MUSACODER_CUDA
#include "generate/sampler_kernel.h"
#endif

namespace mc::gen {
namespace {

template <typename T>
void sample_cpu_rows(const at::Tensor& logits, const float* temp, const float* cut, const int64_t* seed,
                     const int64_t* step, int64_t* tok_out, float* lp_out) {
  const int64_t S = logits.size(0), V = logits.size(1);
  const T* base = logits.data_ptr<T>();
  for (int64_t r = 0; r < S; ++r) {
    const T* row = base + r * V;
    const bool greedy = temp[r] <= 0.f;
    const float inv_t = greedy ? 1.f : 1.f / temp[r];
    const uint64_t key = step_key(static_cast<uint64_t>(seed[r]), static_cast<uint64_t>(step[r]));
    float m = -std::numeric_limits<float>::infinity(), s = 0.f, best = m, best_x = m;
    int64_t arg = 0;
    for (int64_t i = 0; i < V; ++i) {
      float x = static_cast<float>(row[i]) * inv_t;
      if (x > m) {
        s = s * std::exp(m - x) + 1.f;
        m = x;
      } else {
        s += std::exp(x - m);
      }
      if (x < cut[r]) continue;
      float score = greedy ? x : x + gumbel(key, static_cast<uint64_t>(i));
      if (score > best) {
        best = score;
        best_x = x;
        arg = i;
      }
    }
    tok_out[r] = arg;
    lp_out[r] = best_x - (m + std::log(s));
  }
}

}  // namespace

at::Tensor sampling_cutoff(const at::Tensor& logits, const SamplerBatch& b) {
  const int64_t S = logits.size(0);
  auto f = logits.options().dtype(at::kFloat);
  auto cut = at::full({S}, -std::numeric_limits<float>::infinity(), f);
  if (!b.any_top_k && !b.any_top_p) return cut;
  auto t = b.temperature.to(logits.device());
  auto scaled = logits.to(at::kFloat) / at::where(t > 0, t, at::ones_like(t)).unsqueeze(1);
  if (b.any_top_k) {
    auto k = b.top_k.to(logits.device()).clamp(0, logits.size(1));
    int64_t kmax = k.max().item<int64_t>();
    auto top = std::get<0>(scaled.topk(std::max<int64_t>(kmax, 1), 1));
    auto kth = top.gather(1, (k - 1).clamp_min(0).unsqueeze(1)).squeeze(1);
    cut = at::where(k > 0, kth, cut);
  }
  if (b.any_top_p) {
    auto p = b.top_p.to(logits.device());
    auto sorted = std::get<0>(scaled.sort(1, /*descending=*/true));
    auto probs = at::softmax(sorted, 1);
    // Tokens whose preceding mass is still below p are kept (at least the top one).
    auto keep = ((probs.cumsum(1) - probs) < p.unsqueeze(1)).sum(1).clamp_min(1);
    auto pth = sorted.gather(1, (keep - 1).unsqueeze(1)).squeeze(1);
    cut = at::where(p < 1, at::maximum(cut, pth), cut);
  }
  return cut;
}

void sample_into(const at::Tensor& logits, const SamplerBatch& b, at::Tensor& tokens, at::Tensor& logprobs) {
  MC_CHECK(logits.dim() == 2 && logits.is_cuda(), "sample_into: logits must be [batch, vocab] on a CUDA device");
#ifdef MUSACODER_CUDA
  auto cut = sampling_cutoff(logits, b);
  sample_cuda(logits.contiguous(), b.temperature, cut, b.seed, b.step, tokens, logprobs);
#else
  (void)b, (void)tokens, (void)logprobs;
  throw Error("this musacoder was built without CUDA support");
#endif
}

Sampled sample(const at::Tensor& logits, const SamplerBatch& b) {
  MC_CHECK(logits.dim() == 2, "logits must be [batch, vocab]");
  const int64_t S = logits.size(0);
  auto cut = sampling_cutoff(logits, b);
  Sampled out;
  if (logits.is_cuda()) {
#ifdef MUSACODER_CUDA
    auto dev = logits.device();
    out.tokens = at::empty({S}, logits.options().dtype(at::kLong));
    out.logprobs = at::empty({S}, logits.options().dtype(at::kFloat));
    sample_cuda(logits.contiguous(), b.temperature.to(dev, at::kFloat), cut, b.seed.to(dev, at::kLong),
                b.step.to(dev, at::kLong), out.tokens, out.logprobs);
    return out;
#else
    throw Error("this musacoder was built without CUDA support");
#endif
  }
  auto l = logits.contiguous();
  auto temp = b.temperature.to(at::kFloat).contiguous(), seed = b.seed.to(at::kLong).contiguous();
  auto step = b.step.to(at::kLong).contiguous();
  cut = cut.contiguous();
  out.tokens = at::empty({S}, at::kLong);
  out.logprobs = at::empty({S}, at::kFloat);
  auto args = std::make_tuple(temp.data_ptr<float>(), cut.data_ptr<float>(), seed.data_ptr<int64_t>(),
                              step.data_ptr<int64_t>(), out.tokens.data_ptr<int64_t>(), out.logprobs.data_ptr<float>());
  auto run = [&](auto tag) {
    using T = decltype(tag);
    std::apply([&](auto... a) { sample_cpu_rows<T>(l, a...); }, args);
  };
  switch (l.scalar_type()) {
    case at::kFloat: run(float{}); break;
    case at::kBFloat16: run(c10::BFloat16{}); break;
    case at::kHalf: run(c10::Half{}); break;
    case at::kDouble: run(double{}); break;
    default: throw Error(str_cat("cannot sample from logits of dtype ", c10::toString(l.scalar_type())));
  }
  return out;
}

}  // namespace mc::gen
