/*
 * amrzip C API: error-bounded compression of float and double arrays of 1 to 4 dimensions,
 * and snapshots of AMR hierarchies written from a simulation's memory and read back by region.
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
 * The input is not a valid amrzip stream, or a store or snapshot is damaged or is not one:
 * truncated, damaged, or something else altogether.
 */
#define AMRZIP_ERR_CORRUPT 2

/**
 * The library failed: out of memory for a result, or a bug (a panic, caught).
 */
#define AMRZIP_ERR_INTERNAL 3

/**
 * A snapshot of that name exists already (snapshots are never overwritten), or the store's
 * path is taken by something that is not a store.
 */
#define AMRZIP_ERR_EXISTS 4

/**
 * No snapshot or field of that name.
 */
#define AMRZIP_ERR_NOT_FOUND 5

/**
 * The operating system refused a file operation (permissions, a full disk...).
 */
#define AMRZIP_ERR_IO 6

/**
 * Covered cells (those a finer level refines) as the mean of the finer cells over them (for
 * node-centred data, the fine node on them).
 */
#define AMRZIP_COVERED_AVERAGE 0

/**
 * Covered cells as NaN.
 */
#define AMRZIP_COVERED_NAN 1

/**
 * Buffer order: x fastest, as AMReX and Fortran arrays are.
 */
#define AMRZIP_ORDER_FORTRAN 0

/**
 * Buffer order: the last index fastest, as C arrays `a[i][j][k]` are.
 */
#define AMRZIP_ORDER_C 1

/**
 * Element type of an array or stream: float (IEEE binary32) or double (binary64), in the
 * machine's byte order.
 */
typedef enum {
  AMRZIP_F32 = 0,
  AMRZIP_F64 = 1,
} amrzip_dtype;

/**
 * How a field's error bound is given.
 */
typedef enum {
  /**
   * Every stored value within this absolute distance of the original.
   */
  AMRZIP_ABS = 0,
  /**
   * A fraction of the field's value range over the cells stored (all levels).
   */
  AMRZIP_REL = 1,
} amrzip_bound_mode;

/**
 * A snapshot opened for reading (opaque to C). Several threads may read through one reader at
 * once.
 */
typedef struct amrzip_reader amrzip_reader;

/**
 * A snapshot being declared (opaque to C).
 */
typedef struct amrzip_writer amrzip_writer;

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
 * Opens snapshot `name` of the store at `store_path`, or its latest snapshot when `name` is
 * NULL. `*out` receives the reader (NULL on failure), to be closed with `amrzip_reader_close`.
 *
 * Returns AMRZIP_OK, AMRZIP_ERR_INVALID (NULL pointers), AMRZIP_ERR_NOT_FOUND (no such
 * snapshot), AMRZIP_ERR_CORRUPT (not a store, or the snapshot's metadata is damaged) or
 * AMRZIP_ERR_IO.
 *
 * # Safety
 * `store_path` is a NUL-terminated string, `name` one or NULL; `out` is writable.
 */
int amrzip_reader_open(const char *store_path, const char *name, amrzip_reader **out);

/**
 * Closes a reader. NULL is ignored.
 *
 * # Safety
 * `r` is NULL or a reader from `amrzip_reader_open` not yet closed, that no other thread uses.
 */
void amrzip_reader_close(amrzip_reader *r);

/**
 * The snapshot's dimensionality, number of levels and number of fields, and its geometry:
 * `prob_lo`, `prob_hi` (`dim` values each), the coordinate system, time and step. Any output
 * may be NULL.
 *
 * # Safety
 * `r` is a reader; the outputs are NULL or writable (`prob_lo`, `prob_hi` for 3 values).
 */
int amrzip_reader_info(const amrzip_reader *r,
                       int *dim,
                       int *num_levels,
                       int *num_fields,
                       double *prob_lo,
                       double *prob_hi,
                       int *coord_sys,
                       double *time,
                       int64_t *step);

/**
 * Field `field`'s name (a string owned by the reader, valid until it is closed), element type
 * and absolute bound: every stored value is within it of the value written (a relative bound
 * became this when the snapshot was written). Any output may be NULL.
 *
 * # Safety
 * `r` is a reader; the outputs are NULL or writable.
 */
int amrzip_reader_field(const amrzip_reader *r,
                        int field,
                        const char **name,
                        amrzip_dtype *dtype,
                        double *abs_bound);

/**
 * The index of the field called `name`, to `*index`.
 *
 * Returns AMRZIP_OK, AMRZIP_ERR_INVALID (NULL pointers) or AMRZIP_ERR_NOT_FOUND.
 *
 * # Safety
 * `r` is a reader; `name` is a NUL-terminated string; `index` is writable.
 */
int amrzip_reader_field_index(const amrzip_reader *r, const char *name, int *index);

/**
 * Level `level`'s domain (inclusive cell indices, `dim` values each), refinement ratio to the
 * next level (all 1 at the finest), cell size and number of boxes. Any output may be NULL.
 *
 * # Safety
 * `r` is a reader; the outputs are NULL or writable (arrays for `dim` values).
 */
int amrzip_reader_level(const amrzip_reader *r,
                        int level,
                        int64_t *domain_lo,
                        int64_t *domain_hi,
                        int *ref_ratio,
                        double *dx,
                        size_t *num_boxes);

/**
 * Box `index` of level `level`: its inclusive indices `lo`, `hi` (`dim` values each) and the
 * rank that owned it. Any output may be NULL.
 *
 * # Safety
 * `r` is a reader; the outputs are NULL or writable (arrays for `dim` values).
 */
int amrzip_reader_box(const amrzip_reader *r,
                      int level,
                      size_t index,
                      int64_t *lo,
                      int64_t *hi,
                      int *owner);

/**
 * Reads field `field` of level `level` over the region `lo`..`hi` (inclusive indices of the
 * level, `dim` values each) into `out`, which must be exactly `out_bytes` long: the region's
 * cells times 4 (float fields) or 8 (double fields). `order` is AMRZIP_ORDER_FORTRAN (x fastest)
 * or AMRZIP_ORDER_C. Cells outside every box are NaN; covered cells as `covered` says
 * (AMRZIP_COVERED_AVERAGE or AMRZIP_COVERED_NAN). Every stored cell is within the field's bound
 * of what was written. Several threads may read through one reader at once.
 *
 * Returns AMRZIP_OK, AMRZIP_ERR_INVALID (an argument out of range, a buffer of the wrong size)
 * or AMRZIP_ERR_CORRUPT (a chunk the region needs is missing or damaged, named in the message).
 *
 * # Safety
 * `r` is a reader; `lo`, `hi` hold `dim` values; `out` is writable for `out_bytes` bytes.
 */
int amrzip_reader_read(const amrzip_reader *r,
                       int field,
                       int level,
                       const int64_t *lo,
                       const int64_t *hi,
                       int covered,
                       int order,
                       void *out,
                       size_t out_bytes);

/**
 * Starts a snapshot `name` of the store at the folder `store_path` (created when it is not
 * there yet) of `dim` dimensions (1 to 3). `*out` receives the writer, to be given to
 * `amrzip_writer_commit` or `amrzip_writer_abort`, which free it; NULL on failure. Nothing is
 * written to the store before the commit. A writer is used by one thread at a time.
 *
 * Returns AMRZIP_OK, AMRZIP_ERR_INVALID (NULL pointers, `dim` out of range, a name that is not
 * 1-128 letters, digits, '_', '.', '+', '-' starting with a letter or digit) or
 * AMRZIP_ERR_EXISTS (the snapshot exists).
 *
 * # Safety
 * `store_path` and `name` are NUL-terminated strings; `out` is writable.
 */
int amrzip_writer_open(const char *store_path, const char *name, int dim, amrzip_writer **out);

/**
 * Sets the physical domain (`prob_lo`, `prob_hi`: `dim` values each), the coordinate system
 * (0 Cartesian, 1 cylindrical, 2 spherical, as AMReX numbers them), the time and the step.
 * Required before the commit.
 *
 * # Safety
 * `w` is a writer; `prob_lo` and `prob_hi` hold `dim` values.
 */
int amrzip_writer_set_geometry(amrzip_writer *w,
                               const double *prob_lo,
                               const double *prob_hi,
                               int coord_sys,
                               double time,
                               int64_t step);

/**
 * Marks the dimensions along which the data sits on nodes (`node[d]` nonzero) rather than in
 * cells: boxes then index nodes, one more than the cells they bound. Default: cells.
 *
 * # Safety
 * `w` is a writer; `node` holds `dim` values.
 */
int amrzip_writer_set_nodal(amrzip_writer *w, const int *node);

/**
 * Compresses for speed (`speed` nonzero: one fixed predictor setup, a lighter lossless stage)
 * instead of for the smallest output (the default).
 *
 * # Safety
 * `w` is a writer.
 */
int amrzip_writer_set_speed(amrzip_writer *w, int speed);

/**
 * Declares the next field: its name, element type and error bound (`mode` AMRZIP_ABS or
 * AMRZIP_REL, `bound` a finite number >= 0; 0 is lossless). Fields are declared before any box
 * is added; the field index used by `amrzip_writer_add_box` is the order of declaration.
 *
 * # Safety
 * `w` is a writer; `name` is a NUL-terminated string.
 */
int amrzip_writer_add_field(amrzip_writer *w,
                            const char *name,
                            amrzip_dtype dtype,
                            int mode,
                            double bound);

/**
 * Declares the next level, coarsest first: its domain (`domain_lo`, `domain_hi`: inclusive
 * cell indices, `dim` values each; level L+1's must be level L's refined by L's ratio), its
 * refinement ratio to the next finer level (`dim` values; NULL or ignored for the finest level)
 * and its cell size `dx` (`dim` values). Its index (0, 1, ...) is what `amrzip_writer_add_box`
 * takes.
 *
 * # Safety
 * `w` is a writer; the arrays hold `dim` values (`ref_ratio` may be NULL).
 */
int amrzip_writer_add_level(amrzip_writer *w,
                            const int64_t *domain_lo,
                            const int64_t *domain_hi,
                            const int *ref_ratio,
                            const double *dx);

/**
 * Adds a box to level `level`: inclusive indices `lo`, `hi` (`dim` values each), `ngrow` ghost
 * cells on each side per dimension (`dim` values, or NULL for none), the rank `owner` that holds
 * it, and `data[f]` the address of field f's values (one pointer per declared field, of the
 * field's element type) over the box grown by its ghost cells, in Fortran order (x fastest), as
 * an AMReX FAB or a Chombo FArrayBox holds a component. Ghost cells are not stored.
 *
 * The values are read during `amrzip_writer_commit`, not now: they must stay in place and
 * unchanged until it returns.
 *
 * # Safety
 * `w` is a writer; `lo`, `hi` (and `ngrow` if not NULL) hold `dim` values; `data` holds one
 * pointer per declared field, each to the box's values as described, valid until the commit.
 */
int amrzip_writer_add_box(amrzip_writer *w,
                          int level,
                          const int64_t *lo,
                          const int64_t *hi,
                          const int *ngrow,
                          int owner,
                          const void *const *data);

/**
 * Compresses every box and commits the snapshot: once this returns AMRZIP_OK the snapshot is
 * in the store, whole, under its name; on failure the store is as it was. The writer is freed
 * either way.
 *
 * Returns AMRZIP_OK, AMRZIP_ERR_INVALID (missing geometry, no field or level, levels that do
 * not nest or refine each other, boxes outside their domain), AMRZIP_ERR_EXISTS (another writer
 * committed that name meanwhile), AMRZIP_ERR_CORRUPT (the store is damaged) or AMRZIP_ERR_IO.
 *
 * # Safety
 * `w` is a writer from `amrzip_writer_open` not yet committed or aborted; every box's data is
 * still in place.
 */
int amrzip_writer_commit(amrzip_writer *w);

/**
 * Abandons the snapshot (nothing was written) and frees the writer. NULL is ignored.
 *
 * # Safety
 * `w` is NULL or a writer from `amrzip_writer_open` not yet committed or aborted.
 */
void amrzip_writer_abort(amrzip_writer *w);

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
