// Device and dtype choices shared by the model commands and the trainers.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace mc::model {

// "auto" (CUDA device auto_index if CUDA is available, else the CPU), "cpu", "cuda", "cuda:N".
c10::Device parse_device(const std::string& s, int auto_index = 0);
// "auto" (kUndefined: bf16 on CUDA, fp32 on CPU), bf16, fp16, fp32.
c10::ScalarType parse_dtype(const std::string& s);
// Peak GPU memory of this process (allocated, reserved) in GiB; nullopt on the CPU.
std::optional<std::pair<double, double>> peak_memory_gib(c10::Device d);
void reset_peak_memory(c10::Device d);
// The device's name ("NVIDIA H100 80GB HBM3", "cpu").
std::string device_name(c10::Device d);

}  // namespace mc::model
