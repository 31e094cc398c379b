#include "calibrate/cuda_device.hpp"
#include "calibrate/cuda_check.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "calibrate/nccl_api.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace stepcast::calibrate::cuda {

namespace {

using cudacheck::check;

cudaStream_t g_stream = nullptr;
cublasHandle_t g_blas = nullptr;
ncclComm_t g_comm = nullptr;


// Deterministic non-zero values in [0.5, 1.5) from a hash of the index.
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16(0.5f + static_cast<float>(x & 0xffff) / 65536.0f);
  }
}

struct Events {
  cudaEvent_t a{}, b{};
  Events() {
    check(cudaEventCreate(&a), "event");
    check(cudaEventCreate(&b), "event");
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  double seconds() {
    float ms = 0;
    check(cudaEventSynchronize(b), "event sync");
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    return ms * 1e-3;
  }
};

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

DeviceInfo open(int device) {
  check(cudaSetDevice(device), "set device");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "device properties");
  check(cudaStreamCreate(&g_stream), "stream");
  check(cublasCreate(&g_blas), "cublasCreate");
  check(cublasSetStream(g_blas, g_stream), "cublasSetStream");
  return DeviceInfo{prop.name, static_cast<double>(prop.totalGlobalMem), prop.multiProcessorCount};
}

void close() {
  if (g_blas != nullptr) cublasDestroy(g_blas);
  if (g_stream != nullptr) cudaStreamDestroy(g_stream);
  g_blas = nullptr;
  g_stream = nullptr;
}

Measurement time_gemm_bf16(int m, int n, int k, const MeasureOptions& mo) {
  const size_t a = static_cast<size_t>(m) * k, b = static_cast<size_t>(k) * n, c = static_cast<size_t>(m) * n;
  const int sets = 3;
  __nv_bfloat16* buf = nullptr;
  check(cudaMalloc(&buf, (sets * (a + b) + c) * sizeof(__nv_bfloat16)), "malloc");
  fill_bf16<<<1024, 256, 0, g_stream>>>(buf, sets * (a + b) + c, 7u + static_cast<unsigned>(m));
  check(cudaGetLastError(), "fill");
  const float alpha = 1.0f, beta = 0.0f;
  Events ev;
  int next = 0;
  // Row-major C = A B is column-major C^T = B^T A^T.
  auto once = [&]() {
    const int i = next++ % sets;
    const __nv_bfloat16* A = buf + static_cast<size_t>(i) * (a + b);
    const __nv_bfloat16* B = A + a;
    __nv_bfloat16* C = buf + sets * (a + b);
    check(cudaEventRecord(ev.a, g_stream), "record");
    check(cublasGemmEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, B, CUDA_R_16BF, n, A, CUDA_R_16BF, k, &beta, C, CUDA_R_16BF, n,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "gemm");
    check(cudaEventRecord(ev.b, g_stream), "record");
    return ev.seconds();
  };
  const Measurement meas = measure(once, mo);
  const int last = (next - 1) % sets;
  std::vector<__nv_bfloat16> row(static_cast<size_t>(k)), mat(b);
  __nv_bfloat16 c00;
  check(cudaMemcpy(row.data(), buf + static_cast<size_t>(last) * (a + b), k * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost), "copy");
  check(cudaMemcpy(mat.data(), buf + static_cast<size_t>(last) * (a + b) + a, b * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost), "copy");
  check(cudaMemcpy(&c00, buf + sets * (a + b), sizeof(c00), cudaMemcpyDeviceToHost), "copy");
  double want = 0;
  for (int kk = 0; kk < k; ++kk) {
    want += static_cast<double>(__bfloat162float(row[static_cast<size_t>(kk)])) * static_cast<double>(__bfloat162float(mat[static_cast<size_t>(kk) * n]));
  }
  cudaFree(buf);
  if (std::abs(__bfloat162float(c00) - want) > 2e-2 * std::abs(want)) {
    throw std::runtime_error("GEMM result check failed: " + std::to_string(__bfloat162float(c00)) + " vs " + std::to_string(want));
  }
  return meas;
}

double copy_bandwidth(const MeasureOptions& mo) {
  const size_t bytes = size_t{1} << 30;
  char* p = nullptr;
  check(cudaMalloc(&p, 2 * bytes), "malloc");
  check(cudaMemsetAsync(p, 1, 2 * bytes, g_stream), "memset");
  Events ev;
  const Measurement m = measure(
      [&]() {
        check(cudaEventRecord(ev.a, g_stream), "record");
        check(cudaMemcpyAsync(p + bytes, p, bytes, cudaMemcpyDeviceToDevice, g_stream), "copy");
        check(cudaEventRecord(ev.b, g_stream), "record");
        return ev.seconds();
      },
      mo);
  cudaFree(p);
  return 2.0 * static_cast<double>(bytes) / m.median_s;
}

void nccl_unique_id(char id[128]) {
  ncclUniqueId u{};
  check(ncclGetUniqueId(&u), "unique id");
  std::copy(u.internal, u.internal + 128, id);
}

void nccl_init(int rank, int size, const char id[128]) {
  ncclUniqueId u{};
  std::copy(id, id + 128, u.internal);
  check(ncclCommInitRank(&g_comm, size, u, rank), "init");
}

void nccl_finalize() {
  if (g_comm != nullptr) ncclCommDestroy(g_comm);
  g_comm = nullptr;
}

std::string nccl_version() {
#if STEPCAST_HAVE_NCCL
  return std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
#else
  return "none (built without NCCL)";
#endif
}

double time_collective(const std::string& op, size_t bytes, int rank, int size, const MeasureOptions& mo,
                       const std::function<void()>& barrier, const std::function<double(double)>& max_over_ranks) {
  const size_t count = bytes / 2;  // bf16 elements
  void *in = nullptr, *out = nullptr;
  check(cudaMalloc(&in, bytes), "malloc");
  check(cudaMalloc(&out, bytes), "malloc");
  fill_bf16<<<1024, 256, 0, g_stream>>>(static_cast<__nv_bfloat16*>(in), count, 11u + static_cast<unsigned>(rank));
  const size_t per = count / static_cast<size_t>(size);
  auto run_op = [&]() {
    if (op == "all_reduce") {
      check(ncclAllReduce(in, out, count, ncclBfloat16, ncclSum, g_comm, g_stream), "all-reduce");
    } else if (op == "all_gather") {
      check(ncclAllGather(in, out, per, ncclBfloat16, g_comm, g_stream), "all-gather");
    } else if (op == "reduce_scatter") {
      check(ncclReduceScatter(in, out, per, ncclBfloat16, ncclSum, g_comm, g_stream), "reduce-scatter");
    } else if (op == "all_to_all") {
      check(ncclGroupStart(), "group");
      for (int p = 0; p < size; ++p) {
        check(ncclSend(static_cast<char*>(in) + p * per * 2, per, ncclBfloat16, p, g_comm, g_stream), "send");
        check(ncclRecv(static_cast<char*>(out) + p * per * 2, per, ncclBfloat16, p, g_comm, g_stream), "recv");
      }
      check(ncclGroupEnd(), "group");
    } else if (op == "broadcast") {
      check(ncclBroadcast(in, out, count, ncclBfloat16, 0, g_comm, g_stream), "broadcast");
    } else {
      const int peer = rank ^ 1;
      if (peer < size) {
        check(ncclGroupStart(), "group");
        check(ncclSend(in, count, ncclBfloat16, peer, g_comm, g_stream), "send");
        check(ncclRecv(out, count, ncclBfloat16, peer, g_comm, g_stream), "recv");
        check(ncclGroupEnd(), "group");
      }
    }
  };
  Events ev;
  auto batch = [&](int iters) {
    barrier();
    check(cudaEventRecord(ev.a, g_stream), "record");
    for (int i = 0; i < iters; ++i) run_op();
    check(cudaEventRecord(ev.b, g_stream), "record");
    return max_over_ranks(ev.seconds() / iters);
  };
  const double probe = batch(3);
  const int iters = static_cast<int>(std::clamp(std::ceil(1e-3 / std::max(probe, 1e-9)), 1.0, 1000.0));
  const Measurement m = measure([&]() { return batch(iters); }, mo);
  cudaFree(in);
  cudaFree(out);
  return m.median_s;
}

std::pair<double, double> gemm_beside_all_reduce(int m, int n, int k, size_t bytes, const MeasureOptions& mo,
                                                 const std::function<void()>& barrier,
                                                 const std::function<double(double)>& max_over_ranks) {
  const size_t a = static_cast<size_t>(m) * k, b = static_cast<size_t>(k) * n, c = static_cast<size_t>(m) * n;
  const size_t count = bytes / 2;
  __nv_bfloat16 *gemm = nullptr, *in = nullptr, *out = nullptr;
  check(cudaMalloc(&gemm, (a + b + c) * sizeof(__nv_bfloat16)), "malloc");
  check(cudaMalloc(&in, bytes), "malloc");
  check(cudaMalloc(&out, bytes), "malloc");
  fill_bf16<<<1024, 256, 0, g_stream>>>(gemm, a + b + c, 13u);
  fill_bf16<<<1024, 256, 0, g_stream>>>(in, count, 17u);
  check(cudaGetLastError(), "fill");
  cudaStream_t comm = nullptr;
  check(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking), "stream");
  check(cudaStreamSynchronize(g_stream), "sync");
  const float alpha = 1.0f, beta = 0.0f;
  const int per_batch = 8;
  auto gemms = [&]() {
    for (int i = 0; i < per_batch; ++i) {
      check(cublasGemmEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, gemm + a, CUDA_R_16BF, n, gemm, CUDA_R_16BF, k, &beta,
                         gemm + a + b, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "gemm");
    }
  };
  Events ev, cev;
  auto alone = [&]() {
    barrier();
    check(cudaEventRecord(ev.a, g_stream), "record");
    gemms();
    check(cudaEventRecord(ev.b, g_stream), "record");
    return max_over_ranks(ev.seconds() / per_batch);
  };
  // All-reduces alone, to size the number that covers a GEMM batch twice over.
  barrier();
  check(cudaEventRecord(cev.a, comm), "record");
  for (int i = 0; i < 3; ++i) check(ncclAllReduce(in, out, count, ncclBfloat16, ncclSum, g_comm, comm), "all-reduce");
  check(cudaEventRecord(cev.b, comm), "record");
  const double reduce_s = max_over_ranks(cev.seconds() / 3);
  const double batch_s = alone() * per_batch;
  const int reduces = static_cast<int>(std::clamp(std::ceil(2.0 * batch_s / std::max(reduce_s, 1e-9)) + 1.0, 2.0, 10000.0));
  auto beside = [&]() {
    barrier();
    for (int i = 0; i < reduces; ++i) check(ncclAllReduce(in, out, count, ncclBfloat16, ncclSum, g_comm, comm), "all-reduce");
    check(cudaEventRecord(ev.a, g_stream), "record");
    gemms();
    check(cudaEventRecord(ev.b, g_stream), "record");
    const double t = ev.seconds() / per_batch;
    check(cudaStreamSynchronize(comm), "sync");
    return max_over_ranks(t);
  };
  const Measurement by_itself = measure(alone, mo);
  const Measurement with_comm = measure(beside, mo);
  cudaStreamDestroy(comm);
  cudaFree(gemm);
  cudaFree(in);
  cudaFree(out);
  return {by_itself.median_s, with_comm.median_s};
}

}  // namespace stepcast::calibrate::cuda
