/* Compresses a smooth 3D float field under an absolute error bound, decodes it, checks every
 * value against the bound and prints the compression ratio. Exits nonzero on any failure.
 *
 *   cc $(amrzip config --cflags) compress.c $(amrzip config --libs) -o compress
 *
 * Valid C99 and C++, so the same file also checks the header's extern "C" guards. */
#include <amrzip.h>

#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what) {
    fprintf(stderr, "%s failed: %s\n", what, amrzip_last_error());
    return 1;
}

int main(void) {
    const size_t shape[3] = {64, 96, 128};
    const size_t n = shape[0] * shape[1] * shape[2];
    const double bound = 1e-3;

    float *field = (float *)malloc(n * sizeof *field);
    if (field == NULL) return 1;
    /* A smooth polynomial field on the unit cube (no libm needed). */
    for (size_t i = 0; i < shape[0]; i++)
        for (size_t j = 0; j < shape[1]; j++)
            for (size_t k = 0; k < shape[2]; k++) {
                double x = (double)i / (double)shape[0], y = (double)j / (double)shape[1],
                       z = (double)k / (double)shape[2];
                field[(i * shape[1] + j) * shape[2] + k] =
                    (float)((x - 0.3) * (x - 0.3) * (1.0 + y) - 0.5 * y * z + z * z * z / (1.0 + x));
            }

    uint8_t *stream = NULL;
    size_t stream_len = 0;
    if (amrzip_compress(field, AMRZIP_F32, 3, shape, bound, &stream, &stream_len) != AMRZIP_OK)
        return fail("amrzip_compress");

    /* A reader that knows nothing of the array learns its type and size from the stream. */
    amrzip_dtype dtype;
    int ndim;
    size_t stream_shape[AMRZIP_MAX_NDIM];
    size_t out_bytes;
    if (amrzip_info(stream, stream_len, &dtype, &ndim, stream_shape, &out_bytes) != AMRZIP_OK)
        return fail("amrzip_info");
    if (dtype != AMRZIP_F32 || ndim != 3 || out_bytes != n * sizeof(float)) {
        fprintf(stderr, "amrzip_info: unexpected type, dimensions or size\n");
        return 1;
    }

    float *decoded = (float *)malloc(out_bytes);
    if (decoded == NULL) return 1;
    if (amrzip_decompress(stream, stream_len, decoded, out_bytes) != AMRZIP_OK)
        return fail("amrzip_decompress");

    double max_error = 0.0;
    for (size_t i = 0; i < n; i++) {
        double error = (double)field[i] - (double)decoded[i];
        if (error < 0) error = -error;
        if (!(error <= bound)) {
            fprintf(stderr, "value %zu: %.9g decoded as %.9g, error %.3g over the bound %.3g\n", i,
                    (double)field[i], (double)decoded[i], error, bound);
            return 1;
        }
        if (error > max_error) max_error = error;
    }
    printf("amrzip %s: %zu x %zu x %zu floats, %zu -> %zu bytes, ratio %.1f, max error %.3g <= %.3g\n",
           amrzip_version(), shape[0], shape[1], shape[2], out_bytes, stream_len,
           (double)out_bytes / (double)stream_len, max_error, bound);

    amrzip_free(stream);
    free(decoded);
    free(field);
    return 0;
}
