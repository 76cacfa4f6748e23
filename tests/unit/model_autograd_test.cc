// The libtorch Qwen models are trainable: the gradient of a log-likelihood loss reaches every
// parameter (through the fused q/k/v and gate/up tensors) and equals transformers' gradient,
// parameter by parameter under its Hugging Face name. Reference made by tiny_models.py.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/subprocess.h"
#include "model/qwen_model.h"
#include "model/safetensors.h"

namespace {

namespace fs = std::filesystem;

at::Tensor as_tensor(const mc::model::TensorView& v) {
  return at::from_blob(const_cast<uint8_t*>(v.data), v.shape, at::kFloat).clone();
}

class ModelAutograd : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelAutograd, GradientsMatchTransformers) {
  fs::path dir = fs::temp_directory_path() / ("mc-grad-" + GetParam() + "-" + std::to_string(::getpid()));
  mc::SubprocessOptions make;
  make.argv = {"python3", "tiny_models.py", dir.string(), GetParam(), "--grads"};
  make.cwd = std::string(MUSACODER_SOURCE_DIR) + "/tests/python";
  auto made = mc::run_command(make, 300000);
  if (!made.status.ok() && made.err.find("No module named 'transformers'") != std::string::npos)
    GTEST_SKIP() << "transformers is not installed (scripts/setup.sh installs it)";
  ASSERT_TRUE(made.status.ok()) << made.err;

  auto model = mc::model::QwenModel::load(dir.string(), c10::Device(c10::kCPU));
  model.set_requires_grad(true);
  std::vector<int64_t> ids{5, 17, 33, 100, 7, 250, 3, 9, 41, 12, 77, 150};  // tiny_models.GRAD_IDS
  auto loss = -model.token_logprobs(at::tensor(ids).unsqueeze(0)).sum();
  loss.backward();

  mc::model::SafetensorsFile ref((dir / "reference_grads.safetensors").string());
  EXPECT_NEAR(loss.item<float>(), as_tensor(ref.get("loss")).item<float>(), 1e-4);
  int compared = 0;
  for (auto& [name, grad] : model.named_gradients()) {
    ASSERT_TRUE(grad.defined()) << "no gradient reached " << name;
    ASSERT_TRUE(ref.has(name)) << name;
    auto want = as_tensor(ref.get(name));
    EXPECT_TRUE(at::allclose(grad, want, 1e-4, 1e-5)) << name << ": max |diff| " << (grad - want).abs().max().item<float>();
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(model.named_parameters().size()));
  EXPECT_GT(compared, 20);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Qwen, ModelAutograd, ::testing::Values("qwen2", "qwen3"));

}  // namespace
