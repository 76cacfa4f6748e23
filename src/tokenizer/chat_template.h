// ChatML, the chat format of Qwen models: <|im_start|>role\ncontent<|im_end|>\n per turn, and
// "<|im_start|>assistant\n" as the generation prompt.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc::tok {

struct ChatTurn {
  std::string role;  // system | user | assistant | tool
  std::string content;
};

// A JSON list of {"role", "content"} objects (a prompts file's, a chat request's) as turns.
// Throws mc::Error, prefixed with `where`, for anything else.
std::vector<ChatTurn> turns_from_json(const nlohmann::json& messages, const std::string& where = "");

// Throws mc::Error for an unknown role.
std::string render_chatml(const std::vector<ChatTurn>& turns, bool add_generation_prompt);

// What a model folder's tokenizer_config.json says of its chat format. Our engine renders
// ChatML; Qwen2 and Qwen2.5 templates are ChatML that add a default system turn when the
// conversation has none ("You are a helpful assistant." / "You are Qwen, created by ..."),
// which is read from the template's literal. Without a tokenizer_config.json or a
// chat_template (our own models), ChatML without a default system turn.
struct ChatFormat {
  bool chatml = true;          // false: the template is not ChatML (our engine cannot render it)
  std::string default_system;  // "" : none
  std::string source;          // where this was read from, for messages
};
ChatFormat read_chat_format(const std::string& model_dir);

// The conversation as the model's template renders it: its default system turn first when the
// conversation has none. Every command that prompts a model (generate, serve-model, bench-model,
// RL rollouts) and SFT's rendering of training rows go through this, so that a model is trained
// on the prompts it is evaluated with.
std::vector<ChatTurn> with_default_system(const ChatFormat& f, std::vector<ChatTurn> turns);
std::string render_chat(const ChatFormat& f, const std::vector<ChatTurn>& turns, bool add_generation_prompt);

}  // namespace mc::tok
