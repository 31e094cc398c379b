// NCCL for stepcast's CUDA translation units. With NCCL (STEPCAST_HAVE_NCCL=1) this is <nccl.h>.
// Without it the CUDA backends still build for one GPU (GEMMs, attention, HBM copies, and
// single-GPU validation): the handful of NCCL entry points they name are declared here and
// fail with ncclInvalidUsage, so a multi-GPU run ends with "built without NCCL" instead of a
// missing symbol.
#pragma once

#if STEPCAST_HAVE_NCCL
#include <nccl.h>
#else
#include <cuda_runtime.h>

#include <cstddef>

#define NCCL_MAJOR 0
#define NCCL_MINOR 0
#define NCCL_PATCH 0

typedef struct stepcast_no_nccl_comm* ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef enum { ncclSuccess = 0, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclFloat16 = 6, ncclFloat32 = 7, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;

inline const char* ncclGetErrorString(ncclResult_t) { return "stepcast was built without NCCL (multi-GPU runs need it)"; }
inline ncclResult_t ncclGetUniqueId(ncclUniqueId*) { return ncclInvalidUsage; }
inline ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int) { return ncclInvalidUsage; }
inline ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclSuccess; }
inline ncclResult_t ncclGroupStart() { return ncclInvalidUsage; }
inline ncclResult_t ncclGroupEnd() { return ncclInvalidUsage; }
inline ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
inline ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }
inline ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
inline ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }
inline ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }
inline ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return ncclInvalidUsage; }
#endif
