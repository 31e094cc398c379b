// stepcast validate, CUDA backend: the device side behind a narrow C++17 interface (the .cu
// file needs only CUDA, cuBLAS and NCCL; the host logic is ordinary C++ in cuda_backend.cpp).
// All compute runs on one stream in program order; pipeline sends run on a second stream that
// waits for the compute issued before them, so a send never blocks the sender's compute (the
// receiver's blocking receive is on its compute stream). Timestamps are CUDA events on the
// compute stream.
#pragma once

#include <cstddef>
#include <vector>

namespace stepcast::validate::cudaexec {

enum class Dtype { kBf16, kFp16, kFp32 };
enum class Op { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast };

struct Workspace {
  size_t a = 1, b = 1, c = 1;  // elements of the largest GEMM operands and result
  size_t ring_bytes = size_t{256} << 20;  // memory passes and collective buffers rotate here
  size_t p2p_bytes = 1;
  Dtype dtype = Dtype::kBf16;
  size_t marks = 1;  // timestamps per step
};

int device_count();
// Selects the device, creates the streams, cuBLAS and the workspace; returns its memory bytes.
// Throws std::runtime_error.
double open(int device, const Workspace& ws);
void close();

void unique_id(char id[128]);
// A communicator of `size` ranks (this one is `rank`); returns its handle.
int comm_init(int rank, int size, const char id[128]);

void gemm(int m, int n, int k);
void copy_pass(double bytes);  // device-to-device copy moving `bytes` (read + write)
// `elements` of the plan's dtype per rank's full buffer (nccl-tests convention); src null:
// the rotating ring.
// async: on the reduction stream, behind the compute issued so far (join() waits for it).
void collective(int comm, Op op, size_t elements, int group_size, void* src, bool async = false);
void join();
void send(int comm, int peer, size_t elements);
void recv(int comm, int peer, size_t elements);
// Adam over n parameters: fp32 moments; with a master copy the 16-bit weights are written
// from it; gradients 16-bit or fp32.
void adam(void* weights, const void* grads, float* moments, size_t n, bool master, bool fp32_grads);

void* device_alloc(size_t bytes);  // nullptr when the device is out of memory
void device_free(void* p);

void mark(size_t i);
void synchronize();
double since(size_t from, size_t to);  // seconds between two marks (after synchronize)
double reference_gemm_s(int m, int n, int k, int reps);

}  // namespace stepcast::validate::cudaexec
