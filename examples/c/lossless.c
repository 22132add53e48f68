/* Lossless round trip of a 4D double array holding NaN and infinities (bound 0: every bit kept),
 * then what the error reporting looks like for a wrong buffer size and a truncated stream.
 * Exits nonzero if anything differs from that.
 *
 * Linked with the static library, so the program does not need libamrzip.so at run time:
 *
 *   cc $(amrzip config --cflags) lossless.c $(amrzip config --libs --static) -o lossless */
#include <amrzip.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int expect(int status, int wanted, const char *what) {
    if (status != wanted) {
        fprintf(stderr, "%s returned %d, expected %d: %s\n", what, status, wanted, amrzip_last_error());
        return 0;
    }
    if (status != AMRZIP_OK) printf("%s failed as expected (%d): %s\n", what, status, amrzip_last_error());
    return 1;
}

int main(void) {
    const size_t shape[4] = {3, 17, 20, 24};
    const size_t n = shape[0] * shape[1] * shape[2] * shape[3];
    double *data = (double *)malloc(n * sizeof *data);
    if (data == NULL) return 1;
    /* A staircase with a few non-finite values: lossless must reproduce every bit. */
    for (size_t i = 0; i < n; i++) data[i] = (double)(i / 7) * 0.1 - 40.0;
    data[5] = strtod("nan", NULL);
    data[n / 2] = strtod("inf", NULL);
    data[n - 1] = -data[n / 2];

    if (!expect(amrzip_set_threads(1), AMRZIP_OK, "amrzip_set_threads")) return 1;
    uint8_t *stream = NULL;
    size_t stream_len = 0;
    if (!expect(amrzip_compress(data, AMRZIP_F64, 4, shape, 0.0, &stream, &stream_len), AMRZIP_OK, "amrzip_compress"))
        return 1;

    size_t out_bytes = 0;
    if (!expect(amrzip_info(stream, stream_len, NULL, NULL, NULL, &out_bytes), AMRZIP_OK, "amrzip_info")) return 1;
    double *decoded = (double *)malloc(out_bytes);
    if (decoded == NULL) return 1;
    if (!expect(amrzip_decompress(stream, stream_len, decoded, out_bytes), AMRZIP_OK, "amrzip_decompress")) return 1;
    if (out_bytes != n * sizeof *data || memcmp(data, decoded, out_bytes) != 0) {
        fprintf(stderr, "the lossless round trip changed the data\n");
        return 1;
    }
    printf("lossless: %zu doubles, %zu -> %zu bytes, every bit kept\n", n, out_bytes, stream_len);

    if (!expect(amrzip_decompress(stream, stream_len, decoded, out_bytes - 8), AMRZIP_ERR_INVALID,
                "amrzip_decompress into a buffer one value short") ||
        !expect(amrzip_decompress(stream, stream_len / 2, decoded, out_bytes), AMRZIP_ERR_CORRUPT,
                "amrzip_decompress of half a stream"))
        return 1;

    amrzip_free(stream);
    free(decoded);
    free(data);
    return 0;
}
