/* The C boundary between a KernelBench candidate built against MooreEval's torch shim and the
 * bridge that calls it from Python (docs/solution-formats.md, "How KernelBench-format
 * candidates are built").
 *
 * A candidate's load_inline sources are compiled against src/eval/torch_shim/ instead of
 * libtorch's headers: no ATen to parse, seconds instead of tens of seconds per candidate. The
 * shim's torch::Tensor is a handle into a real at::Tensor owned by the bridge; whatever it
 * cannot do itself (allocate, make contiguous, view) it asks the bridge through mc_shim_ops,
 * so every such operation is a real ATen call that the run-time legality monitor sees.
 *
 * The candidate library exports:
 *   int  mc_shim_abi_version(void);                      returns MC_SHIM_ABI_VERSION
 *   void mc_shim_init(const mc_shim_ops* ops);            called once, before any call
 *   int  mc_shim_call_<function>(const mc_shim_value* args, int n_args,
 *                                mc_shim_result* result, char* error, int error_size);
 *        for each name in load_inline's `functions`; 0 on success, else error holds why.
 */
#ifndef MUSACODER_TORCH_SHIM_ABI_H_
#define MUSACODER_TORCH_SHIM_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MC_SHIM_ABI_VERSION 1
#define MC_SHIM_MAX_DIMS 16
#define MC_SHIM_MAX_ITEMS 64

/* Scalar types: the values of c10::ScalarType for the types the shim knows. */
typedef enum {
  MC_SHIM_UINT8 = 0, MC_SHIM_INT8 = 1, MC_SHIM_INT16 = 2, MC_SHIM_INT32 = 3, MC_SHIM_INT64 = 4,
  MC_SHIM_FLOAT16 = 5, MC_SHIM_FLOAT32 = 6, MC_SHIM_FLOAT64 = 7, MC_SHIM_BOOL = 11,
  MC_SHIM_BFLOAT16 = 15
} mc_shim_dtype;

typedef struct mc_shim_tensor mc_shim_tensor; /* opaque: owned by the bridge */

typedef struct {
  void* data;
  int32_t dtype;        /* mc_shim_dtype */
  int32_t ndim;
  int64_t sizes[MC_SHIM_MAX_DIMS];
  int64_t strides[MC_SHIM_MAX_DIMS];
  int64_t numel;
  int32_t device_type;  /* 0 CPU, 1 CUDA (c10::DeviceType) */
  int32_t device_index;
  int32_t contiguous;
  int32_t element_size;
} mc_shim_meta;

typedef enum {
  MC_SHIM_NONE = 0, MC_SHIM_TENSOR = 1, MC_SHIM_INT = 2, MC_SHIM_DOUBLE = 3, MC_SHIM_BOOL_VALUE = 4,
  MC_SHIM_LIST = 5 /* of tensors, ints or doubles: items in `items` */
} mc_shim_kind;

typedef struct mc_shim_value {
  int32_t kind;  /* mc_shim_kind */
  int32_t n;     /* MC_SHIM_LIST: number of items */
  int64_t i;     /* MC_SHIM_INT, MC_SHIM_BOOL_VALUE */
  double d;      /* MC_SHIM_DOUBLE */
  mc_shim_tensor* t;                   /* MC_SHIM_TENSOR: borrowed */
  const struct mc_shim_value* items;   /* MC_SHIM_LIST */
} mc_shim_value;

/* A function's return value: one value, or a tuple / list of up to MC_SHIM_MAX_ITEMS. Tensors
 * in it carry a reference the bridge takes over. */
typedef struct {
  int32_t kind;   /* 0: value (v[0]), 1: tuple, 2: list */
  int32_t n;
  mc_shim_value v[MC_SHIM_MAX_ITEMS];
} mc_shim_result;

typedef enum {
  MC_SHIM_OP_CONTIGUOUS = 0, MC_SHIM_OP_CLONE = 1, MC_SHIM_OP_ZERO_ = 2
} mc_shim_unary_op;

typedef enum { MC_SHIM_VIEW = 0, MC_SHIM_RESHAPE = 1, MC_SHIM_PERMUTE = 2 } mc_shim_shape_op;

typedef enum {
  MC_SHIM_FILL_EMPTY = 0, MC_SHIM_FILL_ZEROS = 1, MC_SHIM_FILL_ONES = 2, MC_SHIM_FILL_VALUE = 3
} mc_shim_fill;

/* Operations the bridge provides. Every function returning a tensor returns a new reference
 * (NULL on error, with the message from last_error()). */
typedef struct {
  int32_t version;
  mc_shim_tensor* (*factory)(const int64_t* sizes, int32_t ndim, int32_t dtype, int32_t device_type,
                             int32_t device_index, int32_t fill, double value);
  mc_shim_tensor* (*unary)(mc_shim_tensor* t, int32_t op);
  mc_shim_tensor* (*shape_op)(mc_shim_tensor* t, int32_t op, const int64_t* dims, int32_t n);
  mc_shim_tensor* (*transpose)(mc_shim_tensor* t, int64_t a, int64_t b);
  mc_shim_tensor* (*to_dtype)(mc_shim_tensor* t, int32_t dtype);
  void (*retain)(mc_shim_tensor* t);
  void (*release)(mc_shim_tensor* t);
  void (*meta)(mc_shim_tensor* t, mc_shim_meta* out);
  void* (*current_stream)(int32_t device_index);  /* cudaStream_t of torch's current stream */
  const char* (*last_error)(void);
} mc_shim_ops;

#ifdef __cplusplus
}
#endif

#endif /* MUSACODER_TORCH_SHIM_ABI_H_ */
