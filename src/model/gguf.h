// A GGUF file (llama.cpp's model format, versions 2 and 3), memory-mapped read-only: its
// metadata and its tensors' names, types, shapes and bytes. Without libtorch.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; the
// metadata as (string key, u32 value type, value); the tensor infos as (string name, u32 rank,
// u64 dims[rank], u32 ggml type, u64 offset); padding to `general.alignment` (32 by default);
// then the data, each tensor at its offset from there. A string is a u64 length and its bytes.
// dims[0] is the fastest-varying: a weight that PyTorch holds as [out, in] is dims {in, out}.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc::model {

struct GgufTensor {
  std::string name;
  uint32_t type = 0;            // ggml type number (GgmlType where this project knows it)
  std::vector<int64_t> dims;    // GGUF order: dims[0] fastest
  const uint8_t* data = nullptr;
  size_t nbytes = 0;            // 0 for a type without a known block size
  int64_t numel() const;
  std::vector<int64_t> torch_shape() const { return {dims.rbegin(), dims.rend()}; }
};

class GgufFile {
 public:
  // Throws mc::Error naming the file and the problem: not a GGUF file, an unsupported version,
  // a truncated header or data, a tensor outside the file, a malformed value.
  explicit GgufFile(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  // Every metadata value as JSON: integers, floats, bools, strings, arrays of them.
  const std::map<std::string, nlohmann::json>& metadata() const { return meta_; }
  bool has(const std::string& key) const { return meta_.count(key) > 0; }
  const nlohmann::json& get(const std::string& key) const;  // throws naming the missing key
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find(const std::string& name) const;    // nullptr when absent

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  std::map<std::string, nlohmann::json> meta_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
};

}  // namespace mc::model
