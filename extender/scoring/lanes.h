/* node.h's `evaluate` for nodes of 4 or 8 GPUs, their slots side by side in the four
   lanes of 256-bit vectors (AVX2), included by node.h after `Node` (and args.h's `Mix`).

Why: the trial evaluation is half of a new pod shape's pass over the nodes (the pass is
most of that filter's cost on a fleet where every node differs, issue 28), and per shape
it does the same few operations for every slot. GCC does not vectorise the scalar loop
(an AVX2 build of it ran as fast as the baseline); written in lanes, the pass ran
1.3-1.5x faster (docs/BENCHMARKS.md, "AVX2 lanes for the trial placements").

Same bits as the scalar loop, which stays the definition (and runs on CPUs without AVX2,
where these lanes, emulated with SSE2, were three times slower): every lane computes its
own slot's values with the scalar loop's operations in its order (a vector add is four
IEEE adds), and the sums across slots (how many slots host a shape, the MiB they hold)
stay scalar, in slot order. No fused multiply-adds: AVX2 alone does not allow them, and
the build turns contraction off. */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_LANES 1

typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4i __attribute__((vector_size(32)));
/* A comparison's mask is a vector of long (GCC) or long long (Clang): cast to v4i, so
   neither compiler relies on lax vector conversions. */

/* Whether `evaluate` uses the lanes: set at import where the CPU has AVX2 (lanes()). */
static int lanes_on;

static int cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
}

/* evaluate_n(nd, mix, total, room0, f0, f, 4 * groups) with f given, groups of 4 slots. */
static inline __attribute__((always_inline, target("avx2"))) void
lanes_n(const Node *nd, const Mix *mix, double total, const int *room0, double *f0, double *f,
        const int groups) {
    const v4d zero = {0.0, 0.0, 0.0, 0.0};
    const v4i none = {0, 0, 0, 0};
    v4d free[2], left[2], after[2], fv[2];
    v4i present[2], idle[2]; /* masks: -1 where set */
    for (int q = 0; q < groups; q++) {
        const int j = 4 * q;
        free[q] = (v4d){nd->free[j], nd->free[j + 1], nd->free[j + 2], nd->free[j + 3]};
        v4d unit = {nd->unit[j], nd->unit[j + 1], nd->unit[j + 2], nd->unit[j + 3]};
        present[q] = -(v4i){nd->present[j], nd->present[j + 1], nd->present[j + 2],
                            nd->present[j + 3]};
        idle[q] = -(v4i){nd->idle[j], nd->idle[j + 1], nd->idle[j + 2], nd->idle[j + 3]};
        v4d l = free[q] - unit;
        left[q] = (v4d)((v4i)l & (v4i)(l > zero)); /* l > 0.0 ? l : 0.0 */
        after[q] = (total - free[q]) + left[q];
        fv[q] = zero;
    }
    double acc = 0.0;
    for (Py_ssize_t m = 0; m < mix->shapes; m++) {
        double mem = mix->mems[m], w = nd->w[m], hosted = 0.0;
        int64_t need = mix->counts[m], hosting = 0;
        v4i h[2];
        v4d held[2];
        for (int q = 0; q < groups; q++) {
            h[q] = present[q] & (mem == WHOLE ? idle[q] : (v4i)(free[q] >= mem));
            held[q] = (v4d)((v4i)free[q] & h[q]);
            hosting -= h[q][0] + h[q][1] + h[q][2] + h[q][3];
        }
        for (int q = 0; q < groups; q++) /* in slot order */
            for (int k = 0; k < 4; k++) hosted += held[q][k];
        acc = acc + w * (room0[m] && hosting >= need ? total - hosted : total);
        int room = nd->room_after[m];
        for (int q = 0; q < groups; q++) {
            v4i gained = mem == WHOLE ? none : (v4i)(left[q] >= mem); /* whole GPU: never */
            v4i fits = room ? (v4i)((hosting + h[q] - gained) >= need) : none;
            v4d kept = (hosted - held[q]) + (v4d)((v4i)left[q] & gained);
            fv[q] = fv[q] + w * (after[q] - (v4d)((v4i)kept & fits));
        }
    }
    for (int q = 0; q < groups; q++)
        for (int k = 0; k < 4; k++) f[4 * q + k] = fv[q][k];
    *f0 = acc;
}

__attribute__((target("avx2"))) static void lanes4(const Node *nd, const Mix *mix, double total,
                                                   const int *room0, double *f0, double *f) {
    lanes_n(nd, mix, total, room0, f0, f, 1);
}

__attribute__((target("avx2"))) static void lanes8(const Node *nd, const Mix *mix, double total,
                                                   const int *room0, double *f0, double *f) {
    lanes_n(nd, mix, total, room0, f0, f, 2);
}

#else
#define HAVE_LANES 0
static int lanes_on;
static int cpu_has_avx2(void) { return 0; }
#endif
