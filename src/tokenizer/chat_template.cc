#include "tokenizer/chat_template.h"

#include <filesystem>
#include <regex>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"

namespace mc::tok {

std::string render_chatml(const std::vector<ChatTurn>& turns, bool add_generation_prompt) {
  std::string out;
  for (const auto& t : turns) {
    MC_CHECK(t.role == "system" || t.role == "user" || t.role == "assistant" || t.role == "tool",
             "chat role must be system, user, assistant or tool, got '", t.role, "'");
    out += "<|im_start|>" + t.role + "\n" + t.content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::vector<ChatTurn> turns_from_json(const nlohmann::json& messages, const std::string& where) {
  const std::string at = where.empty() ? "" : where + ": ";
  MC_CHECK(messages.is_array() && !messages.empty(), at, "\"messages\" must be a non-empty list of {role, content}");
  std::vector<ChatTurn> turns;
  for (const auto& m : messages) {
    MC_CHECK(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") &&
                 m["content"].is_string(),
             at, "each message needs a string \"role\" and a string \"content\"");
    turns.push_back({m["role"], m["content"]});
  }
  return turns;
}

std::vector<ChatTurn> with_default_system(const ChatFormat& f, std::vector<ChatTurn> turns) {
  if (!f.default_system.empty() && (turns.empty() || turns[0].role != "system"))
    turns.insert(turns.begin(), ChatTurn{"system", f.default_system});
  return turns;
}

std::string render_chat(const ChatFormat& f, const std::vector<ChatTurn>& turns, bool add_generation_prompt) {
  return render_chatml(with_default_system(f, turns), add_generation_prompt);
}

ChatFormat read_chat_format(const std::string& model_dir) {
  ChatFormat f;
  const auto path = std::filesystem::path(model_dir) / "tokenizer_config.json";
  f.source = path.string();
  if (!std::filesystem::exists(path)) return f;
  auto j = nlohmann::json::parse(read_file(path), nullptr, false);
  MC_CHECK(!j.is_discarded(), path.string(), ": not valid JSON");
  if (!j.contains("chat_template")) return f;
  std::string tmpl;
  const auto& ct = j["chat_template"];
  if (ct.is_string()) {
    tmpl = ct.get<std::string>();
  } else if (ct.is_array()) {  // named templates: [{"name": "default", "template": "..."}, ...]
    for (const auto& t : ct)
      if (t.value("name", "") == "default") tmpl = t.value("template", "");
  }
  if (tmpl.empty()) return f;
  f.chatml = tmpl.find("<|im_start|>") != std::string::npos;
  // A literal system turn: '<|im_start|>system\nTEXT<|im_end|>' (the template's "\n" is a
  // backslash and an n).
  static const std::regex kDefault(R"(<\|im_start\|>system\\n([^'"<]+)<\|im_end\|>)");
  std::smatch m;
  if (f.chatml && std::regex_search(tmpl, m, kDefault)) {
    f.default_system = m[1].str();
    for (size_t at; (at = f.default_system.find("\\n")) != std::string::npos;) f.default_system.replace(at, 2, "\n");
  }
  return f;
}

}  // namespace mc::tok
