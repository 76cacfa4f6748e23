// Text from outside (compiler output, model-written answers) as valid UTF-8, so that JSON can
// carry it: nlohmann::json refuses to dump a string with invalid bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mc {

// Whether s is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
// U+10FFFF).
bool is_valid_utf8(std::string_view s);

// s with each byte that does not begin a well-formed sequence replaced by U+FFFD.
std::string valid_utf8(std::string_view s);

// At most max_bytes of s, cut before a character that would not fit whole.
std::string_view utf8_prefix(std::string_view s, size_t max_bytes);

}  // namespace mc
