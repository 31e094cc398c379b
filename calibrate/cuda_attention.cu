// stepcast calibration: causal attention forward and backward with stepcast's own tiled kernels.
//
// The algorithm is FlashAttention-2's: the forward walks key tiles with an online softmax and
// never writes the score matrix; the backward recomputes the probabilities from the saved
// log-sum-exp, one block per key tile accumulating dK and dV, dQ accumulated with atomics.
// Products run on tensor cores (WMMA, bf16 operands, fp32 accumulation); head dimension 128,
// tiles of 64 queries x 64 keys, 4 warps of 16 rows. These are simple kernels, slower than the
// tuned FlashAttention and cuDNN kernels frameworks call: the calibration reports them as a
// measured lower bound and says so, it does not put them into the profile.
#include "calibrate/cuda_check.hpp"
#include "calibrate/cuda_device.hpp"
#include "calibrate/cuda_timing.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace stepcast::calibrate::cuda {

namespace {

using cudacheck::check;
using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kD = 128;      // head dimension
constexpr int kTile = 64;    // queries (and keys) per tile
constexpr int kWarps = 4;    // 16 rows each
constexpr size_t kFwdSmem = (2 * kTile * kD) * sizeof(bf16) + kWarps * 16 * kTile * sizeof(float) +
                            kWarps * 16 * kTile * sizeof(bf16) + kWarps * 16 * kD * sizeof(float);
constexpr size_t kBwdSmem = (4 * kTile * kD) * sizeof(bf16) + 2 * kTile * kTile * sizeof(bf16) +
                            kWarps * 16 * kTile * sizeof(float) + kWarps * 16 * kD * sizeof(float) + 2 * kTile * sizeof(float);

__global__ void fill_attention(bf16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = __float2bfloat16(hash_value(i, seed) - 1.0f);  // [-0.5, 0.5): scores of both signs
  }
}

// Copies a 64 x 128 bf16 tile (rows of 128) from global to shared memory, 16 bytes a thread.
__device__ inline void load_tile(bf16* dst, const bf16* src) {
  const int4* s = reinterpret_cast<const int4*>(src);
  int4* d = reinterpret_cast<int4*>(dst);
  for (int v = threadIdx.x; v < kTile * kD / 8; v += blockDim.x) d[v] = s[v];
}

// One warp: out[16 x 64] (row stride 64, fp32) = rows[16 x 128] x tile[64 x 128]^T, both bf16
// with rows of 128.
__device__ inline void rows_by_tile_t(const bf16* rows, const bf16* tile, float* out) {
  for (int j = 0; j < kTile / 16; ++j) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < kD / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;  // tile^T
      wmma::load_matrix_sync(a, rows + kk * 16, kD);
      wmma::load_matrix_sync(b, tile + j * 16 * kD + kk * 16, kD);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(out + j * 16, acc, kTile, wmma::mem_row_major);
  }
}

// Forward: grid (seq / 64 query tiles, batch x heads), 128 threads. O bf16, L = log-sum-exp.
__global__ void attention_forward(const bf16* Q, const bf16* K, const bf16* V, bf16* O, float* L, int seq, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);
  bf16* Vs = Ks + kTile * kD;
  float* Ss = reinterpret_cast<float*>(Vs + kTile * kD);
  bf16* Ps = reinterpret_cast<bf16*>(Ss + kWarps * 16 * kTile);
  float* Os = reinterpret_cast<float*>(Ps + kWarps * 16 * kTile);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t base = static_cast<size_t>(blockIdx.y) * seq * kD;
  const int q0 = blockIdx.x * kTile + warp * 16;
  float* Sw = Ss + warp * 16 * kTile;
  bf16* Pw = Ps + warp * 16 * kTile;
  float* Ow = Os + warp * 16 * kD;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> qf[kD / 16];
  for (int kk = 0; kk < kD / 16; ++kk) wmma::load_matrix_sync(qf[kk], Q + base + static_cast<size_t>(q0) * kD + kk * 16, kD);
  for (int i = lane; i < 16 * kD; i += 32) Ow[i] = 0.0f;
  const int r = lane >> 1, half = lane & 1;
  const int q = q0 + r;
  float m_r = -INFINITY, l_r = 0.0f;
  for (int t = 0; t <= static_cast<int>(blockIdx.x); ++t) {  // causal: key tiles up to the diagonal
    __syncthreads();
    load_tile(Ks, K + base + static_cast<size_t>(t) * kTile * kD);
    load_tile(Vs, V + base + static_cast<size_t>(t) * kTile * kD);
    __syncthreads();
    for (int j = 0; j < kTile / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < kD / 16; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> kf;  // K^T
        wmma::load_matrix_sync(kf, Ks + j * 16 * kD + kk * 16, kD);
        wmma::mma_sync(acc, qf[kk], kf, acc);
      }
      wmma::store_matrix_sync(Sw + j * 16, acc, kTile, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax: two lanes a row, 32 columns each.
    float mx = -INFINITY;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float s = t * kTile + c > q ? -INFINITY : Sw[r * kTile + c] * scale;
      Sw[r * kTile + c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m_r, mx);  // finite: key t * 64 <= q on every tile walked
    const float alpha = __expf(m_r - m_new);
    float sum = 0.0f;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float p = __expf(Sw[r * kTile + c] - m_new);
      Pw[r * kTile + c] = __float2bfloat16(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l_r = l_r * alpha + sum;
    m_r = m_new;
    for (int c = half * 64; c < half * 64 + 64; ++c) Ow[r * kD + c] *= alpha;
    __syncwarp();
    for (int cb = 0; cb < kD / 16; ++cb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc;
      wmma::load_matrix_sync(oacc, Ow + cb * 16, kD, wmma::mem_row_major);
      for (int kb = 0; kb < kTile / 16; ++kb) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> pf;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> vf;
        wmma::load_matrix_sync(pf, Pw + kb * 16, kTile);
        wmma::load_matrix_sync(vf, Vs + kb * 16 * kD + cb * 16, kD);
        wmma::mma_sync(oacc, pf, vf, oacc);
      }
      wmma::store_matrix_sync(Ow + cb * 16, oacc, kD, wmma::mem_row_major);
    }
    __syncwarp();
  }
  for (int c = half * 64; c < half * 64 + 64; ++c) O[base + static_cast<size_t>(q) * kD + c] = __float2bfloat16(Ow[r * kD + c] / l_r);
  if (half == 0) L[static_cast<size_t>(blockIdx.y) * seq + q] = m_r + __logf(l_r);
}

// D = rowsum(dO * O), one warp a row.
__global__ void attention_backward_prep(const bf16* O, const bf16* dO, float* D, size_t rows) {
  const size_t row = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float s = 0.0f;
  for (int c = lane; c < kD; c += 32) s += __bfloat162float(O[row * kD + c]) * __bfloat162float(dO[row * kD + c]);
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) D[row] = s;
}

// Backward: grid (seq / 64 key tiles, batch x heads), 128 threads; each warp accumulates dK and
// dV for 16 keys over every query tile at or after the key tile; dQ (fp32, zeroed) by atomics.
__global__ void attention_backward(const bf16* Q, const bf16* K, const bf16* V, const bf16* dO, const float* L, const float* D,
                                   float* dQ, float* dK, float* dV, int seq, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);
  bf16* Vs = Ks + kTile * kD;
  bf16* Qs = Vs + kTile * kD;
  bf16* dOs = Qs + kTile * kD;
  bf16* Ps = dOs + kTile * kD;
  bf16* dSs = Ps + kTile * kTile;
  float* Ss = reinterpret_cast<float*>(dSs + kTile * kTile);
  float* dQs = Ss + kWarps * 16 * kTile;
  float* Ls = dQs + kWarps * 16 * kD;
  float* Ds = Ls + kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t base = static_cast<size_t>(blockIdx.y) * seq * kD;
  const size_t row_base = static_cast<size_t>(blockIdx.y) * seq;
  const int k0 = blockIdx.x * kTile;
  float* Sw = Ss + warp * 16 * kTile;
  float* dQw = dQs + warp * 16 * kD;
  const int r = lane >> 1, half = lane & 1;
  load_tile(Ks, K + base + static_cast<size_t>(k0) * kD);
  load_tile(Vs, V + base + static_cast<size_t>(k0) * kD);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[kD / 16], dv[kD / 16];
  for (int cb = 0; cb < kD / 16; ++cb) {
    wmma::fill_fragment(dk[cb], 0.0f);
    wmma::fill_fragment(dv[cb], 0.0f);
  }
  const int tiles = seq / kTile;
  for (int i = blockIdx.x; i < tiles; ++i) {
    __syncthreads();
    load_tile(Qs, Q + base + static_cast<size_t>(i) * kTile * kD);
    load_tile(dOs, dO + base + static_cast<size_t>(i) * kTile * kD);
    for (int x = threadIdx.x; x < kTile; x += blockDim.x) {
      Ls[x] = L[row_base + static_cast<size_t>(i) * kTile + x];
      Ds[x] = D[row_base + static_cast<size_t>(i) * kTile + x];
    }
    __syncthreads();
    // S for the warp's 16 query rows against the tile's 64 keys.
    rows_by_tile_t(Qs + warp * 16 * kD, Ks, Sw);
    __syncwarp();
    const int qrow = warp * 16 + r;           // row within the query tile
    const int q = i * kTile + qrow;
    float p[32];
    for (int c = 0; c < 32; ++c) {
      const int col = half * 32 + c;
      p[c] = k0 + col > q ? 0.0f : __expf(Sw[r * kTile + col] * scale - Ls[qrow]);
      Ps[qrow * kTile + col] = __float2bfloat16(p[c]);
    }
    __syncwarp();
    // dP = dO V^T for the same rows.
    rows_by_tile_t(dOs + warp * 16 * kD, Vs, Sw);
    __syncwarp();
    for (int c = 0; c < 32; ++c) {
      const int col = half * 32 + c;
      dSs[qrow * kTile + col] = __float2bfloat16(p[c] * (Sw[r * kTile + col] - Ds[qrow]) * scale);
    }
    __syncthreads();  // dK and dV read every query row of P and dS
    for (int cb = 0; cb < kD / 16; ++cb) {
      for (int qb = 0; qb < kTile / 16; ++qb) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> pt, dst;  // P^T, dS^T
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> dof, qf;
        wmma::load_matrix_sync(pt, Ps + qb * 16 * kTile + warp * 16, kTile);
        wmma::load_matrix_sync(dst, dSs + qb * 16 * kTile + warp * 16, kTile);
        wmma::load_matrix_sync(dof, dOs + qb * 16 * kD + cb * 16, kD);
        wmma::load_matrix_sync(qf, Qs + qb * 16 * kD + cb * 16, kD);
        wmma::mma_sync(dv[cb], pt, dof, dv[cb]);
        wmma::mma_sync(dk[cb], dst, qf, dk[cb]);
      }
    }
    // dQ rows of this warp: dS (16 x 64) K (64 x 128), added to the global fp32 accumulator.
    for (int cb = 0; cb < kD / 16; ++cb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kb = 0; kb < kTile / 16; ++kb) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
        wmma::load_matrix_sync(a, dSs + warp * 16 * kTile + kb * 16, kTile);
        wmma::load_matrix_sync(b, Ks + kb * 16 * kD + cb * 16, kD);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(dQw + cb * 16, acc, kD, wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = lane; e < 16 * kD; e += 32) {
      atomicAdd(dQ + base + static_cast<size_t>(i * kTile + warp * 16 + e / kD) * kD + e % kD, dQw[e]);
    }
  }
  for (int cb = 0; cb < kD / 16; ++cb) {
    wmma::store_matrix_sync(dK + base + static_cast<size_t>(k0 + warp * 16) * kD + cb * 16, dk[cb], kD, wmma::mem_row_major);
    wmma::store_matrix_sync(dV + base + static_cast<size_t>(k0 + warp * 16) * kD + cb * 16, dv[cb], kD, wmma::mem_row_major);
  }
}

struct Buffers {
  size_t n = 0, rows = 0;
  DeviceArray<bf16> q_, k_, v_, o_, dout_;
  DeviceArray<float> l_, d_, dq_, dk_, dv_;
  bf16 *q, *k, *v, *o, *dout;
  float *l, *d, *dq, *dk, *dv;
  Buffers(int bh, int seq)
      : n(static_cast<size_t>(bh) * seq * kD), rows(static_cast<size_t>(bh) * seq), q_(n), k_(n), v_(n), o_(n), dout_(n), l_(rows), d_(rows),
        dq_(n), dk_(n), dv_(n), q(q_.p), k(k_.p), v(v_.p), o(o_.p), dout(dout_.p), l(l_.p), d(d_.p), dq(dq_.p), dk(dk_.p), dv(dv_.p) {}
};

void forward(const Buffers& b, int bh, int seq, float scale, cudaStream_t s) {
  attention_forward<<<dim3(seq / kTile, bh), 32 * kWarps, kFwdSmem, s>>>(b.q, b.k, b.v, b.o, b.l, seq, scale);
}

void backward(const Buffers& b, int bh, int seq, float scale, cudaStream_t s) {
  attention_backward_prep<<<static_cast<unsigned>((b.rows * 32 + 255) / 256), 256, 0, s>>>(b.o, b.dout, b.d, b.rows);
  check(cudaMemsetAsync(b.dq, 0, b.n * sizeof(float), s), "memset dQ");
  attention_backward<<<dim3(seq / kTile, bh), 32 * kWarps, kBwdSmem, s>>>(b.q, b.k, b.v, b.dout, b.l, b.d, b.dq, b.dk, b.dv, seq, scale);
}

std::vector<float> to_host(const bf16* p, size_t n) {
  std::vector<bf16> raw(n);
  check(cudaMemcpy(raw.data(), p, n * sizeof(bf16), cudaMemcpyDeviceToHost), "copy");
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(raw[i]);
  return out;
}
std::vector<float> to_host(const float* p, size_t n) {
  std::vector<float> out(n);
  check(cudaMemcpy(out.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), "copy");
  return out;
}

// Largest |got - want| over the largest |want|; a kernel bug shows as order 1, bf16 rounding
// of the probabilities and dS as under 3%.
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? err / scale : err;
}

// One head of 256 tokens, forward and backward, against a double-precision host reference.
void check_against_host(cudaStream_t s) {
  const int seq = 256;
  Buffers b(1, seq);
  unsigned seed = 31u;
  for (bf16* p : {b.q, b.k, b.v, b.dout}) fill_attention<<<256, 256, 0, s>>>(p, b.n, seed++);
  check(cudaGetLastError(), "fill");
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
  forward(b, 1, seq, scale, s);
  backward(b, 1, seq, scale, s);
  check(cudaGetLastError(), "attention kernels");
  check(cudaStreamSynchronize(s), "attention check");
  const auto Q = to_host(b.q, b.n), K = to_host(b.k, b.n), V = to_host(b.v, b.n), dO = to_host(b.dout, b.n), O = to_host(b.o, b.n);
  const auto dQ = to_host(b.dq, b.n), dK = to_host(b.dk, b.n), dV = to_host(b.dv, b.n);
  std::vector<double> o(b.n, 0.0), dq(b.n, 0.0), dk(b.n, 0.0), dv(b.n, 0.0);
  std::vector<double> P(static_cast<size_t>(seq) * seq, 0.0), dS(static_cast<size_t>(seq) * seq, 0.0);
  for (int i = 0; i < seq; ++i) {
    double mx = -1e300, sum = 0;
    std::vector<double> srow(static_cast<size_t>(i) + 1);
    for (int j = 0; j <= i; ++j) {
      double dot = 0;
      for (int c = 0; c < kD; ++c) dot += static_cast<double>(Q[i * kD + c]) * K[j * kD + c];
      srow[j] = dot * scale;
      mx = std::max(mx, srow[j]);
    }
    for (int j = 0; j <= i; ++j) sum += std::exp(srow[j] - mx);
    for (int j = 0; j <= i; ++j) P[static_cast<size_t>(i) * seq + j] = std::exp(srow[j] - mx) / sum;
    for (int j = 0; j <= i; ++j) {
      for (int c = 0; c < kD; ++c) o[i * kD + c] += P[static_cast<size_t>(i) * seq + j] * V[j * kD + c];
    }
    double Di = 0;
    for (int c = 0; c < kD; ++c) Di += static_cast<double>(dO[i * kD + c]) * o[i * kD + c];
    for (int j = 0; j <= i; ++j) {
      double dp = 0;
      for (int c = 0; c < kD; ++c) dp += static_cast<double>(dO[i * kD + c]) * V[j * kD + c];
      dS[static_cast<size_t>(i) * seq + j] = P[static_cast<size_t>(i) * seq + j] * (dp - Di);
    }
  }
  for (int i = 0; i < seq; ++i) {
    for (int j = 0; j <= i; ++j) {
      const double p = P[static_cast<size_t>(i) * seq + j], ds = dS[static_cast<size_t>(i) * seq + j] * scale;
      for (int c = 0; c < kD; ++c) {
        dv[j * kD + c] += p * dO[i * kD + c];
        dk[j * kD + c] += ds * Q[i * kD + c];
        dq[i * kD + c] += ds * K[j * kD + c];
      }
    }
  }
  const double e_o = relative_error(O, o), e_q = relative_error(dQ, dq), e_k = relative_error(dK, dk), e_v = relative_error(dV, dv);
  if (e_o > 0.02 || e_v > 0.03 || e_k > 0.05 || e_q > 0.05) {
    throw std::runtime_error("attention result check failed (max error / max value: O " + std::to_string(e_o) + ", dQ " + std::to_string(e_q) +
                             ", dK " + std::to_string(e_k) + ", dV " + std::to_string(e_v) + ")");
  }
}

}  // namespace

AttentionTiming time_attention(int bh, int seq, const MeasureOptions& mo) {
  if (seq % kTile != 0 || seq <= 0 || bh <= 0) throw std::runtime_error("attention: seq must be a positive multiple of 64");
  cudaStream_t s = current_stream();
  check(cudaFuncSetAttribute(attention_forward, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kFwdSmem)), "forward smem");
  check(cudaFuncSetAttribute(attention_backward, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kBwdSmem)), "backward smem");
  static bool checked = false;
  if (!checked) {
    check_against_host(s);
    checked = true;
  }
  Buffers b(bh, seq);
  unsigned seed = 41u;
  for (bf16* p : {b.q, b.k, b.v, b.dout}) fill_attention<<<1024, 256, 0, s>>>(p, b.n, seed++);
  check(cudaGetLastError(), "fill");
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
  Events ev;
  auto timed = [&](bool fwd) {
    check(cudaEventRecord(ev.a, s), "record");
    if (fwd) {
      forward(b, bh, seq, scale, s);
    } else {
      backward(b, bh, seq, scale, s);
    }
    check(cudaGetLastError(), "attention kernel");
    check(cudaEventRecord(ev.b, s), "record");
    return ev.seconds();
  };
  AttentionTiming t;
  forward(b, bh, seq, scale, s);  // the backward reads O and L
  t.forward_s = measure([&]() { return timed(true); }, mo).median_s;
  t.backward_s = measure([&]() { return timed(false); }, mo).median_s;
  return t;
}

}  // namespace stepcast::calibrate::cuda
