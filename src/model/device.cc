#include "model/device.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#ifdef MUSACODER_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "common/check.h"

namespace mc::model {

namespace {

// The local rank's GPU: the rank-th visible one, or the only one where the launcher gives each
// rank its own (SLURM's --gpus-per-task=1, --gpu-bind: every rank sees one GPU, as cuda:0).
c10::DeviceIndex rank_gpu(int local_rank) {
  int count = 1;
#ifdef MUSACODER_CUDA
  count = at::cuda::getNumGPUs();
#endif
  if (local_rank < count) return static_cast<c10::DeviceIndex>(local_rank);
  MC_CHECK(count == 1, "local rank ", local_rank, " has no GPU of its own: ", count,
           " are visible (CUDA_VISIBLE_DEVICES); give each rank one, or all of a node's");
  return 0;
}

}  // namespace

c10::Device parse_device(const std::string& s, int auto_index) {
  bool cuda = at::globalContext().hasCUDA();
  if (s == "auto") return cuda ? c10::Device(c10::kCUDA, rank_gpu(auto_index)) : c10::Device(c10::kCPU);
  if (s == "cpu") return c10::Device(c10::kCPU);
  MC_CHECK(s == "cuda" || s.rfind("cuda:", 0) == 0, "--device must be auto, cpu, cuda or cuda:N, got \"", s, "\"");
  MC_CHECK(cuda, "--device ", s, ": no CUDA device is available here");
  return s == "cuda" ? c10::Device(c10::kCUDA, rank_gpu(auto_index)) : c10::Device(s);
}

c10::ScalarType parse_dtype(const std::string& s) {
  if (s == "auto") return c10::ScalarType::Undefined;
  if (s == "bf16" || s == "bfloat16") return at::kBFloat16;
  if (s == "fp16" || s == "float16") return at::kHalf;
  if (s == "fp32" || s == "float32") return at::kFloat;
  throw Error(str_cat("--dtype must be auto, bf16, fp16 or fp32, got \"", s, "\""));
}

std::optional<std::pair<double, double>> peak_memory_gib(c10::Device d) {
#ifdef MUSACODER_CUDA
  if (d.is_cuda()) {
    auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
    auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return std::make_pair(st.allocated_bytes[agg].peak / 1073741824.0, st.reserved_bytes[agg].peak / 1073741824.0);
  }
#endif
  return std::nullopt;
}

void reset_peak_memory(c10::Device d) {
#ifdef MUSACODER_CUDA
  if (d.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(d.index());
#endif
}

at::Tensor upload(const at::Tensor& host, c10::Device d) {
  if (!d.is_cuda() || !host.device().is_cpu()) return host.to(d);
  return host.contiguous().pin_memory().to(d, /*non_blocking=*/true);
}

std::string device_name(c10::Device d) {
#ifdef MUSACODER_CUDA
  if (d.is_cuda()) return at::cuda::getDeviceProperties(d.index())->name;
#endif
  return d.str();
}

}  // namespace mc::model
