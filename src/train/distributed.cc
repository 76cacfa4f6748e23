#include "train/distributed.h"

#include <cstdlib>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
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
  bool cuda = false;
  // Hybrid sharding: this rank's shard group and replica group (null: the world, none).
  c10::intrusive_ptr<c10d::Backend> shard_pg, replica_pg;
  int shard_size = 1, shard_rank = 0, replicas = 1;

  // A group of `size` ranks, this one `rank` among them, rendezvousing under `prefix` of the store.
  c10::intrusive_ptr<c10d::Backend> make(const c10::intrusive_ptr<c10d::Store>& s, int rank, int size) const {
    if (cuda) {
#ifdef USE_C10D_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      return c10::make_intrusive<c10d::ProcessGroupNCCL>(s, rank, size, opts);
#else
      throw Error("this build has no NCCL (libtorch without CUDA); cannot train on CUDA with several ranks");
#endif
    }
    auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::minutes(10));
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    return c10::make_intrusive<c10d::ProcessGroupGloo>(s, rank, size, opts);
  }
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
  impl_->cuda = device.is_cuda();
#ifdef USE_C10D_NCCL
  if (impl_->cuda) c10::cuda::set_device(device.index());
#endif
  impl_->pg = impl_->make(impl_->store, env_.rank, env_.world);
  impl_->shard_size = env_.world;
  impl_->shard_rank = env_.rank;
}

void Distributed::split_shard_groups(int n) {
  MC_CHECK(n >= 1 && env_.world % n == 0, "--shard-group-size ", n, " does not divide the number of ranks ", env_.world,
           " (give a divisor, e.g. the GPUs of one node)");
  if (n == env_.world) return;
  MC_CHECK(impl_->shard_pg == nullptr, "split_shard_groups called twice");
  const int group = env_.rank / n, index = env_.rank % n;
  impl_->shard_pg = impl_->make(c10::make_intrusive<c10d::PrefixStore>(str_cat("shard", group, "/"), impl_->store), index, n);
  impl_->replica_pg =
      impl_->make(c10::make_intrusive<c10d::PrefixStore>(str_cat("replica", index, "/"), impl_->store), group, env_.world / n);
  impl_->shard_size = n;
  impl_->shard_rank = index;
  impl_->replicas = env_.world / n;
}

int Distributed::shard_size() const { return impl_->shard_size; }
int Distributed::shard_rank() const { return impl_->shard_rank; }
int Distributed::replicas() const { return impl_->replicas; }

c10::intrusive_ptr<c10d::Work> Distributed::shard_reduce_scatter_sum(at::Tensor out, at::Tensor in) {
  if (!impl_->shard_pg) return reduce_scatter_sum(out, in);
  MC_INTERNAL_ASSERT(in.numel() == out.numel() * impl_->shard_size);
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return impl_->shard_pg->_reduce_scatter_base(out, in, o);
}

c10::intrusive_ptr<c10d::Work> Distributed::shard_all_gather(at::Tensor out, at::Tensor in) {
  if (!impl_->shard_pg) return all_gather(out, in);
  MC_INTERNAL_ASSERT(out.numel() == in.numel() * impl_->shard_size);
  return impl_->shard_pg->_allgather_base(out, in);
}

void Distributed::shard_all_reduce_sum(at::Tensor& t) {
  if (!impl_->shard_pg) return all_reduce_sum(t);
  std::vector<at::Tensor> v{t};
  impl_->shard_pg->allreduce(v)->wait();
}

void Distributed::replica_all_reduce_sum(at::Tensor& t) {
  if (!impl_->replica_pg) return;
  std::vector<at::Tensor> v{t};
  impl_->replica_pg->allreduce(v)->wait();
}

Distributed::~Distributed() {
  // What destroy_process_group() does: NCCL's communicators are finalized in order instead of
  // being torn down by the destructor (which warns and can hang on exit).
  for (auto* pg : {&impl_->replica_pg, &impl_->shard_pg, &impl_->pg}) {
    if (!*pg) continue;
    try {
      (*pg)->shutdown();
    } catch (const std::exception&) {
    }
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
