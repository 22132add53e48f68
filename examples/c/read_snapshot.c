/* Opens a snapshot of an amrzip store (the latest, or the one named) and describes it: fields
 * with their bounds, levels with their boxes; then reads each field over the first box of the
 * finest level and prints its range. Exits nonzero on any failure.
 *
 *   read_snapshot STORE [SNAPSHOT]
 *   cc $(amrzip config --cflags) read_snapshot.c $(amrzip config --libs) -o read_snapshot
 *
 * Valid C99 and C++. */
#include <amrzip.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(amrzip_reader *r, const char *what) {
    fprintf(stderr, "%s failed: %s\n", what, amrzip_last_error());
    amrzip_reader_close(r);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s STORE [SNAPSHOT]\n", argv[0]);
        return 2;
    }
    amrzip_reader *r = NULL;
    if (amrzip_reader_open(argv[1], argc > 2 ? argv[2] : NULL, &r) != AMRZIP_OK) return fail(r, "amrzip_reader_open");

    int dim, levels, fields;
    double time;
    int64_t step;
    if (amrzip_reader_info(r, &dim, &levels, &fields, NULL, NULL, NULL, &time, &step) != AMRZIP_OK)
        return fail(r, "amrzip_reader_info");
    printf("%d-d snapshot at time %g (step %lld): %d levels, %d fields\n", dim, time, (long long)step, levels, fields);

    for (int l = 0; l < levels; l++) {
        int64_t lo[3], hi[3];
        size_t boxes;
        if (amrzip_reader_level(r, l, lo, hi, NULL, NULL, &boxes) != AMRZIP_OK) return fail(r, "amrzip_reader_level");
        printf("level %d: %zu boxes in a domain of", l, boxes);
        for (int d = 0; d < dim; d++) printf(" %lld", (long long)(hi[d] - lo[d] + 1));
        printf(" cells\n");
    }

    /* The first box of the finest level, every field, x fastest as a Fortran code reads it. */
    int64_t lo[3], hi[3];
    if (amrzip_reader_box(r, levels - 1, 0, lo, hi, NULL) != AMRZIP_OK) return fail(r, "amrzip_reader_box");
    size_t n = 1;
    for (int d = 0; d < dim; d++) n *= (size_t)(hi[d] - lo[d] + 1);
    for (int f = 0; f < fields; f++) {
        const char *name;
        amrzip_dtype dtype;
        double bound;
        if (amrzip_reader_field(r, f, &name, &dtype, &bound) != AMRZIP_OK) return fail(r, "amrzip_reader_field");
        size_t size = dtype == AMRZIP_F32 ? sizeof(float) : sizeof(double);
        void *values = malloc(n * size);
        if (values == NULL) return fail(r, "malloc");
        if (amrzip_reader_read(r, f, levels - 1, lo, hi, AMRZIP_COVERED_AVERAGE, AMRZIP_ORDER_FORTRAN, values, n * size) != AMRZIP_OK) {
            free(values);
            return fail(r, "amrzip_reader_read");
        }
        double low = INFINITY, high = -INFINITY;
        for (size_t i = 0; i < n; i++) {
            double v = dtype == AMRZIP_F32 ? (double)((float *)values)[i] : ((double *)values)[i];
            if (v < low) low = v;
            if (v > high) high = v;
        }
        free(values);
        printf("%s (%s, within %g): %g to %g over the first box of level %d\n", name, dtype == AMRZIP_F32 ? "float" : "double", bound,
               low, high, levels - 1);
    }
    amrzip_reader_close(r);
    return 0;
}
