// TensorBoard event files, the format `tensorboard --logdir` reads: a TFRecord stream
// (length, masked CRC-32C of the length, the record, masked CRC-32C of the record) of
// tensorflow.Event protobufs. Only scalars are written, so the two messages involved are
// encoded directly (Event{wall_time=1, step=2, file_version=3, summary=5},
// Summary{value=1}, Summary.Value{tag=1, simple_value=2}); tests read the files back with
// the tensorboard package itself.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace mc::train {

uint32_t crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates dir/events.out.tfevents.<seconds>.<host>.<pid> and writes the version record.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  void scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::string path_;
  FILE* f_ = nullptr;
};

}  // namespace mc::train
