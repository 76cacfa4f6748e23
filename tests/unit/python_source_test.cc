#include "eval/python_source.h"

#include <gtest/gtest.h>

using namespace mc::eval;

TEST(PythonSource, ViewsBlankStringsAndComments) {
  std::string src = "x = 'abc'  # torch.relu(\ny = \"\"\"cuda\ncode\"\"\"\n";
  auto v = python_views(src);
  ASSERT_EQ(v.code.size(), src.size());
  EXPECT_EQ(v.code.find("abc"), std::string::npos);
  EXPECT_EQ(v.code.find("torch.relu"), std::string::npos);
  EXPECT_NE(v.strings.find("cuda\ncode"), std::string::npos);
  EXPECT_EQ(v.strings.find("x ="), std::string::npos);
}

TEST(PythonSource, LoadInlineFromModuleLevelStrings) {
  std::string src = R"PY(
from torch.utils.cpp_extension import load_inline
header = "#include <torch/extension.h>\n"
body = r"""
__global__ void k() {}
"""
cpp = ("torch::Tensor f(torch::Tensor x);"
       "")
ext = load_inline(name="my_ext", cpp_sources=cpp, cuda_sources=header + body,
                  functions=["f"], extra_cflags=[""], verbose=True, extra_cuda_cflags=["-O3"])
)PY";
  std::string why;
  auto calls = find_load_inline_calls(src, &why);
  ASSERT_TRUE(calls) << why;
  ASSERT_EQ(calls->size(), 1u);
  const auto& c = (*calls)[0];
  EXPECT_EQ(c.name, "my_ext");
  ASSERT_EQ(c.cuda_sources.size(), 1u);
  EXPECT_EQ(c.cuda_sources[0], "#include <torch/extension.h>\n\n__global__ void k() {}\n");
  EXPECT_EQ(c.cpp_sources[0], "torch::Tensor f(torch::Tensor x);");
  EXPECT_EQ(c.functions, std::vector<std::string>{"f"});
  EXPECT_EQ(c.extra_cuda_cflags, std::vector<std::string>{"-O3"});
  EXPECT_TRUE(c.with_cuda);
}

TEST(PythonSource, UnsupportedArgumentsFallBackWithReason) {
  std::string why;
  EXPECT_FALSE(find_load_inline_calls("ext = load_inline(name='a', cpp_sources=f'{x}')", &why));
  EXPECT_NE(why.find("f-string"), std::string::npos);
  EXPECT_FALSE(find_load_inline_calls("ext = load_inline(name='a', cpp_sources=make())", &why));
  EXPECT_NE(why.find("call"), std::string::npos);
  EXPECT_FALSE(find_load_inline_calls("ext = load_inline(**kw)", &why));
}

TEST(PythonSource, SourceKeyMatchesThePythonHarness) {
  // The same digest is computed by python/musacoder_harness/candidate.py:source_key for
  // load_inline(name="k", cpp_sources="int f();", cuda_sources=["a", "b"], functions=["f"]);
  // tests/python/test_source_key.py asserts the Python side against the same literal.
  LoadInlineCall c;
  c.name = "k";
  c.cpp_sources = {"int f();"};
  c.cuda_sources = {"a", "b"};
  c.functions = {"f"};
  c.with_cuda = true;
  EXPECT_EQ(c.source_key(), "53f16fee3a2b3d95b8c56a687c64da9f9776de9206bdf5b109e0d455995db3b2");
}
