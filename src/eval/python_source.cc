#include "eval/python_source.h"

#include <cctype>
#include <cstring>

#include "common/hash.h"

namespace mc::eval {
namespace {

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A string literal found by the scanner: [body_begin, body_end) is its content.
struct Literal {
  size_t begin, body_begin, body_end, end;  // begin at the prefix, end past the closing quote
  bool raw = false, fstring = false, bytes = false;
};

// Recognises a literal starting at i (at a prefix letter or quote). nullopt if not a literal.
std::optional<Literal> literal_at(const std::string& s, size_t i) {
  size_t j = i;
  bool raw = false, f = false, b = false;
  while (j < s.size() && j - i < 2 && std::strchr("rRbBuUfF", s[j])) {
    char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[j])));
    raw |= c == 'r';
    f |= c == 'f';
    b |= c == 'b';
    ++j;
  }
  if (j >= s.size() || (s[j] != '"' && s[j] != '\'')) return std::nullopt;
  if (j > i && i > 0 && is_ident(s[i - 1])) return std::nullopt;  // part of a longer name
  char q = s[j];
  bool triple = j + 2 < s.size() && s[j + 1] == q && s[j + 2] == q;
  size_t body = j + (triple ? 3 : 1);
  size_t k = body;
  while (k < s.size()) {
    if (s[k] == '\\') {
      k += 2;
      continue;
    }
    if (!triple && s[k] == '\n') break;  // unterminated: stop at the line end
    if (s[k] == q && (!triple || (k + 2 < s.size() && s[k + 1] == q && s[k + 2] == q))) {
      return Literal{i, body, k, k + (triple ? 3 : 1), raw, f, b};
    }
    ++k;
  }
  return Literal{i, body, std::min(k, s.size()), std::min(k, s.size()), raw, f, b};
}

std::string decode_escapes(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    switch (c) {
      case '\n': break;  // line continuation
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'x':
        if (i + 2 < s.size() + 1 && i + 2 <= s.size() - 1 + 1) {
          out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
          i += 2;
        }
        break;
      default: out += '\\'; out += c;  // unknown escapes stay as written, as in Python
    }
  }
  return out;
}

// ---- a small tokenizer for the expression subset -------------------------------------
struct Token {
  enum Kind { kName, kString, kOp, kNewline, kOther, kEnd } kind;
  std::string text;  // name, decoded string value, or operator
  bool unsupported_string = false;  // f-string or bytes: not a plain value
  bool line_start = false;          // first token of a logical line at column 0
};

std::vector<Token> tokenize(const std::string& s) {
  std::vector<Token> toks;
  int depth = 0;
  bool at_line_start = true;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (c == '\\' && i + 1 < s.size() && s[i + 1] == '\n') {
      i += 2;
      continue;
    }
    if (c == '\n') {
      if (depth == 0 && !toks.empty() && toks.back().kind != Token::kNewline)
        toks.push_back({Token::kNewline, "", false, false});
      at_line_start = depth == 0;
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      if (at_line_start && depth == 0) at_line_start = (i > 0 && s[i - 1] == '\n') ? false : false;
      ++i;
      continue;
    }
    bool col0 = at_line_start && (i == 0 || s[i - 1] == '\n');
    at_line_start = false;
    if (auto lit = literal_at(s, i)) {
      std::string body = s.substr(lit->body_begin, lit->body_end - lit->body_begin);
      Token t{Token::kString, lit->raw ? body : decode_escapes(body), lit->fstring || lit->bytes,
              col0};
      toks.push_back(std::move(t));
      i = lit->end;
      continue;
    }
    if (is_ident(c)) {
      size_t j = i;
      while (j < s.size() && is_ident(s[j])) ++j;
      bool digit = std::isdigit(static_cast<unsigned char>(c));
      toks.push_back({digit ? Token::kOther : Token::kName, s.substr(i, j - i), false, col0});
      i = j;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    if (c == '=' && i + 1 < s.size() && s[i + 1] == '=') {
      toks.push_back({Token::kOp, "==", false, col0});
      i += 2;
      continue;
    }
    toks.push_back({Token::kOp, std::string(1, c), false, col0});
    ++i;
  }
  toks.push_back({Token::kEnd, "", false, false});
  return toks;
}

struct Value {
  enum Kind { kStr, kList, kBool, kNone } kind = kNone;
  std::string str;
  std::vector<std::string> list;
  bool b = false;
};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  // Evaluates an expression at pos; nullopt (with why_) if outside the subset.
  std::optional<Value> expr(size_t& pos) {
    auto lhs = term(pos);
    if (!lhs) return std::nullopt;
    while (is_op(pos, "+")) {
      ++pos;
      auto rhs = term(pos);
      if (!rhs || rhs->kind != lhs->kind || (lhs->kind != Value::kStr && lhs->kind != Value::kList)) {
        why_ = "`+` of values other than two strings or two lists";
        return std::nullopt;
      }
      if (lhs->kind == Value::kStr) lhs->str += rhs->str;
      else lhs->list.insert(lhs->list.end(), rhs->list.begin(), rhs->list.end());
    }
    return lhs;
  }

  std::map<std::string, Value> env;
  std::string why_;

  bool is_op(size_t pos, const char* op) const {
    return t_[pos].kind == Token::kOp && t_[pos].text == op;
  }

 private:
  std::optional<Value> term(size_t& pos) {
    const Token& tok = t_[pos];
    if (tok.kind == Token::kString) {
      Value v{Value::kStr, "", {}, false};
      while (t_[pos].kind == Token::kString) {  // implicit concatenation
        if (t_[pos].unsupported_string) {
          why_ = "f-string or bytes literal";
          return std::nullopt;
        }
        v.str += t_[pos++].text;
      }
      return v;
    }
    if (tok.kind == Token::kName) {
      ++pos;
      if (tok.text == "True" || tok.text == "False") return Value{Value::kBool, "", {}, tok.text == "True"};
      if (tok.text == "None") return Value{};
      if (is_op(pos, "(") || is_op(pos, ".") || is_op(pos, "[")) {
        why_ = "call, attribute or subscript `" + tok.text + "...`";
        return std::nullopt;
      }
      auto it = env.find(tok.text);
      if (it == env.end()) {
        why_ = "name `" + tok.text + "` is not a module-level string";
        return std::nullopt;
      }
      return it->second;
    }
    if (is_op(pos, "(")) {
      ++pos;
      auto v = expr(pos);
      if (!v || !is_op(pos, ")")) {
        if (why_.empty()) why_ = "parenthesised expression";
        return std::nullopt;
      }
      ++pos;
      return v;
    }
    if (is_op(pos, "[")) {
      ++pos;
      Value list{Value::kList, "", {}, false};
      while (!is_op(pos, "]")) {
        auto v = expr(pos);
        if (!v || v->kind != Value::kStr) {
          if (why_.empty()) why_ = "list element that is not a string";
          return std::nullopt;
        }
        list.list.push_back(v->str);
        if (is_op(pos, ",")) ++pos;
        else if (!is_op(pos, "]")) {
          why_ = "list syntax";
          return std::nullopt;
        }
      }
      ++pos;
      return list;
    }
    why_ = "expression `" + tok.text + "`";
    return std::nullopt;
  }

  const std::vector<Token>& t_;
};

// Skips a balanced expression (for arguments we do not need to understand).
void skip_arg(const std::vector<Token>& t, size_t& pos) {
  int depth = 0;
  while (t[pos].kind != Token::kEnd) {
    if (t[pos].kind == Token::kOp) {
      const std::string& o = t[pos].text;
      if (depth == 0 && (o == "," || o == ")")) return;
      if (o == "(" || o == "[" || o == "{") ++depth;
      if (o == ")" || o == "]" || o == "}") --depth;
    }
    ++pos;
  }
}

std::vector<std::string> as_list(const Value& v) {
  if (v.kind == Value::kStr) return {v.str};
  if (v.kind == Value::kList) return v.list;
  return {};
}

}  // namespace

SourceViews python_views(const std::string& src) {
  SourceViews v{src, std::string(src.size(), ' ')};
  for (size_t i = 0; i < src.size(); ++i)
    if (src[i] == '\n') v.strings[i] = '\n';
  size_t i = 0;
  while (i < src.size()) {
    char c = src[i];
    if (c == '#') {
      while (i < src.size() && src[i] != '\n') v.code[i++] = ' ';
      continue;
    }
    if (auto lit = literal_at(src, i); lit && (i == 0 || !is_ident(src[i - 1]))) {
      for (size_t k = lit->body_begin; k < lit->body_end; ++k) {
        if (src[k] != '\n') v.code[k] = ' ';
        v.strings[k] = src[k];
      }
      i = lit->end;
      continue;
    }
    if (is_ident(c)) {  // skip whole names so a prefix letter inside one is not a literal
      while (i < src.size() && is_ident(src[i])) ++i;
      continue;
    }
    ++i;
  }
  return v;
}

std::string cpp_strip_comments(const std::string& src) {
  std::string out = src;
  size_t i = 0;
  while (i < out.size()) {
    if (out[i] == '"' || out[i] == '\'') {  // skip C string/char literals
      char q = out[i++];
      while (i < out.size() && out[i] != q && out[i] != '\n') i += out[i] == '\\' ? 2 : 1;
      ++i;
    } else if (out.compare(i, 2, "//") == 0) {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out.compare(i, 2, "/*") == 0) {
      size_t end = out.find("*/", i + 2);
      end = end == std::string::npos ? out.size() : end + 2;
      for (; i < end; ++i)
        if (out[i] != '\n') out[i] = ' ';
    } else {
      ++i;
    }
  }
  return out;
}

std::string LoadInlineCall::source_key() const {
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "\x1f" : "") + v[i];
    return s;
  };
  std::string canon = "v1\x1e" + name + "\x1e" + join(cpp_sources) + "\x1e" + join(cuda_sources) +
                      "\x1e" + join(functions) + "\x1e" + join(extra_cflags) + "\x1e" +
                      join(extra_cuda_cflags) + "\x1e" + join(extra_ldflags) + "\x1e" +
                      join(extra_include_paths) + "\x1e" + (with_cuda ? "1" : "0");
  return sha256_hex(canon);
}

std::optional<std::vector<LoadInlineCall>> find_load_inline_calls(const std::string& src,
                                                                   std::string* why) {
  std::vector<Token> toks = tokenize(src);
  Parser p(toks);
  std::vector<LoadInlineCall> calls;
  auto fail = [&](const std::string& reason) -> std::optional<std::vector<LoadInlineCall>> {
    if (why) *why = reason;
    return std::nullopt;
  };
  for (size_t pos = 0; toks[pos].kind != Token::kEnd; ++pos) {
    const Token& tok = toks[pos];
    // Module-level `NAME = expr`: remember string values for later references.
    if (tok.kind == Token::kName && tok.line_start && p.is_op(pos + 1, "=")) {
      size_t e = pos + 2;
      p.why_.clear();
      auto v = p.expr(e);
      if (v && toks[e].kind == Token::kNewline) p.env[tok.text] = *v;
      else p.env.erase(tok.text);
      continue;
    }
    if (tok.kind != Token::kName || tok.text != "load_inline" || !p.is_op(pos + 1, "(")) continue;
    if (pos > 0 && toks[pos - 1].kind == Token::kName && toks[pos - 1].text == "import") continue;
    LoadInlineCall call;
    std::optional<bool> with_cuda;
    size_t a = pos + 2;
    int positional = 0;
    while (!p.is_op(a, ")")) {
      if (toks[a].kind == Token::kEnd) return fail("unterminated load_inline call");
      std::string kw;
      if (toks[a].kind == Token::kName && p.is_op(a + 1, "=")) {
        kw = toks[a].text;
        a += 2;
      } else if (p.is_op(a, "*")) {
        return fail("load_inline called with *args or **kwargs");
      } else {
        static const char* kPositional[] = {"name", "cpp_sources"};
        if (positional >= 2) return fail("load_inline positional argument beyond cpp_sources");
        kw = kPositional[positional++];
      }
      static const char* kIgnored[] = {"verbose", "build_directory", "is_python_module",
                                        "with_pytorch_error_handling", "keep_intermediates"};
      bool ignored = false;
      for (const char* k : kIgnored) ignored |= kw == k;
      if (ignored) {
        skip_arg(toks, a);
      } else {
        p.why_.clear();
        auto v = p.expr(a);
        if (!v) return fail("load_inline argument `" + kw + "`: " + p.why_);
        if (kw == "name" && v->kind == Value::kStr) call.name = v->str;
        else if (kw == "cpp_sources") call.cpp_sources = as_list(*v);
        else if (kw == "cuda_sources") call.cuda_sources = as_list(*v);
        else if (kw == "functions") call.functions = as_list(*v);
        else if (kw == "extra_cflags") call.extra_cflags = as_list(*v);
        else if (kw == "extra_cuda_cflags") call.extra_cuda_cflags = as_list(*v);
        else if (kw == "extra_ldflags") call.extra_ldflags = as_list(*v);
        else if (kw == "extra_include_paths") call.extra_include_paths = as_list(*v);
        else if (kw == "with_cuda" && v->kind == Value::kBool) with_cuda = v->b;
        else if (kw == "with_cuda" && v->kind == Value::kNone) with_cuda.reset();
        else return fail("load_inline argument `" + kw + "` is not understood");
      }
      if (p.is_op(a, ",")) ++a;
      else if (!p.is_op(a, ")")) return fail("load_inline argument list syntax");
    }
    if (call.name.empty()) return fail("load_inline call without a literal `name`");
    call.with_cuda = with_cuda.value_or(!call.cuda_sources.empty());
    calls.push_back(std::move(call));
    pos = a;
  }
  return calls;
}

}  // namespace mc::eval
