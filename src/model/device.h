// Device and dtype choices shared by the model commands and the trainers.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace mc::model {

// "auto" (the local rank's GPU if CUDA is available, else the CPU), "cpu", "cuda" (the local
// rank's GPU), "cuda:N". The local rank's GPU is the auto_index-th visible one, or the only one
// where the launcher binds one GPU to each rank (SLURM --gpus-per-task=1).
c10::Device parse_device(const std::string& s, int auto_index = 0);
// "auto" (kUndefined: bf16 on CUDA, fp32 on CPU), bf16, fp16, fp32.
c10::ScalarType parse_dtype(const std::string& s);
// Peak GPU memory of this process (allocated, reserved) in GiB; nullopt on the CPU.
std::optional<std::pair<double, double>> peak_memory_gib(c10::Device d);
void reset_peak_memory(c10::Device d);
// The device's name ("NVIDIA H100 80GB HBM3", "cpu").
std::string device_name(c10::Device d);
// A host tensor copied to `d` without the host waiting. at::Tensor::to(cuda) from pageable
// memory synchronizes the stream after its copy, so the host stops until every kernel queued
// before it has run; beside other processes on the GPU (MooreEval's judges) each such wait also
// waits out their time slices (on an H200 a stream sync took 2.1 ms on average beside one
// process running 50 ms kernels, 0.29 ms alone, and prefill made ~15 a call). On CUDA the copy is made from pinned memory
// (PyTorch's caching host allocator keeps the block until the copy has run) and queued on the
// current stream; elsewhere it is a plain copy.
at::Tensor upload(const at::Tensor& host, c10::Device d);

}  // namespace mc::model
