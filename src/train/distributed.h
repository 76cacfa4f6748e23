// Data parallelism over libtorch's own c10d: ProcessGroupNCCL on CUDA, ProcessGroupGloo on the
// CPU, rendezvous through c10d's TCPStore. No collective is written here: these are c10d's.
//
// Ranks come from the standard launchers: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT) or SLURM (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR and
// MASTER_PORT exported by the batch script). No variables: one process, no process group.
#pragma once

#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace mc::train {

struct DistEnv {
  int rank = 0, world = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "none";  // none | torchrun | slurm
};

// Reads the launcher's variables; throws mc::Error naming a missing or malformed one.
DistEnv dist_env_from_environment();

class Distributed {
 public:
  // Joins the group (blocks until every rank is there). device decides NCCL or gloo.
  Distributed(const DistEnv& env, c10::Device device);
  ~Distributed();
  int rank() const { return env_.rank; }
  int world() const { return env_.world; }
  const DistEnv& env() const { return env_; }
  bool is_main() const { return env_.rank == 0; }
  std::string backend_name() const;

  // Asynchronous collectives (nullptr with one rank, where they are copies or no-ops).
  c10::intrusive_ptr<c10d::Work> reduce_scatter_sum(at::Tensor out, at::Tensor in);  // in = world * out.numel()
  c10::intrusive_ptr<c10d::Work> all_gather(at::Tensor out, at::Tensor in);           // out = world * in.numel()
  // Hybrid sharding (`--shard-group-size N`): ranks r and r' are in one shard group when
  // r / N == r' / N (consecutive ranks: one node's under `torchrun --nproc-per-node N`), and in
  // one replica group when r % N == r' % N. Sharded state is split over the shard group and
  // replicated over the replica groups, so the large collectives stay inside a node. Collective;
  // throws mc::Error when N does not divide the world. Without it the shard group is the world
  // and there are no replicas.
  void split_shard_groups(int n);
  int shard_size() const;
  int shard_rank() const;
  int replicas() const;
  c10::intrusive_ptr<c10d::Work> shard_reduce_scatter_sum(at::Tensor out, at::Tensor in);
  c10::intrusive_ptr<c10d::Work> shard_all_gather(at::Tensor out, at::Tensor in);
  void shard_all_reduce_sum(at::Tensor& t);
  void replica_all_reduce_sum(at::Tensor& t);  // blocking; a no-op without replicas

  // Blocking.
  void all_reduce_sum(at::Tensor& t);
  void all_reduce_max(at::Tensor& t);
  void barrier();

 private:
  DistEnv env_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::train
