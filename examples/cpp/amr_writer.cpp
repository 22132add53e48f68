// Writes a snapshot of a three-level AMR hierarchy from memory, as a simulation code would at an
// output step, then reads it back through the C API and checks every stored value against the
// bound.
//
// The hierarchy is held the way AMReX holds a MultiFab: per level, boxes of cells, each with a
// FAB of all components one after another, each component in Fortran order (x fastest) over the
// box grown by one ghost cell. The write is the loop of a plotfile writer: over levels, over
// boxes, handing amrzip a pointer to each component; nothing is copied.
//
//   amr_writer STORE [SNAPSHOT]      (exit status 0 when every value is within its bound)
//
// Build: c++ $(amrzip config --cflags) amr_writer.cpp $(amrzip config --libs) -o amr_writer

#include <amrzip.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int kDim = 3;
constexpr int kGhost = 1;
using IntVect = std::array<int64_t, kDim>;

struct Box {
    IntVect lo, hi;
    int64_t cells(int d) const { return hi[d] - lo[d] + 1; }
};

// One box's data: every component over the box grown by kGhost cells, Fortran order.
struct Fab {
    Box box;
    int ncomp;
    std::vector<double> values;

    Fab(const Box& b, int n) : box(b), ncomp(n), values(n * points()) {}
    int64_t extent(int d) const { return box.cells(d) + 2 * kGhost; }
    int64_t points() const { return extent(0) * extent(1) * extent(2); }
    double* dataPtr(int comp) { return values.data() + comp * points(); }
    double& operator()(int64_t i, int64_t j, int64_t k, int comp) {
        const int64_t a = i - box.lo[0] + kGhost, b = j - box.lo[1] + kGhost, c = k - box.lo[2] + kGhost;
        return values[comp * points() + a + extent(0) * (b + extent(1) * c)];
    }
};

struct Level {
    Box domain;
    int ref_ratio;
    double dx;
    std::vector<Fab> fabs;
};

// The fields, as functions of the cell centre: a smooth wave and a sharp density blob.
double field(int comp, double x, double y, double z) {
    if (comp == 0) return std::sin(6.0 * x) * std::cos(4.0 * y) + 0.5 * z;
    const double r2 = (x - 0.5) * (x - 0.5) + (y - 0.5) * (y - 0.5) + (z - 0.5) * (z - 0.5);
    return 1.0 + 100.0 * std::exp(-r2 / 0.005);
}

const char* const kFields[] = {"wave", "density"};
constexpr int kComps = 2;
// Per field: AMRZIP_ABS or AMRZIP_REL, and the bound.
const int kModes[] = {AMRZIP_ABS, AMRZIP_REL};
const double kBounds[] = {1e-4, 1e-5};

// Cuts `region` into boxes of at most `size` cells per side.
std::vector<Box> chop(const Box& region, int64_t size) {
    std::vector<Box> out;
    for (int64_t i = region.lo[0]; i <= region.hi[0]; i += size)
        for (int64_t j = region.lo[1]; j <= region.hi[1]; j += size)
            for (int64_t k = region.lo[2]; k <= region.hi[2]; k += size)
                out.push_back({{i, j, k},
                               {std::min(i + size - 1, region.hi[0]), std::min(j + size - 1, region.hi[1]),
                                std::min(k + size - 1, region.hi[2])}});
    return out;
}

std::vector<Level> make_hierarchy() {
    // 32^3 coarse cells, refined twice by 2 around the blob at the centre.
    std::vector<Level> levels = {
        {{{0, 0, 0}, {31, 31, 31}}, 2, 1.0 / 32, {}},
        {{{0, 0, 0}, {63, 63, 63}}, 2, 1.0 / 64, {}},
        {{{0, 0, 0}, {127, 127, 127}}, 1, 1.0 / 128, {}},
    };
    const std::vector<Box> regions = {{{0, 0, 0}, {31, 31, 31}}, {{16, 16, 16}, {47, 47, 47}}, {{48, 40, 48}, {79, 87, 79}}};
    for (size_t l = 0; l < levels.size(); ++l) {
        for (const Box& b : chop(regions[l], 16)) {
            Fab fab(b, kComps);
            // Ghost cells hold values too, as after a fill-boundary; they are not stored.
            for (int c = 0; c < kComps; ++c)
                for (int64_t k = b.lo[2] - kGhost; k <= b.hi[2] + kGhost; ++k)
                    for (int64_t j = b.lo[1] - kGhost; j <= b.hi[1] + kGhost; ++j)
                        for (int64_t i = b.lo[0] - kGhost; i <= b.hi[0] + kGhost; ++i)
                            fab(i, j, k, c) = field(c, (i + 0.5) * levels[l].dx, (j + 0.5) * levels[l].dx, (k + 0.5) * levels[l].dx);
            levels[l].fabs.push_back(std::move(fab));
        }
    }
    return levels;
}

int fail(const char* what) {
    std::fprintf(stderr, "amr_writer: %s: %s\n", what, amrzip_last_error());
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s STORE [SNAPSHOT]\n", argv[0]);
        return 2;
    }
    const char* store = argv[1];
    const char* name = argc > 2 ? argv[2] : "step_000100";
    std::vector<Level> levels = make_hierarchy();

    // Write: geometry and fields, then the plotfile writer's loop over levels and boxes.
    amrzip_writer* w = nullptr;
    if (amrzip_writer_open(store, name, kDim, &w) != AMRZIP_OK) return fail("open");
    const double prob_lo[kDim] = {0, 0, 0}, prob_hi[kDim] = {1, 1, 1};
    if (amrzip_writer_set_geometry(w, prob_lo, prob_hi, 0, 0.25, 100) != AMRZIP_OK) return amrzip_writer_abort(w), fail("geometry");
    for (int c = 0; c < kComps; ++c)
        if (amrzip_writer_add_field(w, kFields[c], AMRZIP_F64, kModes[c], kBounds[c]) != AMRZIP_OK)
            return amrzip_writer_abort(w), fail("field");
    const int ngrow[kDim] = {kGhost, kGhost, kGhost};
    for (size_t l = 0; l < levels.size(); ++l) {
        Level& lev = levels[l];
        const int ratio[kDim] = {lev.ref_ratio, lev.ref_ratio, lev.ref_ratio};
        const double dx[kDim] = {lev.dx, lev.dx, lev.dx};
        if (amrzip_writer_add_level(w, lev.domain.lo.data(), lev.domain.hi.data(), ratio, dx) != AMRZIP_OK)
            return amrzip_writer_abort(w), fail("level");
        for (Fab& fab : lev.fabs) {
            const void* comps[kComps] = {fab.dataPtr(0), fab.dataPtr(1)};
            if (amrzip_writer_add_box(w, static_cast<int>(l), fab.box.lo.data(), fab.box.hi.data(), ngrow, 0, comps) != AMRZIP_OK)
                return amrzip_writer_abort(w), fail("box");
        }
    }
    if (amrzip_writer_commit(w) != AMRZIP_OK) return fail("commit");

    // Read every box of every level back and check the cells no finer level covers.
    amrzip_reader* r = nullptr;
    if (amrzip_reader_open(store, name, &r) != AMRZIP_OK) return fail("reader");
    int failures = 0;
    size_t cells = 0;
    for (int c = 0; c < kComps; ++c) {
        // The absolute bound every stored value keeps (a relative one became one on writing).
        double bound = 0;
        if (amrzip_reader_field(r, c, nullptr, nullptr, &bound) != AMRZIP_OK) return amrzip_reader_close(r), fail("field");
        for (size_t l = 0; l < levels.size(); ++l) {
            for (Fab& fab : levels[l].fabs) {
                const Box& b = fab.box;
                std::vector<double> back(b.cells(0) * b.cells(1) * b.cells(2));
                if (amrzip_reader_read(r, c, static_cast<int>(l), b.lo.data(), b.hi.data(), AMRZIP_COVERED_NAN, AMRZIP_ORDER_FORTRAN,
                                       back.data(), back.size() * sizeof(double)) != AMRZIP_OK)
                    return amrzip_reader_close(r), fail("read");
                size_t n = 0;
                for (int64_t k = b.lo[2]; k <= b.hi[2]; ++k)
                    for (int64_t j = b.lo[1]; j <= b.hi[1]; ++j)
                        for (int64_t i = b.lo[0]; i <= b.hi[0]; ++i, ++n) {
                            if (std::isnan(back[n])) continue;  // covered by the finer level
                            ++cells;
                            if (std::fabs(back[n] - fab(i, j, k, c)) > bound) ++failures;
                        }
            }
        }
    }
    amrzip_reader_close(r);
    std::printf("%s/%s: %zu stored cells of %d fields read back, %d outside the bound\n", store, name, cells, kComps, failures);
    return failures == 0 && cells > 0 ? 0 : 1;
}
