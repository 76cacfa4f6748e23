#include "common/fs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/check.h"

namespace mc {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  MC_CHECK(in.good(), "cannot read ", path.string(), ": ",
           fs::exists(path) ? "permission denied or not a file" : "no such file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file_atomic(const fs::path& path, const std::string& data) {
  write_file_atomic(path, [&](std::ostream& out) { out << data; });
}

void write_file_atomic(const fs::path& path, const std::function<void(std::ostream&)>& write) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(getpid()) + "." + std::to_string(rand());
  {
    std::ofstream out(tmp, std::ios::binary);
    MC_CHECK(out.good(), "cannot write ", tmp.string());
    write(out);
    MC_CHECK(out.good(), "write failed for ", tmp.string(), " (disk full?)");
  }
  fs::rename(tmp, path);
}

FileLock::FileLock(const fs::path& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  MC_CHECK(fd_ >= 0, "cannot open lock file ", path.string());
  while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
}

FileLock::~FileLock() {
  flock(fd_, LOCK_UN);
  ::close(fd_);
}

TempDir::TempDir(const std::string& prefix) {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "XXXXXX";
  MC_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed for ", tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace mc
