// Small filesystem helpers with errors that name the path.
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>

namespace mc {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path);  // throws mc::Error naming the path
// Writes via a temporary file and rename, so readers never see half a file.
void write_file_atomic(const fs::path& path, const std::string& data);
// The same, with the content streamed by `write` (a file larger than memory should hold at once).
void write_file_atomic(const fs::path& path, const std::function<void(std::ostream&)>& write);

// Holds an exclusive flock on a file (created if missing) for its lifetime: between processes,
// e.g. one build of a candidate however many judges want it, or one writer of a state file.
class FileLock {
 public:
  explicit FileLock(const fs::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// A fresh directory removed (recursively) by the destructor. Not copyable.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "musacoder-");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace mc
