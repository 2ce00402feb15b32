// gpuserve.sglang.cuda verify: compiled with the installed nvcc on every host; run only where a GPU exists.
// Prints "gpuserve-cuda-ok sum=97920 runtime=R driver=D" when a kernel ran and its result came back.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void add(const int *a, const int *b, int *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

#define CHECK(call)                                                             \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) {                                                    \
      std::printf("gpuserve-cuda-fail %s: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

int main() {
  const int n = 256;
  int a[n], b[n], c[n];
  for (int i = 0; i < n; ++i) { a[i] = i; b[i] = 2 * i; c[i] = 0; }
  int runtime = 0, driver = 0;
  CHECK(cudaRuntimeGetVersion(&runtime));
  CHECK(cudaDriverGetVersion(&driver));
  int *da, *db, *dc;
  CHECK(cudaMalloc(&da, sizeof a));
  CHECK(cudaMalloc(&db, sizeof b));
  CHECK(cudaMalloc(&dc, sizeof c));
  CHECK(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice));
  add<<<(n + 127) / 128, 128>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost));
  long sum = 0;
  for (int i = 0; i < n; ++i) sum += c[i];
  std::printf("gpuserve-cuda-ok sum=%ld runtime=%d driver=%d\n", sum, runtime, driver);
  return sum == 97920 ? 0 : 2;
}
