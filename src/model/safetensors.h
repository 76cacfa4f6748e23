// Hugging Face safetensors checkpoints without libtorch: a memory-mapped, dtype-aware reader
// (single files and sharded checkpoints with model.safetensors.index.json) and a writer whose
// files `safetensors` / `transformers` load unchanged.
//
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the data (offsets relative to
// its start). The writer pads the header with spaces to a multiple of 8, as the reference does.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mc::model {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };
const char* dtype_name(DType t);   // "F32", "BF16", ... (the format's spelling)
size_t dtype_size(DType t);
DType dtype_from_name(const std::string& s);  // throws mc::Error for an unknown name

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping (reader) or caller memory (writer)
  size_t nbytes = 0;
};

// One .safetensors file, memory-mapped read-only for its lifetime.
class SafetensorsFile {
 public:
  // Throws mc::Error naming the file and the problem (truncated, bad header, overlapping or
  // out-of-range offsets, size that does not match dtype x shape).
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView& get(const std::string& name) const;  // throws when absent
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A model directory: model.safetensors, or shards listed by model.safetensors.index.json.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir);
  std::vector<std::string> names() const;                // sorted
  const TensorView& get(const std::string& name) const;  // throws naming the missing tensor

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

// Writes tensors (in the given order) atomically. Throws on duplicate names or a size that does
// not match dtype x shape.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The same, with each tensor's bytes made only when it is written: fill(i, dst) writes
// tensors[i].nbytes bytes (their `data` is not read). Memory holds one tensor at a time.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::function<void(size_t, uint8_t*)>& fill,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mc::model
