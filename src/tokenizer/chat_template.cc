#include "tokenizer/chat_template.h"

#include "common/check.h"

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

}  // namespace mc::tok
