// safetensors reader and writer against the reference `safetensors` Python package (with torch
// for bf16): files it writes (single and sharded) read back byte for byte; files we write load in
// it unchanged; malformed files give errors that name the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/fs.h"
#include "common/subprocess.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace mc::model;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::path(mc::test::test_cache_dir()) / "safetensors" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void python(const std::string& code) {
  mc::SubprocessOptions so;
  so.argv = {"python3", "-c", code};
  auto r = mc::run_command(so, 120000);
  ASSERT_TRUE(r.status.ok()) << r.err << r.out;
}

bool has_safetensors() {
  mc::SubprocessOptions so;
  so.argv = {"python3", "-c", "import safetensors, torch"};
  return mc::run_command(so, 60000).status.ok();
}

}  // namespace

TEST(Safetensors, ReadsWhatTheReferenceWritesSingleAndSharded) {
  if (!has_safetensors()) GTEST_SKIP() << "python safetensors not installed (scripts/setup.sh)";
  fs::path d = scratch("read");
  python("import torch, json\n"
         "from safetensors.torch import save_file\n"
         "g = torch.Generator().manual_seed(0)\n"
         "t = {'model.embed_tokens.weight': torch.randn(16, 8, generator=g),\n"
         "     'model.layers.0.self_attn.q_proj.bias': torch.randn(8, generator=g).to(torch.bfloat16),\n"
         "     'model.norm.weight': torch.ones(8, dtype=torch.float16),\n"
         "     'ids': torch.arange(5, dtype=torch.int64), 'scalar': torch.tensor(3.5)}\n"
         "save_file(t, '" + (d / "model.safetensors").string() + "', metadata={'format': 'pt'})\n"
         "for k, v in t.items(): open('" + d.string() + "/' + k + '.bin', 'wb').write(v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())\n"
         "import os; os.makedirs('" + (d / "sharded").string() + "', exist_ok=True)\n"
         "a = {k: v for k, v in t.items() if k.startswith('model.')}; b = {k: v for k, v in t.items() if not k.startswith('model.')}\n"
         "save_file(a, '" + (d / "sharded/model-00001-of-00002.safetensors").string() + "')\n"
         "save_file(b, '" + (d / "sharded/model-00002-of-00002.safetensors").string() + "')\n"
         "wm = {k: 'model-00001-of-00002.safetensors' for k in a}; wm.update({k: 'model-00002-of-00002.safetensors' for k in b})\n"
         "json.dump({'metadata': {}, 'weight_map': wm}, open('" + (d / "sharded/model.safetensors.index.json").string() + "', 'w'))\n");
  SafetensorsFile f((d / "model.safetensors").string());
  EXPECT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto& q = f.get("model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(q.dtype, DType::kBF16);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(f.get("scalar").shape.size(), 0u);
  for (const auto& t : f.tensors()) {
    std::string want = mc::read_file(d / (t.name + ".bin"));
    ASSERT_EQ(want.size(), t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(want.data(), t.data, t.nbytes), 0) << t.name;
  }
  Checkpoint single(d.string()), sharded((d / "sharded").string());
  EXPECT_EQ(single.names(), sharded.names());
  for (const auto& n : sharded.names())
    EXPECT_EQ(std::memcmp(single.get(n).data, sharded.get(n).data, single.get(n).nbytes), 0) << n;
  EXPECT_THROW(sharded.get("lm_head.weight"), mc::Error);
}

TEST(Safetensors, WhatWeWriteLoadsInTheReference) {
  if (!has_safetensors()) GTEST_SKIP() << "python safetensors not installed (scripts/setup.sh)";
  fs::path d = scratch("write");
  std::vector<float> w(6);
  for (int i = 0; i < 6; ++i) w[i] = 0.5f * i - 1;
  std::vector<int64_t> ids = {7, 8, 9};
  std::vector<uint16_t> bf = {0x3f80, 0x4000};  // bf16 1.0, 2.0
  write_safetensors((d / "model.safetensors").string(),
                    {{"lm_head.weight", DType::kF32, {2, 3}, reinterpret_cast<const uint8_t*>(w.data()), 24},
                     {"ids", DType::kI64, {3}, reinterpret_cast<const uint8_t*>(ids.data()), 24},
                     {"b", DType::kBF16, {2}, reinterpret_cast<const uint8_t*>(bf.data()), 4}},
                    {{"format", "pt"}});
  python("import torch\nfrom safetensors.torch import load_file\nfrom safetensors import safe_open\n"
         "t = load_file('" + (d / "model.safetensors").string() + "')\n"
         "assert torch.equal(t['lm_head.weight'], torch.tensor([[-1.0, -0.5, 0.0], [0.5, 1.0, 1.5]])), t\n"
         "assert torch.equal(t['ids'], torch.tensor([7, 8, 9])), t\n"
         "assert t['b'].dtype == torch.bfloat16 and t['b'].tolist() == [1.0, 2.0], t\n"
         "with safe_open('" + (d / "model.safetensors").string() + "', 'pt') as f: assert f.metadata() == {'format': 'pt'}\n");
  EXPECT_THROW(write_safetensors((d / "x.safetensors").string(),
                                 {{"a", DType::kF32, {2}, reinterpret_cast<const uint8_t*>(w.data()), 4}}),
               mc::Error);
}

TEST(Safetensors, MalformedFilesAreNamed) {
  fs::path d = scratch("bad");
  auto expect = [&](const std::string& bytes, const std::string& needle) {
    mc::write_file_atomic(d / "m.safetensors", bytes);
    try {
      SafetensorsFile f((d / "m.safetensors").string());
      ADD_FAILURE() << "accepted; wanted: " << needle;
    } catch (const mc::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto file = [](const std::string& header, size_t data) {
    std::string s;
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) s += static_cast<char>((n >> (8 * i)) & 0xFF);
    return s + header + std::string(data, '\0');
  };
  expect("abc", "too short");
  expect(file("{\"a\": 1", 0), "header is not valid JSON");
  expect(std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}", "exceeds the file");
  expect(file(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8), "outside the data");
  expect(file(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", 16), "need 12");
  expect(file(R"({"a": {"dtype": "F8_E9", "shape": [1], "data_offsets": [0, 1]}})", 1), "unsupported safetensors dtype 'F8_E9'");
  expect(file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12),
         "overlap");
  EXPECT_THROW(Checkpoint((d / "nothing").string()), mc::Error);
  fs::create_directories(d / "empty");
  try {
    Checkpoint c((d / "empty").string());
    ADD_FAILURE();
  } catch (const mc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither model.safetensors nor"), std::string::npos);
  }
}
