/*
 * amrzip C API: error-bounded compression of float and double arrays of 1 to 4 dimensions.
 *
 * Functions that can fail return AMRZIP_OK (0) or a nonzero AMRZIP_ERR_* code, and
 * amrzip_last_error() then gives the reason. Buffers the library allocates are released with
 * amrzip_free(). Every function may be called from several threads at once.
 * Building, linking and the full contracts: docs/capi.md.
 */

#ifndef AMRZIP_H
#define AMRZIP_H

/* Generated from crates/capi by cbindgen (`make header`): do not edit. */

#include <stddef.h>
#include <stdint.h>

/**
 * Most dimensions an array may have; `amrzip_info` writes this many shape entries.
 */
#define AMRZIP_MAX_NDIM 4

/**
 * The call succeeded.
 */
#define AMRZIP_OK 0

/**
 * An argument is unusable: a NULL pointer, ndim outside 1..AMRZIP_MAX_NDIM, a shape whose size
 * overflows, an unknown dtype, a negative or non-finite bound, a buffer size that does not match.
 */
#define AMRZIP_ERR_INVALID 1

/**
 * The input is not a valid amrzip stream: truncated, damaged, or something else altogether.
 */
#define AMRZIP_ERR_CORRUPT 2

/**
 * The library failed: out of memory for a result, or a bug (a panic, caught).
 */
#define AMRZIP_ERR_INTERNAL 3

/**
 * Element type of an array or stream: float (IEEE binary32) or double (binary64), in the
 * machine's byte order.
 */
typedef enum {
  AMRZIP_F32 = 0,
  AMRZIP_F64 = 1,
} amrzip_dtype;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * The library's version, such as "0.1.0": the one linked at run time, which may differ from the
 * header a program was built with. The string is static: do not free it.
 */
const char *amrzip_version(void);

/**
 * Compresses the array `data` of `ndim` dimensions (1 to AMRZIP_MAX_NDIM) and `shape` (C order:
 * the last index varies fastest) so that every decoded value is within `abs_bound` of the
 * original (0: lossless; NaN and infinities are kept bit for bit). On success `*out` points to
 * the stream, `*out_len` bytes long, which the caller releases with `amrzip_free`. On failure
 * `*out` is NULL and `*out_len` 0 (if they are not NULL themselves).
 *
 * Returns AMRZIP_OK, AMRZIP_ERR_INVALID (NULL pointers, ndim out of range, a shape whose size
 * overflows, an unknown dtype, `abs_bound` negative, NaN or infinite, `data` not aligned for its
 * type) or AMRZIP_ERR_INTERNAL. Safe to call from several threads at once.
 *
 * # Safety
 * `shape` holds `ndim` values; `data` holds as many elements of `dtype` as their product (it may
 * be NULL if that is 0); `out` and `out_len` are writable.
 */
int amrzip_compress(const void *data,
                    amrzip_dtype dtype,
                    int ndim,
                    const size_t *shape,
                    double abs_bound,
                    uint8_t **out,
                    size_t *out_len);

/**
 * Describes the stream of `len` bytes at `in` without decoding it, after checking its header
 * and checksums: writes its element type to `*dtype`, its number of dimensions to `*ndim`, its
 * shape to `shape[0..ndim]` (and 0 to the rest of `shape[0..AMRZIP_MAX_NDIM]`) and the size of
 * the decoded array, the `out_bytes` that `amrzip_decompress` takes, to `*out_bytes`. Each of the
 * four outputs may be NULL if not wanted; nothing is written on failure.
 *
 * Returns AMRZIP_OK, AMRZIP_ERR_INVALID (`in` NULL) or AMRZIP_ERR_CORRUPT. Safe to call from
 * several threads at once.
 *
 * # Safety
 * `in` points to `len` readable bytes; the outputs are NULL or writable, `shape` for
 * AMRZIP_MAX_NDIM values.
 */
int amrzip_info(const uint8_t *in,
                size_t len,
                amrzip_dtype *dtype,
                int *ndim,
                size_t *shape,
                size_t *out_bytes);

/**
 * Decodes the stream of `len` bytes at `in` into `out`, which must be exactly `out_bytes` long:
 * the size `amrzip_info` reports (element count times 4 for AMRZIP_F32 or 8 for AMRZIP_F64).
 * The values are written in C order, in the stream's element type and the machine's byte order;
 * `out` needs no particular alignment. `out` is left as it is if the call fails before decoding
 * (any AMRZIP_ERR_INVALID, and a stream found damaged by its checksums), and may be partly
 * written if the call fails after.
 *
 * Returns AMRZIP_OK, AMRZIP_ERR_INVALID (`in` NULL, `out` NULL with `out_bytes` nonzero,
 * `out_bytes` not the decoded size; the message gives the size needed), AMRZIP_ERR_CORRUPT or
 * AMRZIP_ERR_INTERNAL. Safe to call from several threads at once.
 *
 * # Safety
 * `in` points to `len` readable bytes, `out` to `out_bytes` writable bytes (or is NULL if
 * `out_bytes` is 0).
 */
int amrzip_decompress(const uint8_t *in, size_t len, void *out, size_t out_bytes);

/**
 * The message of the last call that failed in the calling thread, or "" if none has. Calls that
 * succeed leave it as it is, so read it right after a call returned nonzero. The string belongs
 * to the library and stays valid until the next failing call in the same thread.
 */
const char *amrzip_last_error(void);

/**
 * Releases a buffer the library allocated (such as `amrzip_compress`'s output). NULL is
 * ignored. Any thread may release any buffer, once.
 *
 * # Safety
 * `ptr` is NULL or a buffer the library returned and that has not been released yet.
 */
void amrzip_free(void *ptr);

/**
 * Sets how many worker threads each later call may use, in any thread of the process: `n` from
 * 1 to 1024, or 0 for all cores (the default). An MPI code running several ranks per node would
 * set its share of the cores. The threads start here, so that a failure to start them is
 * reported now: AMRZIP_ERR_INVALID, for that or for a value out of range, keeps the setting.
 */
int amrzip_set_threads(int n);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* AMRZIP_H */
