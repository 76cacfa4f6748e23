#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"

namespace mc::model {

namespace {
struct DTypeInfo {
  DType t;
  const char* name;
  size_t size;
};
const DTypeInfo kDTypes[] = {{DType::kF64, "F64", 8}, {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},
                             {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
                             {DType::kI16, "I16", 2}, {DType::kI8, "I8", 1}, {DType::kU8, "U8", 1},
                             {DType::kBool, "BOOL", 1}};

size_t numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}
}  // namespace

const char* dtype_name(DType t) {
  for (auto& d : kDTypes)
    if (d.t == t) return d.name;
  return "?";
}
size_t dtype_size(DType t) {
  for (auto& d : kDTypes)
    if (d.t == t) return d.size;
  return 0;
}
DType dtype_from_name(const std::string& s) {
  for (auto& d : kDTypes)
    if (s == d.name) return d.t;
  throw Error("unsupported safetensors dtype '" + s + "'");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MC_CHECK(fd >= 0, "cannot open checkpoint file ", path, ": ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw Error(path + ": too short for a safetensors file (" + std::to_string(size_) + " bytes)");
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  MC_CHECK(map_ != MAP_FAILED, "cannot map ", path, ": ", std::strerror(errno));
  const auto* base = static_cast<const uint8_t*>(map_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];
  MC_CHECK(n <= size_ - 8 && n <= (100u << 20), path, ": header length ", n, " exceeds the file (", size_, " bytes)");
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(base + 8), n));
  } catch (const std::exception& e) {
    throw Error(path + ": header is not valid JSON: " + e.what());
  }
  MC_CHECK(h.is_object(), path, ": header is not a JSON object");
  const uint8_t* data = base + 8 + n;
  size_t data_size = size_ - 8 - n;
  std::vector<std::pair<size_t, size_t>> spans;
  for (auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      for (auto& [k, val] : v.items()) metadata_[k] = val.is_string() ? val.get<std::string>() : val.dump();
      continue;
    }
    try {
      TensorView t;
      t.name = name;
      t.dtype = dtype_from_name(v.at("dtype"));
      t.shape = v.at("shape").get<std::vector<int64_t>>();
      auto off = v.at("data_offsets").get<std::vector<size_t>>();
      MC_CHECK(off.size() == 2 && off[0] <= off[1] && off[1] <= data_size, "data_offsets [", off.at(0), ", ",
               off.size() > 1 ? off[1] : 0, "] outside the data (", data_size, " bytes)");
      for (auto d : t.shape) MC_CHECK(d >= 0, "negative dimension");
      t.nbytes = off[1] - off[0];
      MC_CHECK(t.nbytes == numel(t.shape) * dtype_size(t.dtype), "holds ", t.nbytes, " bytes, but ", dtype_name(t.dtype),
               " x ", numel(t.shape), " elements need ", numel(t.shape) * dtype_size(t.dtype));
      t.data = data + off[0];
      spans.push_back({off[0], off[1]});
      index_[name] = tensors_.size();
      tensors_.push_back(std::move(t));
    } catch (const Error& e) {
      throw Error(path + ": tensor '" + name + "': " + e.what());
    } catch (const std::exception& e) {
      throw Error(path + ": tensor '" + name + "': malformed entry (" + e.what() + ")");
    }
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    MC_CHECK(spans[i].first >= spans[i - 1].second, path, ": tensors overlap in the data section");
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ && map_ != MAP_FAILED) ::munmap(map_, size_);
}

const TensorView& SafetensorsFile::get(const std::string& name) const {
  auto it = index_.find(name);
  MC_CHECK(it != index_.end(), path_, ": no tensor '", name, "'");
  return tensors_[it->second];
}

Checkpoint::Checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path d(dir);
  MC_CHECK(fs::is_directory(d), "model directory not found: ", dir);
  std::vector<std::string> files;
  if (fs::exists(d / "model.safetensors.index.json")) {
    nlohmann::json idx;
    try {
      idx = nlohmann::json::parse(read_file(d / "model.safetensors.index.json"));
    } catch (const std::exception& e) {
      throw Error((d / "model.safetensors.index.json").string() + ": " + e.what());
    }
    MC_CHECK(idx.contains("weight_map") && idx["weight_map"].is_object(), dir,
             "/model.safetensors.index.json has no weight_map");
    std::set<std::string> shards;
    for (auto& [name, f] : idx["weight_map"].items()) shards.insert(f.get<std::string>());
    for (const auto& s : shards) files.push_back((d / s).string());
    for (const auto& f : files) files_.push_back(std::make_unique<SafetensorsFile>(f));
    std::map<std::string, const SafetensorsFile*> by_file;
    for (size_t i = 0; i < files.size(); ++i) by_file[fs::path(files[i]).filename().string()] = files_[i].get();
    for (auto& [name, f] : idx["weight_map"].items()) {
      const SafetensorsFile* sf = by_file.at(f.get<std::string>());
      MC_CHECK(sf->has(name), "index maps '", name, "' to ", f.get<std::string>(), ", which does not hold it");
      where_[name] = sf;
    }
  } else {
    MC_CHECK(fs::exists(d / "model.safetensors"), dir, " has neither model.safetensors nor model.safetensors.index.json");
    files_.push_back(std::make_unique<SafetensorsFile>((d / "model.safetensors").string()));
    for (const auto& t : files_[0]->tensors()) where_[t.name] = files_[0].get();
  }
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (auto& [n, _] : where_) out.push_back(n);
  return out;
}

const TensorView& Checkpoint::get(const std::string& name) const {
  auto it = where_.find(name);
  MC_CHECK(it != where_.end(), "checkpoint has no tensor '", name, "'");
  return it->second->get(name);
}

namespace {

// The header, then each tensor's bytes through `write_tensor`, into a temporary file renamed into
// place once whole (write_file_atomic): a reader never sees half a checkpoint, and memory holds
// the tensors the caller holds, not another copy of the file.
void write_streamed(const std::string& path, const std::vector<TensorView>& tensors,
                    const std::map<std::string, std::string>& metadata,
                    const std::function<void(size_t, std::ostream&)>& write_tensor) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  size_t off = 0;
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    MC_CHECK(seen.insert(t.name).second, "duplicate tensor name '", t.name, "'");
    MC_CHECK(t.nbytes == numel(t.shape) * dtype_size(t.dtype), "tensor '", t.name, "': ", t.nbytes,
             " bytes do not match its dtype and shape");
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.nbytes}}};
    off += t.nbytes;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  write_file_atomic(path, [&](std::ostream& out) {
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
    out << header;
    for (size_t i = 0; i < tensors.size(); ++i) write_tensor(i, out);
  });
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_streamed(path, tensors, metadata, [&](size_t i, std::ostream& out) {
    out.write(reinterpret_cast<const char*>(tensors[i].data), static_cast<std::streamsize>(tensors[i].nbytes));
  });
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::function<void(size_t, uint8_t*)>& fill,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<uint8_t> buf;
  write_streamed(path, tensors, metadata, [&](size_t i, std::ostream& out) {
    buf.resize(tensors[i].nbytes);
    fill(i, buf.data());
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  });
}

}  // namespace mc::model
