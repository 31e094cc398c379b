#include "calibrate/cuda_device.hpp"
#include "calibrate/coll_check.hpp"
#include "calibrate/cuda_check.hpp"
#include "calibrate/cuda_timing.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include "calibrate/nccl_api.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace stepcast::calibrate::cuda {

namespace {

using cudacheck::check;

cudaStream_t g_stream = nullptr;
cublasHandle_t g_blas = nullptr;
cublasLtHandle_t g_lt = nullptr;
std::vector<ncclComm_t> g_comms;  // every communicator made; g_comm is the selected one
ncclComm_t g_comm = nullptr;

__device__ inline void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ inline void store(__half* p, float v) { *p = __float2half(v); }
__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(__nv_fp8_e4m3* p, float v) { *p = __nv_fp8_e4m3(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(float v) { return v; }
inline float to_float(__nv_fp8_e4m3 v) { return static_cast<float>(v); }

// Deterministic non-zero values in [0.5, 1.5) from a hash of the index (random, never zero).
template <typename T>
__global__ void fill_values(T* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) store(p + i, hash_value(i, seed));
}


// Times launch(set) between two CUDA events on the stream, the input set rotating over `sets`,
// under the shared stopping rules; `last` is the set the final repetition read.
Measurement measure_rotating(int sets, const std::function<void(int)>& launch, const MeasureOptions& mo, int& last) {
  Events ev;
  int next = 0;
  const Measurement m = measure(
      [&]() {
        const int set = next++ % sets;
        check(cudaEventRecord(ev.a, g_stream), "record");
        launch(set);
        check(cudaEventRecord(ev.b, g_stream), "record");
        return ev.seconds();
      },
      mo);
  last = (next - 1) % sets;
  return m;
}

}  // namespace

cudaStream_t current_stream() { return g_stream; }

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
  check(cublasLtCreate(&g_lt), "cublasLtCreate");
  return DeviceInfo{prop.name, static_cast<double>(prop.totalGlobalMem), prop.multiProcessorCount, prop.major, prop.minor};
}

void close() {
  if (g_lt != nullptr) cublasLtDestroy(g_lt);
  g_lt = nullptr;
  if (g_blas != nullptr) cublasDestroy(g_blas);
  if (g_stream != nullptr) cudaStreamDestroy(g_stream);
  g_blas = nullptr;
  g_stream = nullptr;
}

namespace {

// C[0][0] of a product checked against a host dot product of A's first row and B's first
// column (read back as `row` and `col`), to the output's precision.
template <typename In, typename Out>
void check_product(const std::vector<In>& row, const std::vector<In>& col, Out c00, const char* dtype) {
  double want = 0;
  for (size_t i = 0; i < row.size(); ++i) want += static_cast<double>(to_float(row[i])) * static_cast<double>(to_float(col[i]));
  const double got = to_float(c00);
  if (std::abs(got - want) > 2e-2 * std::abs(want)) {
    throw std::runtime_error(std::string(dtype) + " GEMM result check failed: " + std::to_string(got) + " vs " + std::to_string(want));
  }
}

// cublasGemmEx: row-major C[m x n] = A[m x k] B[k x n] as column-major C^T = B^T A^T; operands
// rotate over three random sets.
template <typename T>
Measurement gemm_ex(int m, int n, int k, cudaDataType_t type, cublasComputeType_t compute, const char* dtype, const MeasureOptions& mo) {
  const size_t a = static_cast<size_t>(m) * k, b = static_cast<size_t>(k) * n, c = static_cast<size_t>(m) * n;
  const int sets = 3;
  DeviceArray<T> buf(sets * (a + b) + c);
  fill_values<<<1024, 256, 0, g_stream>>>(buf.p, sets * (a + b) + c, 7u + static_cast<unsigned>(m));
  check(cudaGetLastError(), "fill");
  const float alpha = 1.0f, beta = 0.0f;
  T* C = buf.p + sets * (a + b);
  int last = 0;
  const Measurement meas = measure_rotating(
      sets,
      [&](int set) {
        const T* A = buf.p + static_cast<size_t>(set) * (a + b);
        check(cublasGemmEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, A + a, type, n, A, type, k, &beta, C, type, n, compute,
                           CUBLAS_GEMM_DEFAULT),
              "gemm");
      },
      mo, last);
  // C[0][0] and C[m-1][n-1]: A's first and last rows against B's first and last columns (a
  // strided copy of k elements each).
  const T* A_last = buf.p + static_cast<size_t>(last) * (a + b);
  for (const auto [i, j] : {std::pair<size_t, size_t>{0, 0}, {static_cast<size_t>(m - 1), static_cast<size_t>(n - 1)}}) {
    std::vector<T> row(static_cast<size_t>(k)), col(static_cast<size_t>(k));
    T cij;
    check(cudaMemcpy(row.data(), A_last + i * k, k * sizeof(T), cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy2D(col.data(), sizeof(T), A_last + a + j, n * sizeof(T), sizeof(T), k, cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(&cij, C + i * n + j, sizeof(T), cudaMemcpyDeviceToHost), "copy");
    check_product(row, col, cij, dtype);
  }
  return meas;
}

// cuBLASLt fp8: E4M3 operands, fp32 accumulation, bf16 result, unit scales. FP8 kernels want
// the "TN" layout: the weight stored [n][k] (as a linear layer keeps it) and transposed, the
// activation [m][k]; column-major D[n x m] is row-major C[m x n].
Measurement gemm_fp8(int m, int n, int k, const MeasureOptions& mo) {
  const size_t a = static_cast<size_t>(m) * k, w = static_cast<size_t>(n) * k, c = static_cast<size_t>(m) * n;
  const int sets = 3;
  const size_t workspace_bytes = size_t{32} << 20;
  DeviceArray<__nv_fp8_e4m3> ops(sets * (a + w));
  DeviceArray<__nv_bfloat16> out(c);
  DeviceArray<char> workspace(workspace_bytes);
  fill_values<<<1024, 256, 0, g_stream>>>(ops.p, sets * (a + w), 5u + static_cast<unsigned>(m));
  check(cudaGetLastError(), "fill");
  // The cuBLASLt descriptors, destroyed on every way out.
  struct Descriptors {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t lw = nullptr, la = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~Descriptors() {
      if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
      if (lc != nullptr) cublasLtMatrixLayoutDestroy(lc);
      if (la != nullptr) cublasLtMatrixLayoutDestroy(la);
      if (lw != nullptr) cublasLtMatrixLayoutDestroy(lw);
      if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
    }
  } d;
  check(cublasLtMatmulDescCreate(&d.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
  check(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
  check(cublasLtMatrixLayoutCreate(&d.lw, CUDA_R_8F_E4M3, k, n, k), "layout");
  check(cublasLtMatrixLayoutCreate(&d.la, CUDA_R_8F_E4M3, k, m, k), "layout");
  check(cublasLtMatrixLayoutCreate(&d.lc, CUDA_R_16BF, n, m, n), "layout");
  check(cublasLtMatmulPreferenceCreate(&d.pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof workspace_bytes),
        "workspace");
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(g_lt, d.desc, d.lw, d.la, d.lc, d.lc, d.pref, 1, &heur, &found), "fp8 heuristic");
  if (found == 0) throw std::runtime_error("cuBLASLt has no fp8 kernel for this device and shape");
  const float alpha = 1.0f, beta = 0.0f;
  int last = 0;
  const Measurement meas = measure_rotating(
      sets,
      [&](int set) {
        const __nv_fp8_e4m3* A = ops.p + static_cast<size_t>(set) * (a + w);
        check(cublasLtMatmul(g_lt, d.desc, &alpha, A + a, d.lw, A, d.la, &beta, out.p, d.lc, out.p, d.lc, &heur.algo, workspace.p,
                             workspace_bytes, g_stream),
              "fp8 matmul");
      },
      mo, last);
  // C[0][0] and C[m-1][n-1]: activation rows against weight rows (the weight is stored [n][k]).
  const __nv_fp8_e4m3* A_last = ops.p + static_cast<size_t>(last) * (a + w);
  for (const auto [i, j] : {std::pair<size_t, size_t>{0, 0}, {static_cast<size_t>(m - 1), static_cast<size_t>(n - 1)}}) {
    std::vector<__nv_fp8_e4m3> row(static_cast<size_t>(k)), col(static_cast<size_t>(k));
    __nv_bfloat16 cij;
    check(cudaMemcpy(row.data(), A_last + i * k, k, cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(col.data(), A_last + a + j * k, k, cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(&cij, out.p + i * n + j, sizeof cij, cudaMemcpyDeviceToHost), "copy");
    check_product(row, col, cij, "fp8");
  }
  return meas;
}

}  // namespace

Measurement time_gemm(const std::string& dtype, int m, int n, int k, const MeasureOptions& mo) {
  if (dtype == "bf16") return gemm_ex<__nv_bfloat16>(m, n, k, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bf16", mo);
  if (dtype == "fp16") return gemm_ex<__half>(m, n, k, CUDA_R_16F, CUBLAS_COMPUTE_32F, "fp16", mo);
  if (dtype == "tf32") return gemm_ex<float>(m, n, k, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, "tf32", mo);
  if (dtype == "fp32") return gemm_ex<float>(m, n, k, CUDA_R_32F, CUBLAS_COMPUTE_32F, "fp32", mo);
  if (dtype == "fp8") return gemm_fp8(m, n, k, mo);
  throw std::runtime_error("unknown GEMM dtype '" + dtype + "'");
}

namespace {

// y = x * rsqrt(mean(x^2) + eps) * w per row, fp32 arithmetic on bf16 tensors; one block a row.
__global__ void rmsnorm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int cols) {
  __shared__ float partial[256];
  const __nv_bfloat16* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  __nv_bfloat16* yr = y + static_cast<size_t>(blockIdx.x) * cols;
  float sum = 0;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = __bfloat162float(xr[i]);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float scale = rsqrtf(partial[0] / static_cast<float>(cols) + 1e-5f);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = __float2bfloat16(__bfloat162float(xr[i]) * scale * __bfloat162float(w[i]));
}

// SwiGLU's gate: y = silu(a) * b.
__global__ void swiglu_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* y, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float g = __bfloat162float(a[i]);
    y[i] = __float2bfloat16(g / (1.0f + __expf(-g)) * __bfloat162float(b[i]));
  }
}

// Residual add: y = a + b.
__global__ void add_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* y, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
  }
}

}  // namespace

Measurement time_elementwise(const std::string& kernel, int rows, int cols, const MeasureOptions& mo) {
  if (kernel != "rmsnorm" && kernel != "swiglu" && kernel != "add") throw std::runtime_error("unknown element-wise kernel '" + kernel + "'");
  const size_t n = static_cast<size_t>(rows) * cols;
  const int sets = 2;  // two input sets alternate, so the second read of a tensor is not from L2
  // Per set: two inputs of n (the norm uses the first and a weight of `cols`); then one output.
  DeviceArray<__nv_bfloat16> buf(sets * 2 * n + n);
  fill_values<<<1024, 256, 0, g_stream>>>(buf.p, sets * 2 * n, 19u + static_cast<unsigned>(cols));
  check(cudaGetLastError(), "fill");
  __nv_bfloat16* y = buf.p + sets * 2 * n;
  int last = 0;
  const Measurement meas = measure_rotating(
      sets,
      [&](int set) {
        const __nv_bfloat16* a = buf.p + static_cast<size_t>(set) * 2 * n;
        const __nv_bfloat16* b = a + n;
        if (kernel == "rmsnorm") {
          rmsnorm_kernel<<<rows, 256, 0, g_stream>>>(a, b, y, cols);
        } else if (kernel == "swiglu") {
          swiglu_kernel<<<4096, 256, 0, g_stream>>>(a, b, y, n);
        } else {
          add_kernel<<<4096, 256, 0, g_stream>>>(a, b, y, n);
        }
        check(cudaGetLastError(), kernel.c_str());
      },
      mo, last);
  // Check the first output element of the last launch against the host.
  std::vector<__nv_bfloat16> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
  __nv_bfloat16 y0;
  check(cudaMemcpy(a.data(), buf.p + static_cast<size_t>(last) * 2 * n, cols * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost), "copy");
  check(cudaMemcpy(b.data(), buf.p + static_cast<size_t>(last) * 2 * n + n, cols * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost), "copy");
  check(cudaMemcpy(&y0, y, sizeof y0, cudaMemcpyDeviceToHost), "copy");
  double want = 0;
  const double a0 = to_float(a[0]), b0 = to_float(b[0]);
  if (kernel == "rmsnorm") {
    double sq = 0;
    for (const auto& v : a) sq += static_cast<double>(to_float(v)) * to_float(v);
    want = a0 / std::sqrt(sq / cols + 1e-5) * b0;
  } else if (kernel == "swiglu") {
    want = a0 / (1.0 + std::exp(-a0)) * b0;
  } else {
    want = a0 + b0;
  }
  if (std::abs(to_float(y0) - want) > 1e-2 * std::abs(want)) {
    throw std::runtime_error(kernel + " result check failed: " + std::to_string(to_float(y0)) + " vs " + std::to_string(want));
  }
  return meas;
}

double copy_bandwidth(const MeasureOptions& mo) {
  const size_t bytes = size_t{1} << 30;
  DeviceArray<char> buf(2 * bytes);
  char* p = buf.p;
  fill_values<<<1024, 256, 0, g_stream>>>(reinterpret_cast<__nv_bfloat16*>(p), bytes / 2, 23u);  // random source
  check(cudaGetLastError(), "fill");
  Events ev;
  const Measurement m = measure(
      [&]() {
        check(cudaEventRecord(ev.a, g_stream), "record");
        check(cudaMemcpyAsync(p + bytes, p, bytes, cudaMemcpyDeviceToDevice, g_stream), "copy");
        check(cudaEventRecord(ev.b, g_stream), "record");
        return ev.seconds();
      },
      mo);
  return 2.0 * static_cast<double>(bytes) / m.median_s;
}

double host_copy_seconds(size_t bytes, bool to_device, const MeasureOptions& mo) {
  DeviceArray<char> dev(bytes);
  char* host = nullptr;
  check(cudaMallocHost(reinterpret_cast<void**>(&host), bytes), "pinned host buffer");
  std::memset(host, 0x5a, bytes);
  Events ev;
  Measurement m;
  try {
    m = measure(
        [&]() {
          check(cudaEventRecord(ev.a, g_stream), "record");
          if (to_device) {
            check(cudaMemcpyAsync(dev.p, host, bytes, cudaMemcpyHostToDevice, g_stream), "host-to-device copy");
          } else {
            check(cudaMemcpyAsync(host, dev.p, bytes, cudaMemcpyDeviceToHost, g_stream), "device-to-host copy");
          }
          check(cudaEventRecord(ev.b, g_stream), "record");
          return ev.seconds();
        },
        mo);
  } catch (...) {
    cudaFreeHost(host);
    throw;
  }
  check(cudaFreeHost(host), "free pinned host buffer");
  return m.median_s;
}

void nccl_unique_id(char id[128]) {
  ncclUniqueId u{};
  check(ncclGetUniqueId(&u), "unique id");
  std::copy(u.internal, u.internal + 128, id);
}

int nccl_init(int rank, int size, const char id[128]) {
  ncclUniqueId u{};
  std::copy(id, id + 128, u.internal);
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, size, u, rank), "init");
  g_comms.push_back(comm);
  g_comm = comm;
  return static_cast<int>(g_comms.size()) - 1;
}

void nccl_select(int comm) {
  if (comm < 0 || comm >= static_cast<int>(g_comms.size())) throw std::runtime_error("NCCL: no communicator " + std::to_string(comm));
  g_comm = g_comms[static_cast<size_t>(comm)];
}

void nccl_finalize() {
  for (ncclComm_t c : g_comms) ncclCommDestroy(c);
  g_comms.clear();
  g_comm = nullptr;
}

std::string toolkit_versions() {
  int runtime = 0, driver = 0, blas = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  if (g_blas != nullptr) cublasGetVersion(g_blas, &blas);
  auto cuda = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return "CUDA runtime " + cuda(runtime) + ", driver " + cuda(driver) + ", cuBLAS " + std::to_string(blas / 10000) + "." +
         std::to_string(blas % 10000 / 100) + "." + std::to_string(blas % 100);
}

std::string nccl_version() {
#if STEPCAST_HAVE_NCCL
  return std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
#else
  return "none (built without NCCL)";
#endif
}

namespace {

// Check values (coll_check_value: integers 1..4, never zero) for this rank's input.
__global__ void fill_check(__nv_bfloat16* p, size_t n, int rank) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = __float2bfloat16(coll_check_value(rank, i));
  }
}

__global__ void gather_samples(const __nv_bfloat16* src, const size_t* idx, __nv_bfloat16* dst, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) dst[i] = src[idx[i]];
}

__global__ void fill_constant(__nv_bfloat16* p, size_t n, float v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) p[i] = __float2bfloat16(v);
}

}  // namespace

namespace {
// Options for a benchmark every rank times together: one stop decision for all (any rank's).
MeasureOptions in_lockstep(MeasureOptions mo, const std::function<double(double)>& max_over_ranks) {
  mo.agree = [&max_over_ranks](bool stop) { return max_over_ranks(stop ? 1.0 : 0.0) > 0.5; };
  return mo;
}
}  // namespace

double time_collective(const std::string& op, size_t bytes, int rank, int size, const MeasureOptions& mo,
                       const std::function<void()>& barrier, const std::function<double(double)>& max_over_ranks) {
  const size_t count = bytes / 2;  // bf16 elements
  // Inputs and outputs rotate through up to 64 slots spanning up to 256 MiB each (more than any
  // GPU's L2), so a message is not served from the cache a training step's kernels evict.
  const size_t slot = (bytes + 255) / 256 * 256;
  const size_t slots = std::clamp<size_t>((size_t{256} << 20) / std::max<size_t>(slot, 1), 1, 64);
  DeviceArray<char> in_pool(slots * slot), out_pool(slots * slot);
  fill_check<<<1024, 256, 0, g_stream>>>(reinterpret_cast<__nv_bfloat16*>(in_pool.p), slots * slot / 2, rank);
  check(cudaGetLastError(), "fill");
  const size_t per = count / static_cast<size_t>(size);
  size_t next = 0;
  auto run_op_on = [&](void* in, void* out) {
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
  auto run_op = [&]() {
    const size_t s = next++ % slots;
    run_op_on(in_pool.p + s * slot, out_pool.p + s * slot);
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
  const MeasureOptions lockstep = in_lockstep(mo, max_over_ranks);
  const Measurement m = measure([&]() { return batch(iters); }, lockstep);
  // Result check: the first slot's input holds check values; the output is poisoned, the
  // operation runs once more and sampled elements are compared with what it must produce.
  const size_t out_n = coll_output_count(op, count, size);
  fill_constant<<<1024, 256, 0, g_stream>>>(reinterpret_cast<__nv_bfloat16*>(out_pool.p), count, -1.0f);
  check(cudaGetLastError(), "fill");
  barrier();
  run_op_on(in_pool.p, out_pool.p);
  check(cudaStreamSynchronize(g_stream), "sync");
  const std::vector<size_t> idx = coll_sample_indices(out_n);
  std::vector<__nv_bfloat16> raw(idx.size());
  DeviceArray<size_t> d_idx(idx.size());
  DeviceArray<__nv_bfloat16> d_raw(idx.size());
  check(cudaMemcpy(d_idx.p, idx.data(), idx.size() * sizeof(size_t), cudaMemcpyHostToDevice), "copy");
  gather_samples<<<16, 256, 0, g_stream>>>(reinterpret_cast<const __nv_bfloat16*>(out_pool.p), d_idx.p, d_raw.p, idx.size());
  check(cudaGetLastError(), "gather");
  check(cudaMemcpyAsync(raw.data(), d_raw.p, raw.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost, g_stream), "copy");
  check(cudaStreamSynchronize(g_stream), "sync");
  std::vector<double> got;
  for (const auto& v : raw) got.push_back(to_float(v));
  const std::string bad = coll_verify(op, rank, size, count, idx, got, 1e-2, -1.0);
  if (!bad.empty()) throw std::runtime_error("NCCL " + bad);
  return m.median_s;
}

std::pair<double, double> gemm_beside_all_reduce(int m, int n, int k, size_t bytes, const MeasureOptions& mo,
                                                 const std::function<void()>& barrier,
                                                 const std::function<double(double)>& max_over_ranks) {
  const size_t a = static_cast<size_t>(m) * k, b = static_cast<size_t>(k) * n, c = static_cast<size_t>(m) * n;
  const size_t count = bytes / 2;
  DeviceArray<__nv_bfloat16> gemm_buf(a + b + c), in_buf(count), out_buf(count);
  __nv_bfloat16 *gemm = gemm_buf.p, *in = in_buf.p, *out = out_buf.p;
  fill_values<<<1024, 256, 0, g_stream>>>(gemm, a + b + c, 13u);
  fill_values<<<1024, 256, 0, g_stream>>>(in, count, 17u);
  check(cudaGetLastError(), "fill");
  struct Stream {  // destroyed on every way out
    cudaStream_t s = nullptr;
    ~Stream() {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  } comm_stream;
  check(cudaStreamCreateWithFlags(&comm_stream.s, cudaStreamNonBlocking), "stream");
  cudaStream_t comm = comm_stream.s;
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
  const MeasureOptions lockstep = in_lockstep(mo, max_over_ranks);
  const Measurement by_itself = measure(alone, lockstep);
  const Measurement with_comm = measure(beside, lockstep);
  return {by_itself.median_s, with_comm.median_s};
}

}  // namespace stepcast::calibrate::cuda
