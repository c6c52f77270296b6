/* One node, as kernel.c's passes see it: its slots (free, idle, which can hold a unit), F
before and after each trial placement (fragmentation.py; for 4- and 8-GPU nodes in AVX2
lanes, lanes.h), the greedy placement unit by unit, and S before and after
(stranding.py). Included by kernel.c only, after args.h. */

/* One node's slots as the placement sees them (free = max(headroom, 0), what one unit
   takes, which slots can hold one) and, per shape, its weight on this node and whether
   the node has the host room for one more pod of it, before and after the pod. */
typedef struct {
    Py_ssize_t slots;
    double free[MAX_SLOTS], unit[MAX_SLOTS];
    int64_t headroom[MAX_SLOTS];
    int present[MAX_SLOTS], idle[MAX_SLOTS], cand[MAX_SLOTS];
    double *w;
    int *room_before, *room_after;
} Node;

/* The per-shape arrays of `nd` for `shapes` shapes, in one block of whole cache lines
   (two threads' blocks never share one, helper.h); NULL: no memory. Freed with free(). */
static void *scratch(Node *nd, Py_ssize_t shapes) {
    size_t s = (size_t)(shapes > 0 ? shapes : 1);
    size_t size = (s * (sizeof(double) + 2 * sizeof(int)) + 63) / 64 * 64;
    char *p = aligned_alloc(64, size);
    if (!p) {
        PyErr_NoMemory();
        return NULL;
    }
    memset(p, 0, size);
    nd->w = (double *)p;
    nd->room_before = (int *)(p + s * sizeof(double));
    nd->room_after = nd->room_before + s;
    return p;
}

/* free, idle, the unit and whether a slot can hold one (`ask`: MiB or WHOLE; margin and
   idle threshold: scoring.Limits). Returns how many slots can. */
static int64_t load(Node *nd, const Batch *b, Py_ssize_t at, int64_t ask, int64_t margin,
                    int64_t idle_mib) {
    int64_t can = 0;
    nd->slots = b->slots;
    for (Py_ssize_t j = 0; j < b->slots; j++) {
        Py_ssize_t k = j * b->nodes + at;
        int64_t total = b->total[k], committed = b->committed[k];
        int present = b->present[k] != 0;
        int64_t headroom = total - committed - margin;
        nd->headroom[j] = headroom;
        nd->present[j] = present;
        nd->free[j] = present && headroom > 0 ? (double)headroom : 0.0;
        nd->idle[j] = present && b->reserved[k] == 0 && committed <= idle_mib;
        nd->unit[j] = ask == WHOLE ? (double)total : (double)ask;
        nd->cand[j] = ask == WHOLE ? nd->idle[j] : present && headroom >= ask;
        can += nd->cand[j];
    }
    return can;
}

/* Per shape: host room before and after the pod's CPU and memory, and the weight. */
static void rooms(Node *nd, const Batch *b, const Mix *mix, Py_ssize_t at, Py_ssize_t row,
                  int64_t cpu, int64_t mem) {
    int64_t c = b->cpu_free[at], h = b->mem_free[at];
    for (Py_ssize_t m = 0; m < mix->shapes; m++) {
        nd->room_before[m] = c >= mix->cpus[m] && h >= mix->host_mibs[m];
        nd->room_after[m] = c - cpu >= mix->cpus[m] && h - mem >= mix->host_mibs[m];
        nd->w[m] = mix->weights[m * mix->wcols + (mix->wcols == 1 ? 0 : row)];
    }
}

#include "lanes.h" /* evaluate in AVX2 lanes for 4- and 8-GPU nodes */

/* F of the node as it is (into *f0, host room `room0`) and, unless `f` is NULL, F if slot
   j alone took one unit, for every slot j (into f[j], host room after the pod).
   Per shape m, in mix order: the slots that can host one unit of m and their free MiB;
   F's term is the free MiB none of them can use for m, or all of it when the node cannot
   run one more pod of m. In slot j's trial, j becomes busy: it stops hosting what it
   hosted and hosts what its leftover still can (a busy GPU never hosts a whole one).
   Every F adds the shapes' weighted terms in mix order; the slots' sums are independent
   of each other, so they run side by side. */
static inline __attribute__((always_inline)) void evaluate_n(const Node *nd, const Mix *mix,
                                                              double total, const int *room0,
                                                              double *f0, double *f,
                                                              const Py_ssize_t g) {
    double left[MAX_SLOTS], after[MAX_SLOTS], held[MAX_SLOTS];
    int hosts[MAX_SLOTS];
    for (Py_ssize_t j = 0; j < g; j++) {
        double l = nd->free[j] - nd->unit[j];
        left[j] = l > 0.0 ? l : 0.0;
        after[j] = total - nd->free[j] + left[j];
        if (f) f[j] = 0.0;
    }
    double acc = 0.0;
    for (Py_ssize_t m = 0; m < mix->shapes; m++) {
        double mem = mix->mems[m], w = nd->w[m], hosted = 0.0;
        int64_t need = mix->counts[m], hosting = 0;
        for (Py_ssize_t j = 0; j < g; j++) {
            int h = nd->present[j] & (mem == WHOLE ? nd->idle[j] : nd->free[j] >= mem);
            hosts[j] = h;
            held[j] = h ? nd->free[j] : 0.0; /* free x h, bit for bit: free is never below +0.0 */
            hosting += h;
            hosted += held[j];
        }
        acc = acc + w * (room0[m] && hosting >= need ? total - hosted : total);
        if (!f) continue;
        /* branch-free: what the slot still hosts (all of it >= 0) is taken off `after`
           only where the node can still run a pod of m; x - 0.0 is x, bit for bit */
        int64_t room = nd->room_after[m];
        double bound = mem == WHOLE ? INFINITY : mem;
        for (Py_ssize_t j = 0; j < g; j++) {
            int64_t gained = left[j] >= bound;
            int64_t fits = room & (hosting - hosts[j] + gained >= need);
            double kept = hosted - held[j] + (gained ? left[j] : 0.0);
            f[j] = f[j] + w * (after[j] - (fits ? kept : 0.0));
        }
    }
    *f0 = acc;
}

/* ``evaluate_n`` made for the common slot counts, whose loops the compiler then unrolls;
   with the trials wanted and AVX2 there, in lanes (lanes.h). */
static void evaluate(const Node *nd, const Mix *mix, double total, const int *room0, double *f0,
                     double *f) {
#if HAVE_LANES
    if (f && __atomic_load_n(&lanes_on, __ATOMIC_RELAXED) && (nd->slots == 4 || nd->slots == 8)) {
        (nd->slots == 4 ? lanes4 : lanes8)(nd, mix, total, room0, f0, f);
        return;
    }
#endif
    switch (nd->slots) {
    case 4:
        evaluate_n(nd, mix, total, room0, f0, f, 4);
        break;
    case 8:
        evaluate_n(nd, mix, total, room0, f0, f, 8);
        break;
    default:
        evaluate_n(nd, mix, total, room0, f0, f, nd->slots);
    }
}

static double total_free(const Node *nd) {
    double total = 0.0;
    for (Py_ssize_t j = 0; j < nd->slots; j++) total += nd->free[j];
    return total;
}

/* `count` units one after another, each on the candidate slot whose trial gives the least
   F (ties to the least headroom when `by_free`, then to the lowest slot): F before, F after
   the last unit, the slots into picks[k * stride]. */
static void place(Node *nd, const Mix *mix, int64_t count, int by_free, double *before,
                  double *after, int64_t *picks, Py_ssize_t stride) {
    double total = total_free(nd), f[MAX_SLOTS], f0;
    *before = *after = 0.0;
    for (int64_t k = 0; k < count; k++) {
        evaluate(nd, mix, total, nd->room_before, &f0, f);
        if (k == 0) *before = f0;
        double best = INFINITY;
        Py_ssize_t pick = -1;
        int64_t least = 0; /* the picked slot's headroom, read when F ties the best */
        for (Py_ssize_t j = 0; j < nd->slots; j++) {
            if (!nd->cand[j]) continue;
            if (f[j] < best || (by_free && f[j] == best && nd->headroom[j] < least)) {
                best = f[j];
                pick = j;
                least = nd->headroom[j];
            }
        }
        picks[k * stride] = pick;
        *after = best;
        if (pick < 0) return; /* no candidate left: the caller checked there is */
        double was = nd->free[pick];
        double left = was - nd->unit[pick] > 0.0 ? was - nd->unit[pick] : 0.0;
        total = total + left - was;
        nd->free[pick] = left;
        nd->idle[pick] = 0;
        nd->cand[pick] = 0;
    }
}

/* S (stranding.py) of a node with `gpu` free GPU MiB, `g` asked per mean pod. */
static double stranded(const PerPod *p, double g, double gpu, int64_t cpu_alloc,
                       int64_t cpu_left, int64_t mem_alloc, int64_t mem_left) {
    double reach = INFINITY;
    if (p->cpu > 0 && cpu_alloc > 0) {
        double served = ((double)(cpu_left > 0 ? cpu_left : 0) * g) / p->cpu;
        reach = served < reach ? served : reach;
    }
    if (p->host > 0 && mem_alloc > 0) {
        double served = ((double)(mem_left > 0 ? mem_left : 0) * g) / p->host;
        reach = served < reach ? served : reach;
    }
    return gpu - reach > 0.0 ? gpu - reach : 0.0;
}

/* The mean pod's GPU MiB on a node whose largest GPU has `gmax` MiB (a whole GPU counts
   as one of those): the same for every node of a size, and a fleet has a few sizes, so
   the last one is kept and computed again only when the size changes. */
static double per_pod_gpu(PerPod *p, double gmax) {
    if (gmax != p->gmax) {
        double g = 0.0;
        for (Py_ssize_t k = 0; k < p->asks; k++) {
            double mib = (double)p->mibs[k];
            double unit = p->mibs[k] == WHOLE ? gmax : (mib < gmax ? mib : gmax);
            g = g + p->shares[k] * ((double)p->counts[k] * unit);
        }
        p->gmax = gmax;
        p->g = g;
    }
    return p->g;
}

/* (S after - S before) / GiB of node `at` once the pod takes cpu, mem and `added` GPU MiB. */
static double stranding_delta(const Batch *b, PerPod *p, Py_ssize_t at, int64_t cpu,
                              int64_t mem, double added) {
    if (p->asks == 0) return 0.0;
    int64_t largest = 0;
    for (Py_ssize_t j = 0; j < b->slots; j++) {
        int64_t total = b->total[j * b->nodes + at];
        largest = total > largest ? total : largest;
    }
    double g = per_pod_gpu(p, (double)largest);
    int64_t free = b->node_total[at] - b->node_committed[at];
    double gpu = free > 0 ? (double)free : 0.0;
    int64_t c = b->cpu_free[at], h = b->mem_free[at];
    double before = stranded(p, g, gpu, b->cpu_alloc[at], c, b->mem_alloc[at], h);
    double left = gpu - added > 0.0 ? gpu - added : 0.0;
    double after = stranded(p, g, left, b->cpu_alloc[at], c - cpu, b->mem_alloc[at], h - mem);
    return (after - before) / 1024;
}

static double ratio(int64_t part, int64_t whole) {
    return whole > 0 ? (double)part / (double)whole : 0.0;
}
