// The launchers' variables (torchrun, SLURM) read into a DistEnv, and the errors for bad ones.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/check.h"
#include "train/distributed.h"

namespace {

// Sets variables for one test and removes every launcher variable before and after it.
struct LaunchEnv {
  static constexpr const char* kAll[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                                         "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"};
  LaunchEnv() { clear(); }
  ~LaunchEnv() { clear(); }
  void clear() {
    for (const char* n : kAll) unsetenv(n);
  }
  LaunchEnv& set(const char* n, const char* v) {
    setenv(n, v, 1);
    return *this;
  }
};

// What dist_env_from_environment() throws under the variables set now ("" when it does not).
std::string error_of() {
  try {
    mc::train::dist_env_from_environment();
  } catch (const mc::Error& e) {
    return e.what();
  }
  return "";
}

TEST(DistEnv, NoLauncherIsOneProcess) {
  LaunchEnv e;
  auto d = mc::train::dist_env_from_environment();
  EXPECT_EQ(d.launcher, "none");
  EXPECT_EQ(d.world, 1);
  EXPECT_EQ(d.rank, 0);
}

TEST(DistEnv, TorchrunAndSlurmVariables) {
  LaunchEnv e;
  e.set("RANK", "3").set("WORLD_SIZE", "4").set("LOCAL_RANK", "1").set("MASTER_ADDR", "10.0.0.2").set("MASTER_PORT", "29600");
  auto d = mc::train::dist_env_from_environment();
  EXPECT_EQ(d.launcher, "torchrun");
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world, 4);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.master_addr, "10.0.0.2");
  EXPECT_EQ(d.master_port, 29600);
  e.clear();
  e.set("SLURM_PROCID", "1").set("SLURM_NTASKS", "2").set("MASTER_ADDR", "n1").set("MASTER_PORT", "29501");
  d = mc::train::dist_env_from_environment();
  EXPECT_EQ(d.launcher, "slurm");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.world, 2);
  EXPECT_EQ(d.local_rank, 0);
}

TEST(DistEnv, BadVariablesAreNamed) {
  LaunchEnv e;
  e.set("RANK", "0").set("WORLD_SIZE", "two");
  EXPECT_NE(error_of().find("WORLD_SIZE=two: want a number of processes"), std::string::npos) << error_of();
  e.set("WORLD_SIZE", "2").set("RANK", "2").set("MASTER_ADDR", "h").set("MASTER_PORT", "1");
  EXPECT_NE(error_of().find("rank 2 is not within world size 2"), std::string::npos) << error_of();
  e.set("RANK", "1").set("MASTER_PORT", "70000");
  EXPECT_NE(error_of().find("MASTER_PORT=70000: want a TCP port"), std::string::npos) << error_of();
  e.clear();
  e.set("RANK", "0").set("WORLD_SIZE", "2").set("MASTER_PORT", "29500");
  EXPECT_NE(error_of().find("MASTER_ADDR is not set"), std::string::npos) << error_of();
}

}  // namespace
