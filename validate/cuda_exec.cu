#include "validate/cuda_exec.hpp"

#include "calibrate/cuda_check.hpp"
#include "calibrate/cuda_device.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "calibrate/nccl_api.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace stepcast::validate::cudaexec {

namespace {

using cudacheck::check;


struct State {
  cudaStream_t compute = nullptr, sends = nullptr, reduce = nullptr;
  cublasHandle_t blas = nullptr;
  Workspace ws;
  size_t elem = 2;
  char* operands[3] = {nullptr, nullptr, nullptr};  // three rotating sets of A, B and one C
  char* c = nullptr;
  char* ring_in = nullptr;
  char* ring_out = nullptr;
  size_t ring_off = 0;
  char* p2p = nullptr;
  int next_set = 0;
  std::vector<ncclComm_t> comms;
  std::vector<cudaEvent_t> marks;
  cudaEvent_t send_gate = nullptr, reduce_gate = nullptr, reduce_done = nullptr;
};
State g;

cudaDataType_t cuda_type(Dtype d) {
  switch (d) {
    case Dtype::kBf16: return CUDA_R_16BF;
    case Dtype::kFp16: return CUDA_R_16F;
    case Dtype::kFp32: return CUDA_R_32F;
  }
  return CUDA_R_16BF;
}
ncclDataType_t nccl_type(Dtype d) {
  switch (d) {
    case Dtype::kBf16: return ncclBfloat16;
    case Dtype::kFp16: return ncclFloat16;
    case Dtype::kFp32: return ncclFloat32;
  }
  return ncclBfloat16;
}

// Deterministic non-zero bytes: values are meaningless, costs are real.
__global__ void fill_bytes(unsigned char* p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = static_cast<unsigned char>(0x3c ^ (i & 0x3));
  }
}

void fill(void* p, size_t n) {
  fill_bytes<<<1024, 256, 0, g.compute>>>(static_cast<unsigned char*>(p), n);
  check(cudaGetLastError(), "fill");
}

template <typename T>
__device__ float to_f(T x);
template <>
__device__ float to_f<float>(float x) { return x; }
template <>
__device__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename G>
__global__ void adam_kernel(void* w, const G* grad, float* mom, size_t n, bool master) {
  const float b1 = 0.9f, b2 = 0.95f, lr = 1e-4f, eps = 1e-8f, c1 = 1.0f / (1.0f - b1), c2 = 1.0f / (1.0f - b2);
  float* w32 = master ? mom : static_cast<float*>(w);
  float* m = master ? mom + n : mom;
  float* v = m + n;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float gi = to_f(grad[i]);
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    w32[i] -= lr * (m[i] * c1) / (sqrtf(v[i] * c2) + eps);
    if (master) static_cast<__nv_bfloat16*>(w)[i] = __float2bfloat16(w32[i]);
  }
}

char* ring_next(char* base, size_t bytes) {
  if (g.ring_off + bytes > g.ws.ring_bytes) g.ring_off = 0;
  char* p = base + g.ring_off;
  g.ring_off += (bytes + 255) / 256 * 256;
  return p;
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

double open(int device, const Workspace& ws) {
  check(cudaSetDevice(device), "set device");
  g.ws = ws;
  g.elem = ws.dtype == Dtype::kFp32 ? 4 : 2;
  check(cudaStreamCreateWithFlags(&g.compute, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&g.sends, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&g.reduce, cudaStreamNonBlocking), "stream");
  check(cublasCreate(&g.blas), "cublasCreate");
  check(cublasSetStream(g.blas, g.compute), "cublasSetStream");
  for (auto& o : g.operands) {
    check(cudaMalloc(&o, (ws.a + ws.b) * g.elem), "workspace");
    fill(o, (ws.a + ws.b) * g.elem);
  }
  check(cudaMalloc(&g.c, ws.c * g.elem), "workspace");
  check(cudaMalloc(&g.ring_in, ws.ring_bytes), "workspace");
  check(cudaMalloc(&g.ring_out, ws.ring_bytes), "workspace");
  fill(g.ring_in, ws.ring_bytes);
  fill(g.ring_out, ws.ring_bytes);
  check(cudaMalloc(&g.p2p, std::max<size_t>(ws.p2p_bytes, 256)), "workspace");
  g.marks.resize(ws.marks);
  for (auto& e : g.marks) check(cudaEventCreate(&e), "event");
  check(cudaEventCreateWithFlags(&g.send_gate, cudaEventDisableTiming), "event");
  check(cudaEventCreateWithFlags(&g.reduce_gate, cudaEventDisableTiming), "event");
  check(cudaEventCreateWithFlags(&g.reduce_done, cudaEventDisableTiming), "event");
  check(cudaStreamSynchronize(g.compute), "sync");
  size_t free_b = 0, total = 0;
  check(cudaMemGetInfo(&free_b, &total), "memory info");
  return static_cast<double>(total);
}

void close() {
  for (auto c : g.comms) ncclCommDestroy(c);
  g.comms.clear();
  for (auto e : g.marks) cudaEventDestroy(e);
  g.marks.clear();
  for (auto e : {g.send_gate, g.reduce_gate, g.reduce_done}) {
    if (e) cudaEventDestroy(e);
  }
  for (auto& o : g.operands) cudaFree(o), o = nullptr;
  cudaFree(g.c);
  cudaFree(g.ring_in);
  cudaFree(g.ring_out);
  cudaFree(g.p2p);
  if (g.blas) cublasDestroy(g.blas);
  if (g.compute) cudaStreamDestroy(g.compute);
  if (g.sends) cudaStreamDestroy(g.sends);
  if (g.reduce) cudaStreamDestroy(g.reduce);
  g = State{};
}

void unique_id(char id[128]) { calibrate::cuda::nccl_unique_id(id); }

int comm_init(int rank, int size, const char id[128]) {
  ncclUniqueId u{};
  std::copy(id, id + 128, u.internal);
  ncclComm_t c = nullptr;
  check(ncclCommInitRank(&c, size, u, rank), "communicator init");
  g.comms.push_back(c);
  return static_cast<int>(g.comms.size()) - 1;
}

void gemm(int m, int n, int k) {
  const int s = g.next_set++ % 3;
  const char* A = g.operands[s];
  const char* B = A + g.ws.a * g.elem;
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = cuda_type(g.ws.dtype);
  // Row-major C = A B is column-major C^T = B^T A^T.
  check(cublasGemmEx(g.blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, B, t, n, A, t, k, &beta, g.c, t, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "gemm");
}

void copy_pass(double bytes) {
  size_t left = static_cast<size_t>(bytes / 2.0);
  while (left > 0) {
    const size_t n = std::min(left, g.ws.ring_bytes / 2);
    char* src = ring_next(g.ring_in, n);
    char* dst = g.ring_out + (src - g.ring_in);
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, g.compute), "copy");
    left -= n;
  }
}

void collective(int comm, Op op, size_t elements, int group_size, void* src, bool async) {
  cudaStream_t stream = g.compute;
  if (async) {
    check(cudaEventRecord(g.reduce_gate, g.compute), "record");
    check(cudaStreamWaitEvent(g.reduce, g.reduce_gate, 0), "wait");
    stream = g.reduce;
  }
  const size_t bytes = elements * g.elem;
  if (bytes > g.ws.ring_bytes) throw std::runtime_error("validate: a collective larger than the device ring");
  char* in = src ? static_cast<char*>(src) : ring_next(g.ring_in, bytes);
  char* out = g.ring_out + (src ? 0 : (in - g.ring_in));
  const ncclDataType_t t = nccl_type(g.ws.dtype);
  ncclComm_t c = g.comms.at(static_cast<size_t>(comm));
  const size_t per = std::max<size_t>(1, elements / static_cast<size_t>(group_size));
  switch (op) {
    case Op::kAllReduce: check(ncclAllReduce(in, out, elements, t, ncclSum, c, stream), "all-reduce"); break;
    case Op::kAllGather: check(ncclAllGather(in, out, per, t, c, stream), "all-gather"); break;
    case Op::kReduceScatter: check(ncclReduceScatter(in, out, per, t, ncclSum, c, stream), "reduce-scatter"); break;
    case Op::kBroadcast: check(ncclBroadcast(in, out, elements, t, 0, c, stream), "broadcast"); break;
    case Op::kAllToAll:
      check(ncclGroupStart(), "group");
      for (int p = 0; p < group_size; ++p) {
        check(ncclSend(in + p * per * g.elem, per, t, p, c, stream), "send");
        check(ncclRecv(out + p * per * g.elem, per, t, p, c, stream), "recv");
      }
      check(ncclGroupEnd(), "group");
      break;
  }
}

void join() {
  check(cudaEventRecord(g.reduce_done, g.reduce), "record");
  check(cudaStreamWaitEvent(g.compute, g.reduce_done, 0), "wait");
}

void send(int comm, int peer, size_t elements) {
  check(cudaEventRecord(g.send_gate, g.compute), "record");
  check(cudaStreamWaitEvent(g.sends, g.send_gate, 0), "wait");
  check(ncclSend(g.p2p, elements, nccl_type(g.ws.dtype), peer, g.comms.at(static_cast<size_t>(comm)), g.sends), "send");
}

void recv(int comm, int peer, size_t elements) {
  check(ncclRecv(g.p2p, elements, nccl_type(g.ws.dtype), peer, g.comms.at(static_cast<size_t>(comm)), g.compute), "recv");
}

void adam(void* weights, const void* grads, float* moments, size_t n, bool master, bool fp32_grads) {
  if (fp32_grads) {
    adam_kernel<float><<<1024, 256, 0, g.compute>>>(weights, static_cast<const float*>(grads), moments, n, master);
  } else {
    adam_kernel<__nv_bfloat16><<<1024, 256, 0, g.compute>>>(weights, static_cast<const __nv_bfloat16*>(grads), moments, n, master);
  }
  check(cudaGetLastError(), "adam");
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // clear the out-of-memory error
    return nullptr;
  }
  fill(p, bytes);
  return p;
}

void device_free(void* p) { cudaFree(p); }

void mark(size_t i) { check(cudaEventRecord(g.marks.at(i), g.compute), "record"); }

void synchronize() {
  check(cudaStreamSynchronize(g.compute), "sync");
  check(cudaStreamSynchronize(g.sends), "sync");
  check(cudaStreamSynchronize(g.reduce), "sync");
}

double since(size_t from, size_t to) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, g.marks.at(from), g.marks.at(to)), "elapsed");
  return ms * 1e-3;
}

double reference_gemm_s(int m, int n, int k, int reps) {
  std::vector<double> t;
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  for (int i = 0; i <= reps; ++i) {
    check(cudaEventRecord(a, g.compute), "record");
    gemm(m, n, k);
    check(cudaEventRecord(b, g.compute), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    if (i > 0) t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace stepcast::validate::cudaexec
