#include "common/hash.h"

#include <openssl/evp.h>

#include "common/check.h"

namespace mc {

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  MC_CHECK(EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) == 1,
           "EVP_Digest(sha256) failed");
  static const char* kHex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

KeyBuilder& KeyBuilder::add(std::string_view part) {
  buf_ += std::to_string(part.size());
  buf_ += ':';
  buf_ += part;
  buf_ += ';';
  return *this;
}

}  // namespace mc
