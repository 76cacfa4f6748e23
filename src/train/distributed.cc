#include "train/distributed.h"

#include <cstdlib>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "common/check.h"
#include "common/env.h"

namespace mc::train {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

}  // namespace

DistEnv dist_env_from_environment() {
  DistEnv d;
  const char *rank = "RANK", *world = "WORLD_SIZE", *local = "LOCAL_RANK";
  if (env("RANK") || env("WORLD_SIZE")) {
    d.launcher = "torchrun";
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    d.launcher = "slurm";
    rank = "SLURM_PROCID";
    world = "SLURM_NTASKS";
    local = "SLURM_LOCALID";
  } else {
    return d;
  }
  for (const char* need : {rank, world})
    MC_CHECK(env(need), "environment variable ", need, " is not set (", d.launcher, " launch needs it)");
  d.rank = static_cast<int>(*env_count(rank, 0, "a rank"));
  d.world = static_cast<int>(*env_count(world, 1, "a number of processes"));
  d.local_rank = static_cast<int>(env_count(local, 0, "a rank on this host").value_or(0));
  MC_CHECK(d.world >= 1 && d.rank >= 0 && d.rank < d.world, "rank ", d.rank, " is not within world size ", d.world);
  if (d.world > 1) {
    MC_CHECK(env("MASTER_ADDR"), "environment variable MASTER_ADDR is not set (the address of rank 0)");
    MC_CHECK(env("MASTER_PORT"), "environment variable MASTER_PORT is not set (a free port on rank 0)");
  }
  if (env("MASTER_ADDR")) d.master_addr = *env("MASTER_ADDR");
  if (auto port = env_count("MASTER_PORT", 1, "a TCP port", 65535)) d.master_port = static_cast<int>(*port);
  return d;
}

struct Distributed::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
};

Distributed::Distributed(const DistEnv& e, c10::Device device) : env_(e), impl_(std::make_unique<Impl>()) {
  if (env_.world == 1) return;
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env_.master_port);
  // Under torchrun the agent already serves the store at MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True): every rank, rank 0 included, joins it as a client, as
  // torch.distributed does; otherwise rank 0 serves it.
  o.isServer = env_.rank == 0 && mc::train::env("TORCHELASTIC_USE_AGENT_STORE").value_or("") != "True";
  o.numWorkers = env_.world;
  o.timeout = std::chrono::minutes(10);
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, o);
  } catch (const std::exception& ex) {
    throw Error(str_cat("rank ", env_.rank, ": cannot reach the rendezvous at ", env_.master_addr, ":", env_.master_port, ": ",
                        ex.what()));
  }
  if (device.is_cuda()) {
#ifdef USE_C10D_NCCL
    c10::cuda::set_device(device.index());
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, env_.rank, env_.world, opts);
#else
    throw Error("this build has no NCCL (libtorch without CUDA); cannot train on CUDA with several ranks");
#endif
  } else {
    auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::minutes(10));
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, env_.rank, env_.world, opts);
  }
}

Distributed::~Distributed() {
  // What destroy_process_group() does: NCCL's communicators are finalized in order instead of
  // being torn down by the destructor (which warns and can hang on exit).
  if (!impl_->pg) return;
  try {
    impl_->pg->shutdown();
  } catch (const std::exception&) {
  }
}

std::string Distributed::backend_name() const { return impl_->pg ? impl_->pg->getBackendName() : "none"; }

c10::intrusive_ptr<c10d::Work> Distributed::reduce_scatter_sum(at::Tensor out, at::Tensor in) {
  MC_INTERNAL_ASSERT(in.numel() == out.numel() * env_.world);
  if (!impl_->pg) {
    out.copy_(in);
    return {};
  }
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return impl_->pg->_reduce_scatter_base(out, in, o);
}

c10::intrusive_ptr<c10d::Work> Distributed::all_gather(at::Tensor out, at::Tensor in) {
  MC_INTERNAL_ASSERT(out.numel() == in.numel() * env_.world);
  if (!impl_->pg) {
    out.copy_(in);
    return {};
  }
  return impl_->pg->_allgather_base(out, in);
}

void Distributed::all_reduce_sum(at::Tensor& t) {
  if (!impl_->pg) return;
  std::vector<at::Tensor> v{t};
  impl_->pg->allreduce(v)->wait();
}

void Distributed::all_reduce_max(at::Tensor& t) {
  if (!impl_->pg) return;
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  impl_->pg->allreduce(v, o)->wait();
}

void Distributed::barrier() {
  if (impl_->pg) impl_->pg->barrier()->wait();
}

}  // namespace mc::train
