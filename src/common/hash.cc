#include "common/hash.h"

#include <openssl/evp.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "common/check.h"

namespace mc {

namespace {

std::string to_hex(const unsigned char* digest, unsigned len) {
  static const char* kHex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  MC_CHECK(EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) == 1,
           "EVP_Digest(sha256) failed");
  return to_hex(digest, len);
}

std::string file_sha256_hex(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  MC_CHECK(f, "cannot read ", path);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> close(f, &std::fclose);
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  MC_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "EVP_DigestInit(sha256) failed");
  std::vector<char> buf(8 << 20);
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0)
    MC_CHECK(EVP_DigestUpdate(ctx.get(), buf.data(), n) == 1, "EVP_DigestUpdate(sha256) failed");
  MC_CHECK(!std::ferror(f), "error reading ", path);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  MC_CHECK(EVP_DigestFinal_ex(ctx.get(), digest, &len) == 1, "EVP_DigestFinal(sha256) failed");
  return to_hex(digest, len);
}

KeyBuilder& KeyBuilder::add(std::string_view part) {
  buf_ += std::to_string(part.size());
  buf_ += ':';
  buf_ += part;
  buf_ += ';';
  return *this;
}

}  // namespace mc
