/* MusaCoder native solution format: a CUDA source with one C entry point, compiled by nvcc
 * without torch headers (the fast path for training). See docs/solution-formats.md.
 *
 *   extern "C" int mc_forward(const mc_tensor* inputs, int n_inputs,
 *                             mc_tensor* outputs, int n_outputs, cudaStream_t stream);
 *
 * inputs:  the problem's get_inputs() in order, then the reference Model's state_dict()
 *          tensors (parameters and buffers) in order. Non-tensor inputs arrive as 0-d host
 *          values (on_host = 1): int64 for integers, float64 for floats.
 * outputs: preallocated by the verifier with the reference output's shapes and dtypes,
 *          contiguous, filled with NaN; forward must write every element.
 * stream:  launch every kernel on this stream. Return 0 on success, non-zero on error.
 *
 * MUSA twin: the same entry point with musaStream_t (musa_runtime.h), in a .mu file built by
 * mcc; `musacoder port --to musa` turns one into the other. This header names no stream type,
 * so both include it unchanged.
 */
#ifndef MUSACODER_NATIVE_ABI_H_
#define MUSACODER_NATIVE_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MC_MAX_DIMS 8

typedef enum {
  MC_FLOAT32 = 0,
  MC_FLOAT16 = 1,
  MC_BFLOAT16 = 2,
  MC_FLOAT64 = 3,
  MC_INT32 = 4,
  MC_INT64 = 5,
  MC_INT8 = 6,
  MC_UINT8 = 7,
  MC_BOOL = 8,
  MC_INT16 = 9,
} mc_dtype;

typedef struct {
  void* data;                     /* device pointer (host pointer when on_host) */
  int32_t dtype;                  /* mc_dtype */
  int32_t ndim;                   /* <= MC_MAX_DIMS */
  int64_t shape[MC_MAX_DIMS];     /* elements */
  int64_t strides[MC_MAX_DIMS];   /* elements, not bytes */
  int32_t on_host;
  int32_t reserved;
} mc_tensor;

#ifdef __cplusplus
}
#endif

#endif /* MUSACODER_NATIVE_ABI_H_ */
