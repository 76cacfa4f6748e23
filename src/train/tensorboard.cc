#include "train/tensorboard.h"

#include <array>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include <fmt/format.h>

#include "common/check.h"
#include "common/clock.h"

namespace mc::train {
namespace {

// Protobuf wire format: varints, 64-bit and 32-bit fixed fields, length-delimited fields.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wire) { varint(out, (static_cast<uint64_t>(field) << 3) | wire); }
template <typename T>
void fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts (x86-64, aarch64)
  out.append(b, sizeof(T));
}
void bytes_field(std::string& out, int field, const std::string& s) {
  key(out, field, 2);
  varint(out, s.size());
  out += s;
}

std::string event(double wall_time, int64_t step) {
  std::string e;
  key(e, 1, 1);
  fixed(e, wall_time);
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  return e;
}

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // Castagnoli, reflected
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  double t = unix_now();
  path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, static_cast<int64_t>(t), host, getpid());
  f_ = std::fopen(path_.c_str(), "wb");
  MC_CHECK(f_, "cannot write TensorBoard events to ", path_);
  std::string e = event(t, 0);
  bytes_field(e, 3, "brain.Event:2");
  record(e);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::record(const std::string& data) {
  std::string head;
  fixed<uint64_t>(head, data.size());
  fixed<uint32_t>(head, masked(crc32c(head.data(), 8)));
  std::string tail;
  fixed<uint32_t>(tail, masked(crc32c(data.data(), data.size())));
  std::fwrite(head.data(), 1, head.size(), f_);
  std::fwrite(data.data(), 1, data.size(), f_);
  std::fwrite(tail.data(), 1, tail.size(), f_);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  std::string val;
  bytes_field(val, 1, tag);
  key(val, 2, 5);
  fixed(val, static_cast<float>(value));
  std::string summary;
  bytes_field(summary, 1, val);
  std::string e = event(unix_now(), step);
  bytes_field(e, 5, summary);
  record(e);
}

void TensorBoardWriter::flush() {
  if (f_) std::fflush(f_);
}

}  // namespace mc::train
