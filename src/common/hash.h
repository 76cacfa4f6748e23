// Content hashing for cache keys and job ids.
#pragma once

#include <string>
#include <string_view>

namespace mc {

// Lower-case hex SHA-256 of `data`. Thread-safe.
std::string sha256_hex(std::string_view data);

// Lower-case hex SHA-256 of a file's contents, read in pieces (a model's weights). Throws
// mc::Error naming the file when it cannot be read.
std::string file_sha256_hex(const std::string& path);

// Builds a key from several parts without ambiguity (each part is length-prefixed).
class KeyBuilder {
 public:
  KeyBuilder& add(std::string_view part);
  std::string hex() const { return sha256_hex(buf_); }

 private:
  std::string buf_;
};

}  // namespace mc
