#include "tokenizer/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <mutex>
#include <shared_mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"

namespace mc::tok {
namespace {

// GPT-2's reversible map from bytes to printable unicode code points.
std::vector<uint32_t> bytes_to_unicode() {
  std::vector<uint32_t> map(256, 0);
  std::vector<bool> direct(256, false);
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) map[b] = direct[b] ? b : 256 + n++;
  return map;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Splits a UTF-8 string into its characters (each a string).
std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

struct PairHash {
  size_t operator()(const std::pair<std::string, std::string>& p) const {
    return std::hash<std::string>()(p.first) * 1000003u ^ std::hash<std::string>()(p.second);
  }
};

struct Added {
  std::string content;
  int32_t id;
  bool special;
};

}  // namespace

struct BpeTokenizer::Impl {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_tok;
  std::unordered_map<std::pair<std::string, std::string>, int, PairHash> ranks;
  std::vector<Added> added;  // longest first
  std::vector<bool> special_ids;
  std::vector<std::string> byte_enc;              // byte -> its unicode string
  std::unordered_map<std::string, uint8_t> byte_dec;
  pcre2_code* re = nullptr;                        // the pre-tokenizer's split pattern
  bool ignore_merges = false;
  // Words already merged. encode() runs on many threads at once (serve-model's HTTP handlers),
  // so the cache takes a lock: unguarded, concurrent inserts rehashed it under readers and
  // crashed the server (SIGSEGV on the H100 at 32 concurrent chat requests).
  mutable std::shared_mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  ~Impl() {
    if (re) pcre2_code_free(re);
  }

  void compile(const std::string& pattern, const std::string& origin) {
    int err;
    PCRE2_SIZE off;
    re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                       &off, nullptr);
    if (!re) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw Error(origin + ": pre-tokenizer regex does not compile at offset " + std::to_string(off) + ": " +
                  reinterpret_cast<char*>(msg));
    }
    // JIT where the library has it (several times faster on code); the interpreter otherwise.
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
  }

  // "Isolated" split: every match and every gap between matches is a piece.
  std::vector<std::string_view> split(std::string_view text) const {
    std::vector<std::string_view> out;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
    size_t pos = 0, last = 0;
    // The first match checks that the whole text is valid UTF-8; later ones skip that check,
    // which would otherwise scan the whole text once per piece (quadratic in a file's length).
    uint32_t opts = 0;
    while (pos <= text.size()) {
      int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, opts, md, nullptr);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)  // e.g. the JIT's stack: the interpreter decides
        rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, opts | PCRE2_NO_JIT, md,
                         nullptr);
      opts = PCRE2_NO_UTF_CHECK;
      if (rc < 0) break;
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t s = ov[0], e = ov[1];
      if (s > last) out.push_back(text.substr(last, s - last));
      if (e > s) out.push_back(text.substr(s, e - s));
      last = e;
      if (e == s) {  // empty match: step one character
        if (e >= text.size()) break;
        unsigned char c = text[e];
        pos = e + (c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4);
      } else {
        pos = e;
      }
    }
    if (last < text.size()) out.push_back(text.substr(last));
    pcre2_match_data_free(md);
    return out;
  }

  std::vector<int32_t> bpe(const std::string& word) const {
    {
      std::shared_lock<std::shared_mutex> lock(cache_mu);
      if (auto it = cache.find(word); it != cache.end()) return it->second;
    }
    std::vector<int32_t> ids;
    if (ignore_merges) {
      if (auto it = vocab.find(word); it != vocab.end()) return {it->second};
    }
    std::vector<std::string> sym = utf8_chars(word);
    while (sym.size() > 1) {
      int best = INT_MAX;
      size_t at = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = ranks.find({sym[i], sym[i + 1]});
        if (it != ranks.end() && it->second < best) best = it->second, at = i;
      }
      if (best == INT_MAX) break;
      // Merge every occurrence of this pair, left to right (as tokenizers does).
      std::string a = sym[at], b = sym[at + 1];
      std::vector<std::string> next;
      for (size_t i = 0; i < sym.size();) {
        if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
          next.push_back(a + b);
          i += 2;
        } else {
          next.push_back(sym[i++]);
        }
      }
      sym.swap(next);
    }
    for (const auto& s : sym) {
      auto it = vocab.find(s);
      MC_CHECK(it != vocab.end(), "token '", s, "' is not in the vocabulary (byte-level vocab incomplete?)");
      ids.push_back(it->second);
    }
    std::unique_lock<std::shared_mutex> lock(cache_mu);
    if (cache.size() < 200000) cache.emplace(word, ids);
    return ids;
  }

  void encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    for (auto piece : split(text)) {
      std::string mapped;
      for (unsigned char c : piece) mapped += byte_enc[c];
      auto ids = bpe(mapped);
      out.insert(out.end(), ids.begin(), ids.end());
    }
  }
};

BpeTokenizer::BpeTokenizer() : impl_(std::make_unique<Impl>()) {}
BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  MC_CHECK(std::filesystem::is_regular_file(path), "tokenizer file not found: ", path);
  return from_json(read_file(path), path);
}

BpeTokenizer BpeTokenizer::from_json(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(origin + ": not valid JSON: " + e.what());
  }
  BpeTokenizer t;
  Impl& m = *t.impl_;
  MC_CHECK(j.contains("model") && j["model"].is_object(), origin, ": no \"model\" object");
  const auto& model = j["model"];
  MC_CHECK(model.value("type", "") == "BPE", origin, ": model type '", model.value("type", ""),
           "' is not supported (only byte-level BPE)");
  MC_CHECK(model.contains("vocab") && model["vocab"].is_object(), origin, ": model has no vocab");
  m.ignore_merges = model.value("ignore_merges", false);
  int32_t max_id = -1;
  for (auto& [tok, id] : model["vocab"].items()) {
    m.vocab[tok] = id.get<int32_t>();
    max_id = std::max(max_id, id.get<int32_t>());
  }
  int rank = 0;
  for (const auto& mg : model.value("merges", nlohmann::json::array())) {
    std::string a, b;
    if (mg.is_string()) {
      std::string s = mg;
      size_t sp = s.find(' ');
      MC_CHECK(sp != std::string::npos, origin, ": malformed merge '", s, "'");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else {
      MC_CHECK(mg.is_array() && mg.size() == 2, origin, ": malformed merge ", mg.dump());
      a = mg[0], b = mg[1];
    }
    m.ranks.emplace(std::make_pair(a, b), rank++);
  }
  for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
    Added x{a.at("content"), a.at("id").get<int32_t>(), a.value("special", false)};
    m.vocab[x.content] = x.id;
    max_id = std::max(max_id, x.id);
    m.added.push_back(x);
  }
  std::sort(m.added.begin(), m.added.end(), [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
  m.id_to_tok.assign(max_id + 1, "");
  m.special_ids.assign(max_id + 1, false);
  for (auto& [tok, id] : m.vocab) m.id_to_tok[id] = tok;
  for (auto& a : m.added) m.special_ids[a.id] = a.special;

  auto map = bytes_to_unicode();
  m.byte_enc.resize(256);
  for (int b = 0; b < 256; ++b) {
    append_utf8(m.byte_enc[b], map[b]);
    m.byte_dec[m.byte_enc[b]] = static_cast<uint8_t>(b);
  }

  // Normalizer: none or NFC (inputs are expected NFC already; other normalizers unsupported).
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    std::string nt = j["normalizer"].value("type", "");
    MC_CHECK(nt == "NFC", origin, ": normalizer '", nt, "' is not supported (none or NFC)");
  }
  // Pre-tokenizer: ByteLevel (GPT-2 regex) or Sequence[Split(regex, Isolated), ByteLevel(use_regex=false)].
  static const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  const auto& pt = j.value("pre_tokenizer", nlohmann::json());
  std::string pattern;
  auto byte_level = [&](const nlohmann::json& b) {
    MC_CHECK(!b.value("add_prefix_space", false), origin, ": ByteLevel add_prefix_space is not supported");
    if (b.value("use_regex", true)) pattern = kGpt2;
  };
  MC_CHECK(pt.is_object(), origin, ": no pre_tokenizer (byte-level BPE needs one)");
  if (pt.value("type", "") == "ByteLevel") {
    byte_level(pt);
  } else if (pt.value("type", "") == "Sequence") {
    for (const auto& p : pt.at("pretokenizers")) {
      std::string ty = p.value("type", "");
      if (ty == "Split") {
        MC_CHECK(p.value("behavior", "") == "Isolated" && !p.value("invert", false), origin,
                 ": only Split with behavior Isolated is supported");
        MC_CHECK(p.contains("pattern") && p["pattern"].contains("Regex"), origin, ": Split needs a Regex pattern");
        pattern = p["pattern"]["Regex"];
      } else if (ty == "ByteLevel") {
        if (p.value("use_regex", true)) byte_level(p);
      } else {
        throw Error(origin + ": pre-tokenizer '" + ty + "' is not supported");
      }
    }
  } else {
    throw Error(origin + ": pre-tokenizer '" + pt.value("type", "") + "' is not supported");
  }
  MC_CHECK(!pattern.empty(), origin, ": no pre-tokenizer regex");
  m.compile(pattern, origin);
  return t;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const Added* hit = nullptr;
    for (const auto& a : m.added)
      if (!a.content.empty() && text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > start) m.encode_plain(text.substr(start, i - start), out);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  if (start < text.size()) m.encode_plain(text.substr(start), out);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string out;
  for (int32_t id : ids) {
    const std::string& tok = id_to_token(id);
    bool added = false;
    for (const auto& a : m.added)
      if (a.id == id) added = true;
    if (added) {
      if (!(skip_special && m.special_ids[id])) out += tok;
      continue;
    }
    for (const auto& ch : utf8_chars(tok)) {
      auto it = m.byte_dec.find(ch);
      out += it != m.byte_dec.end() ? std::string(1, static_cast<char>(it->second)) : ch;
    }
  }
  return out;
}

int32_t BpeTokenizer::token_to_id(const std::string& token) const {
  auto it = impl_->vocab.find(token);
  return it == impl_->vocab.end() ? -1 : it->second;
}

const std::string& BpeTokenizer::id_to_token(int32_t id) const {
  MC_CHECK(id >= 0 && id < static_cast<int32_t>(impl_->id_to_tok.size()), "token id ", id, " is out of range (vocab size ",
           impl_->id_to_tok.size(), ")");
  return impl_->id_to_tok[id];
}

size_t BpeTokenizer::vocab_size() const { return impl_->id_to_tok.size(); }

}  // namespace mc::tok
