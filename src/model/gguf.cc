#include "model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/check.h"
#include "model/gguf_quants.h"

namespace mc::model {
namespace {

// GGUF's metadata value types.
enum ValueType : uint32_t {
  kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64
};

// Reads the header front to back; every read checks that the bytes are there.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n, const std::string& path) : p_(p), n_(n), path_(path) {}

  template <typename T>
  T scalar(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const uint64_t len = scalar<uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }
  nlohmann::json value(uint32_t type, const std::string& key, int depth = 0) {
    switch (type) {
      case kU8: return scalar<uint8_t>(key.c_str());
      case kI8: return scalar<int8_t>(key.c_str());
      case kU16: return scalar<uint16_t>(key.c_str());
      case kI16: return scalar<int16_t>(key.c_str());
      case kU32: return scalar<uint32_t>(key.c_str());
      case kI32: return scalar<int32_t>(key.c_str());
      case kF32: return scalar<float>(key.c_str());
      case kBool: return scalar<uint8_t>(key.c_str()) != 0;
      case kString: return string(key.c_str());
      case kU64: return scalar<uint64_t>(key.c_str());
      case kI64: return scalar<int64_t>(key.c_str());
      case kF64: return scalar<double>(key.c_str());
      case kArray: {
        MC_CHECK(depth == 0, path_, ": metadata ", key, " nests arrays, which GGUF files do not");
        const uint32_t item = scalar<uint32_t>(key.c_str());
        const uint64_t count = scalar<uint64_t>(key.c_str());
        MC_CHECK(count <= n_ - pos_, path_, ": metadata ", key, " claims ", count, " items, more than the file holds");
        nlohmann::json a = nlohmann::json::array();
        for (uint64_t i = 0; i < count; ++i) a.push_back(value(item, key, depth + 1));
        return a;
      }
      default:
        throw Error(str_cat(path_, ": metadata ", key, " has an unknown value type ", type, " (a damaged file?)"));
    }
  }
  size_t pos() const { return pos_; }

 private:
  void need(uint64_t k, const char* what) {
    MC_CHECK(k <= n_ - pos_, path_, ": truncated: the header ends inside ", what, " (", n_,
             " bytes; the file is incomplete or not a GGUF model)");
  }
  const uint8_t* p_;
  size_t n_, pos_ = 0;
  const std::string& path_;
};

}  // namespace

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

GgufFile::GgufFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  MC_CHECK(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  size_ = static_cast<size_t>(st.st_size);
  if (size_ >= 4) {
    map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) map_ = nullptr;
  }
  ::close(fd);
  const auto* base = static_cast<const uint8_t*>(map_);
  try {
    MC_CHECK(base && std::memcmp(base, "GGUF", 4) == 0, path, " is not a GGUF file (it does not start with \"GGUF\")");
    Cursor c(base, size_, path_);
    c.scalar<uint32_t>("magic");
    version_ = c.scalar<uint32_t>("the version");
    MC_CHECK(version_ == 2 || version_ == 3, path, ": GGUF version ", version_, " is not supported (2 and 3 are)");
    const uint64_t n_tensors = c.scalar<uint64_t>("the tensor count");
    const uint64_t n_kv = c.scalar<uint64_t>("the metadata count");
    MC_CHECK(n_tensors < size_ && n_kv < size_, path, ": header counts (", n_tensors, " tensors, ", n_kv,
             " metadata keys) exceed the file's size; it is damaged");
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = c.string("a metadata key");
      const uint32_t type = c.scalar<uint32_t>(key.c_str());
      meta_[key] = c.value(type, key);
    }
    struct Info {
      uint64_t offset;
    };
    std::vector<Info> offsets;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensor t;
      t.name = c.string("a tensor name");
      const uint32_t rank = c.scalar<uint32_t>(t.name.c_str());
      MC_CHECK(rank >= 1 && rank <= 4, path, ": tensor ", t.name, " has rank ", rank, " (GGUF allows 1 to 4)");
      for (uint32_t r = 0; r < rank; ++r) {
        const uint64_t d = c.scalar<uint64_t>(t.name.c_str());
        MC_CHECK(d > 0 && d < (uint64_t{1} << 40), path, ": tensor ", t.name, " has dimension ", d);
        t.dims.push_back(static_cast<int64_t>(d));
      }
      t.type = c.scalar<uint32_t>(t.name.c_str());
      offsets.push_back({c.scalar<uint64_t>(t.name.c_str())});
      MC_CHECK(!index_.count(t.name), path, ": tensor ", t.name, " is listed twice");
      index_[t.name] = tensors_.size();
      tensors_.push_back(std::move(t));
    }
    uint64_t align = 32;
    if (has("general.alignment")) {
      MC_CHECK(get("general.alignment").is_number_unsigned(), path, ": general.alignment is not an unsigned integer");
      align = get("general.alignment").get<uint64_t>();
      MC_CHECK(align > 0 && (align & (align - 1)) == 0, path, ": general.alignment ", align, " is not a power of two");
    }
    const uint64_t data_start = (c.pos() + align - 1) / align * align;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      GgufTensor& t = tensors_[i];
      const GgmlTypeInfo* info = ggml_type_info(t.type);
      if (!info) continue;  // an unknown type: named as such when the tensor is used
      MC_CHECK(t.dims[0] % info->block == 0, path, ": tensor ", t.name, "'s rows (", t.dims[0],
               " values) are not a whole number of ", info->name, " blocks of ", info->block);
      t.nbytes = ggml_nbytes(static_cast<GgmlType>(t.type), t.numel());
      const uint64_t begin = data_start + offsets[i].offset;
      MC_CHECK(offsets[i].offset % align == 0, path, ": tensor ", t.name, " is not aligned to ", align, " bytes");
      MC_CHECK(begin <= size_ && t.nbytes <= size_ - begin, path, ": truncated: tensor ", t.name, " (", info->name,
               ", ", t.nbytes, " bytes at ", begin, ") ends past the file's end (", size_,
               " bytes); the download or the assembly of its parts is incomplete");
      t.data = base + begin;
    }
  } catch (...) {
    if (map_) ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

GgufFile::~GgufFile() {
  if (map_) ::munmap(map_, size_);
}

const nlohmann::json& GgufFile::get(const std::string& key) const {
  auto it = meta_.find(key);
  MC_CHECK(it != meta_.end(), path_, ": metadata key ", key, " is missing");
  return it->second;
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace mc::model
