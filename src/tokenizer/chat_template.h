// ChatML, the chat format of Qwen models: <|im_start|>role\ncontent<|im_end|>\n per turn, and
// "<|im_start|>assistant\n" as the generation prompt.
#pragma once

#include <string>
#include <vector>

namespace mc::tok {

struct ChatTurn {
  std::string role;  // system | user | assistant | tool
  std::string content;
};

// Throws mc::Error for an unknown role.
std::string render_chatml(const std::vector<ChatTurn>& turns, bool add_generation_prompt);

}  // namespace mc::tok
