/* The headroom and fgd policies' pass over many nodes, compiled when the package is built.

Why C: a new pod shape is scored by placing it, unit by unit, on every candidate node's
GPUs and measuring F (fragmentation.py) after each trial, then S (stranding.py) and the
tie term. In NumPy that was dozens of whole-array calls per request plus more for the
trials, which kept a new shape's filter at twice the latency floor (docs/BENCHMARKS.md).
Here it is one pass, a node at a time.
Compiled ahead of time by pip, not on the request path: nothing to build at start-up, no
cache directory (issue 28).

A pass that places the pod on many nodes is shared with a helper thread on a second
CPU (helper.h, "the pass" below): each row is computed by one thread as it would be
alone, so the answers are the same. On nodes of 4 or 8 GPUs the trial placements run in
AVX2 lanes where the CPU has them (lanes.h): the same operations per slot, so the same
bits as `evaluate_n` below.

Three more things a new shape's filter needs over every node live here for the same
reason: nodes in a state already placed get its answer copied ("equal nodes" below), the
blend of the scores with the price term, with the best node found in the same pass
(`blend`, framework.blend's formula), and which candidates have a fresh report, with
their prices (`fresh`, columns.NodeColumns.read).

The definitions are written in full in fragmentation.py and stranding.py; this file runs
them. Arithmetic is in the order of the plain-Python oracle (tests/fragmentation_reference
.py), which the tests compare bit for bit: MiB are whole numbers in doubles (their sums are
exact), shares are applied in mix order, one multiply and one add per shape, and the build
turns off FMA contraction (-ffp-contract=off).

Arrays come in through the buffer protocol (NumPy arrays, C-contiguous), so building needs
no NumPy headers. [slot, node] arrays are slot-major: element (j, n) at j * nodes + n. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "helper.h"

#define WHOLE (-1)     /* a whole-GPU ask or shape (batch.WHOLE) */
#define MAX_SLOTS 64   /* plain GPUs per node the kernel takes */
#define ON_DEMAND_ONLY 1
#define SPOT_ONLY 2

/* ---------------------------------------------------------------- arguments */

typedef struct {
    Py_buffer view;
    int held;
} Arg;

typedef struct {
    Arg args[32];
    int used;
} Args;

/* Borrow one array: C-contiguous, `size` bytes per item, `count` items. */
static void *borrow(Args *a, PyObject *obj, const char *name, Py_ssize_t size,
                    Py_ssize_t count, int writable) {
    Arg *arg = &a->args[a->used];
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &arg->view, flags) < 0) {
        PyErr_Format(PyExc_ValueError, "%s: not a contiguous%s array", name,
                     writable ? " writable" : "");
        return NULL;
    }
    arg->held = 1;
    a->used++;
    if (arg->view.itemsize != size || arg->view.len != size * count) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes, got %zd bytes",
                     name, count, size, arg->view.len);
        return NULL;
    }
    return arg->view.buf ? arg->view.buf : (void *)arg; /* empty arrays: any non-NULL */
}

static void release(Args *a) {
    for (int k = 0; k < a->used; k++) PyBuffer_Release(&a->args[k].view);
    a->used = 0;
}

/* The node columns (batch.GpuBatch), [slot, node] and [node]. */
typedef struct {
    Py_ssize_t slots, nodes;
    const int64_t *total, *committed, *reserved;
    const char *present;
    const int64_t *node_total, *node_committed;
    const char *spot;
    const int64_t *cpu_alloc, *cpu_free, *mem_alloc, *mem_free;
} Batch;

static int batch_args(Args *a, PyObject *t, Py_ssize_t g, Py_ssize_t n, Batch *b) {
    PyObject *o[11];
    if (!PyArg_ParseTuple(t, "OOOOOOOOOOO;batch: 11 arrays", &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &o[7], &o[8], &o[9], &o[10]))
        return -1;
    b->slots = g;
    b->nodes = n;
    return (b->total = borrow(a, o[0], "total", 8, g * n, 0)) &&
                   (b->committed = borrow(a, o[1], "committed", 8, g * n, 0)) &&
                   (b->reserved = borrow(a, o[2], "reserved", 8, g * n, 0)) &&
                   (b->present = borrow(a, o[3], "present", 1, g * n, 0)) &&
                   (b->node_total = borrow(a, o[4], "node_total", 8, n, 0)) &&
                   (b->node_committed = borrow(a, o[5], "node_committed", 8, n, 0)) &&
                   (b->spot = borrow(a, o[6], "spot", 1, n, 0)) &&
                   (b->cpu_alloc = borrow(a, o[7], "cpu_alloc", 8, n, 0)) &&
                   (b->cpu_free = borrow(a, o[8], "cpu_free", 8, n, 0)) &&
                   (b->mem_alloc = borrow(a, o[9], "mem_alloc", 8, n, 0)) &&
                   (b->mem_free = borrow(a, o[10], "mem_free", 8, n, 0))
               ? 0
               : -1;
}

/* The mix's plain shapes (fragmentation._Plain) and their weights: [shape, 1] (one weight
   for every node) or [shape, row]. */
typedef struct {
    Py_ssize_t shapes, wcols;
    const int64_t *counts, *cpus, *host_mibs;
    const double *mems, *weights;
} Mix;

static int mix_args(Args *a, PyObject *t, Py_ssize_t rows, Mix *m) {
    PyObject *o[5];
    if (!PyArg_ParseTuple(t, "nnOOOOO;mix: shapes, weight columns, 5 arrays", &m->shapes,
                          &m->wcols, &o[0], &o[1], &o[2], &o[3], &o[4]))
        return -1;
    if (m->shapes < 0 || (m->wcols != 1 && m->wcols != rows)) {
        PyErr_Format(PyExc_ValueError, "mix: %zd shapes, %zd weight columns for %zd rows",
                     m->shapes, m->wcols, rows);
        return -1;
    }
    Py_ssize_t s = m->shapes;
    return (m->counts = borrow(a, o[0], "counts", 8, s, 0)) &&
                   (m->mems = borrow(a, o[1], "mems", 8, s, 0)) &&
                   (m->cpus = borrow(a, o[2], "cpus", 8, s, 0)) &&
                   (m->host_mibs = borrow(a, o[3], "host_mibs", 8, s, 0)) &&
                   (m->weights = borrow(a, o[4], "weights", 8, s * m->wcols, 0))
               ? 0
               : -1;
}

/* The mix's mean pod (stranding.per_pod_args). */
typedef struct {
    Py_ssize_t asks;
    const double *shares;
    const int64_t *counts, *mibs;
    double cpu, host;
    double gmax, g; /* the last node size seen and the mean pod's GPU MiB there */
} PerPod;

static int pod_args(Args *a, PyObject *t, PerPod *p) {
    PyObject *o[3];
    if (!PyArg_ParseTuple(t, "nOOOdd;per pod: asks, 3 arrays, cpu, host", &p->asks, &o[0],
                          &o[1], &o[2], &p->cpu, &p->host))
        return -1;
    if (p->asks < 0) {
        PyErr_SetString(PyExc_ValueError, "per pod: negative asks");
        return -1;
    }
    p->gmax = -1.0; /* no node's largest GPU: nothing kept yet */
    return (p->shares = borrow(a, o[0], "shares", 8, p->asks, 0)) &&
                   (p->counts = borrow(a, o[1], "ask counts", 8, p->asks, 0)) &&
                   (p->mibs = borrow(a, o[2], "ask mibs", 8, p->asks, 0))
               ? 0
               : -1;
}

static int check_sizes(Py_ssize_t g, Py_ssize_t n) {
    if (g < 0 || g > MAX_SLOTS || n < 0) {
        PyErr_Format(PyExc_ValueError, "%zd slots (at most %d), %zd nodes", g, MAX_SLOTS, n);
        return -1;
    }
    return 0;
}

/* The rows to read: 8-byte integers, each a node of the batch (or -1, a node that never
   fits, where `unavailable` allows it); their count into *count. */
static const int64_t *rows_arg(Args *a, PyObject *obj, Py_ssize_t nodes, int unavailable,
                               Py_ssize_t *count) {
    Arg *arg = &a->args[a->used];
    if (PyObject_GetBuffer(obj, &arg->view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    arg->held = 1;
    a->used++;
    if (arg->view.itemsize != 8) {
        PyErr_Format(PyExc_ValueError, "rows: %zd-byte items, 8 wanted", arg->view.itemsize);
        return NULL;
    }
    const int64_t *rows = arg->view.buf;
    *count = arg->view.len / 8;
    for (Py_ssize_t i = 0; i < *count; i++) {
        if (rows[i] >= nodes || rows[i] < (unavailable ? -1 : 0)) {
            PyErr_Format(PyExc_IndexError, "rows: %lld is not one of %zd nodes",
                         (long long)rows[i], nodes);
            return NULL;
        }
    }
    return rows ? rows : (const int64_t *)arg; /* empty: any non-NULL */
}

/* ---------------------------------------------------------------- one node */

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

/* ---------------------------------------------------------------- equal nodes */

/* Nodes in the same state get the same answer. A fleet holds many: every empty node of
   an instance type, every full one, nodes running the same replicas. Each row comes with
   the id of its state (batch.GpuBatch.state: equal ids for rows equal in everything this
   pass reads of them, kept by the columns as reports are written, rowstates.py), and the
   pass copies the answer of the first node in that state instead of placing the pod
   again, so a new shape costs one placement per state, not per node. The answers are the
   same bits either way: the placement is a function of those inputs alone (candidates
   given per row turn the copying off).
   Why ids and not a hash of the row per request: the hash read every slot and column of
   every row, most of the pass on a fleet of a few states; an id is one read. */

/* The state ids of the rows the pass places: each checked to be in [0, nodes), so that
   `first` (one entry per possible id) is never read out of bounds. `distinct` (NULL: not
   wanted) gets how many different states they are in: the placements the pass makes. */
static const int64_t *states_arg(Args *a, PyObject *obj, Py_ssize_t nodes, const int64_t *rows,
                                 Py_ssize_t count, Py_ssize_t *distinct) {
    const int64_t *ids = borrow(a, obj, "states", 8, nodes, 0);
    if (!ids) return NULL;
    char *seen = NULL; /* per state id: met among the rows */
    if (distinct && !(seen = PyMem_Calloc((size_t)nodes + 1, 1))) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (rows[i] < 0) continue;
        int64_t s = ids[rows[i]];
        if (s < 0 || s >= nodes) {
            PyErr_Format(PyExc_ValueError, "states: row %lld has state %lld, not one of 0..%zd",
                         (long long)rows[i], (long long)s, nodes - 1);
            PyMem_Free(seen);
            return NULL;
        }
        if (seen && !seen[s]) {
            seen[s] = 1;
            (*distinct)++;
        }
    }
    PyMem_Free(seen);
    return ids;
}

/* ---------------------------------------------------------------- the pass */

/* A pass placing the pod on fewer nodes runs on the caller alone: below it the helper's
   wake-up (30-100 us) ate most of what it saved (bench/kernelpass.py: 1.1x at 1,100 distinct
   nodes back to back, 0.9-1.4x with the other CPU idle in between; 1.2-1.5x and 1.0-1.2x at
   2,000). Counted in placements, not rows: a row in a state already placed is a copy (a few
   ns), so 5,000 rows in a few dozen states are a short pass (sharing one cost 50 us more than
   it saved: docs/BENCHMARKS.md, "A pass shared by its placements"). */
#define SHARE_PLACEMENTS 2048
#define CHUNK 128       /* rows taken at a time (helper.h) */

/* One `scores` pass: its inputs, read-only while it runs, its outputs (each row written
   by the thread that took it), and the counter the threads take rows from. */
typedef struct {
    Batch b;
    Mix mix;
    Py_ssize_t r, n;
    int64_t count, ask, rule, cpu, mem, margin, idle_mib;
    int by_free;
    double tie, strand_w;
    const int64_t *rows, *states;
    const char *cand;
    char *fits;
    double *raw;
    int64_t *picks;
    /* chunks not taken yet: (first << 32) | one past the last; a cache line of its own */
    uint64_t ends __attribute__((aligned(64)));
} Pass;

/* What each thread keeps of its own: the node's scratch, the mean pod (its size cache
   is written as nodes are read) and the rows it placed per state id. */
typedef struct {
    Node node;
    void *block;
    PerPod pod;
    Py_ssize_t *first; /* per state id: the row placed for it, -1 none yet; NULL: no ids */
} __attribute__((aligned(64))) Worker; /* no cache line written by both threads */

/* Row i of the pass: copied from a row of the same state this thread placed, or placed. */
static void score_row(const Pass *p, Worker *w, Py_ssize_t i) {
    const Batch *b = &p->b;
    Node *nd = &w->node;
    Py_ssize_t at = p->rows[i], r = p->r;
    int64_t count = p->count, ask = p->ask;
    p->fits[i] = 0;
    p->raw[i] = 0.0;
    for (int64_t k = 0; k < count; k++) p->picks[k * r + i] = -1;
    if (at < 0) return;
    if (w->first) {
        Py_ssize_t same = w->first[p->states[at]];
        if (same >= 0) {
            p->fits[i] = p->fits[same];
            p->raw[i] = p->raw[same];
            for (int64_t k = 0; k < count; k++) p->picks[k * r + i] = p->picks[k * r + same];
            return;
        }
        w->first[p->states[at]] = i;
    }
    if (!p->cand && ((p->rule == ON_DEMAND_ONLY && b->spot[at]) ||
                     (p->rule == SPOT_ONLY && !b->spot[at]) || b->cpu_free[at] < p->cpu ||
                     b->mem_free[at] < p->mem))
        return; /* given candidates are the caller's choice: fit was checked there */
    int64_t can = load(nd, b, at, ask, p->margin, p->idle_mib);
    if (p->cand) {
        can = 0;
        for (Py_ssize_t j = 0; j < b->slots; j++) can += nd->cand[j] = p->cand[j * r + i] != 0;
    }
    if (can < count) return;
    p->fits[i] = 1;
    rooms(nd, b, &p->mix, at, i, p->cpu, p->mem);
    double before, after;
    place(nd, &p->mix, count, p->by_free, &before, &after, &p->picks[i], r);
    /* what the pod commits over its slots, and the chosen GPUs' fill after */
    int64_t added = 0, chosen = 0, used = 0;
    for (int64_t k = 0; k < count; k++) {
        Py_ssize_t s = p->picks[k * r + i] * b->nodes + at;
        int64_t tk = b->total[s], unit = ask == WHOLE ? tk : ask;
        int64_t c = b->committed[s] + unit;
        added += unit;
        chosen += tk;
        used += tk < c ? tk : c;
    }
    double fill = 0.0, strand = 0.0;
    if (p->tie != 0.0) {
        double node = ratio(b->node_committed[at] + added, b->node_total[at]);
        fill = 0.5 * ratio(used, chosen) + 0.5 * (node < 1.0 ? node : 1.0);
    }
    if (p->strand_w != 0.0)
        strand = stranding_delta(b, &w->pod, at, p->cpu, p->mem, (double)added);
    p->raw[i] = -((after - before) / 1024) - p->strand_w * strand + p->tie * fill;
}

typedef struct {
    Pass *pass;
    Worker workers[2];
} Shared;

/* The next chunk, from the front or from the back; -1 when the two ends have met.
   `ends` packs (front << 32) | back. */
static Py_ssize_t next_chunk(Pass *p, int from_back) {
    uint64_t ends = __atomic_load_n(&p->ends, __ATOMIC_RELAXED), taken;
    do {
        uint64_t front = ends >> 32, back = ends & 0xffffffffu;
        if (front >= back) return -1;
        taken = from_back ? back - 1 : front;
        uint64_t want = from_back ? (front << 32) | (back - 1) : ((front + 1) << 32) | back;
        if (__atomic_compare_exchange_n(&p->ends, &ends, want, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            return (Py_ssize_t)taken;
    } while (1);
}

static Py_ssize_t helped_rows; /* rows the helper scored, until helped() reads them */

/* run_shared's job: chunks of rows until none are left. A thread on an even CPU takes
   them from the front, one on an odd CPU from the back, so each CPU reads about the
   same rows from one pass to the next and finds them in its own cache (the columns of
   5,000 nodes are about 1 MB; read from the other core's, the pass took twice as long).
   Two threads on CPUs of one parity both take from the front: slower, the same bits. */
static void score_chunks(void *arg, int who) {
    Shared *sh = arg;
    Pass *p = sh->pass;
    int from_back = sched_getcpu() % 2 == 1; /* -1, unknown: the front */
    for (Py_ssize_t c; (c = next_chunk(p, from_back)) >= 0;) {
        Py_ssize_t lo = c * CHUNK, hi = lo + CHUNK < p->r ? lo + CHUNK : p->r;
        for (Py_ssize_t i = lo; i < hi; i++) score_row(p, &sh->workers[who], i);
        if (who) __atomic_fetch_add(&helped_rows, hi - lo, __ATOMIC_RELAXED);
    }
}

/* A worker's scratch and state table (n possible ids when `ids`); -1 and an error set
   when out of memory. Called with the interpreter lock. */
static int worker_init(Worker *w, const Pass *p, const PerPod *pod, int ids) {
    w->pod = *pod;
    if (!(w->block = scratch(&w->node, p->mix.shapes))) return -1;
    if (!ids) return 0;
    if (!(w->first = PyMem_Malloc((size_t)p->n * sizeof(Py_ssize_t)))) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t s = 0; s < p->n; s++) w->first[s] = -1;
    return 0;
}

/* ---------------------------------------------------------------- entry points */

PyDoc_STRVAR(scores_doc,
             "scores(slots, nodes, batch, rows, states, demand, limits, mix, per_pod, options,\n"
             "out)\n\n"
             "fragmentation.greedy_scores for every row of `rows` (-1: a node that never\n"
             "fits). states: None, or each node's state id (rowstates.py: a state is\n"
             "placed once); demand: (count, ask, rule, cpu, memory); limits: (margin, idle);\n"
             "options: (by_free, tie, stranding, cand or None: [slot, row] candidates the caller\n"
             "chose, capacity type and host fit not checked again); out: (fits, raw, picks).\n"
             "A pass placing the pod on many nodes is shared with a helper thread (share()).");

static PyObject *scores(PyObject *self, PyObject *args) {
    Py_ssize_t g;
    long long count, ask, rule, cpu, mem, margin, idle_mib;
    PyObject *bt, *rows_o, *states_o, *mt, *pt, *cand_o, *fits_o, *raw_o, *picks_o;
    (void)self;
    Pass p = {0};
    Py_ssize_t distinct = 0; /* states among the rows (states_arg) */
    if (!PyArg_ParseTuple(args, "nnOOO(LLLLL)(LL)OO(pddO)(OOO)", &g, &p.n, &bt, &rows_o,
                          &states_o, &count, &ask, &rule, &cpu, &mem, &margin, &idle_mib, &mt,
                          &pt, &p.by_free, &p.tie, &p.strand_w, &cand_o, &fits_o, &raw_o,
                          &picks_o))
        return NULL;
    p.count = count, p.ask = ask, p.rule = rule, p.cpu = cpu, p.mem = mem;
    p.margin = margin, p.idle_mib = idle_mib;
    Args a = {0};
    PerPod pod;
    Shared sh = {.pass = &p};
    PyObject *result = NULL;
    if (check_sizes(g, p.n) < 0 || count < 0 || batch_args(&a, bt, g, p.n, &p.b) < 0 ||
        !(p.rows = rows_arg(&a, rows_o, p.n, 1, &p.r)) || mix_args(&a, mt, p.r, &p.mix) < 0 ||
        pod_args(&a, pt, &pod) < 0 ||
        (states_o != Py_None &&
         !(p.states = states_arg(&a, states_o, p.n, p.rows, p.r,
                                 cand_o == Py_None && p.r > 1 ? &distinct : NULL))) ||
        (cand_o != Py_None && !(p.cand = borrow(&a, cand_o, "cand", 1, g * p.r, 0))) ||
        !(p.fits = borrow(&a, fits_o, "fits", 1, p.r, 1)) ||
        !(p.raw = borrow(&a, raw_o, "raw", 8, p.r, 1)) ||
        !(p.picks = borrow(&a, picks_o, "picks", 8, count * p.r, 1)))
        goto done;
    int ids = p.states && !p.cand && p.r > 1;
    int shared = (ids ? distinct : p.r) >= SHARE_PLACEMENTS; /* rows without state ids */
    p.ends = (uint64_t)((p.r + CHUNK - 1) / CHUNK);
    if (worker_init(&sh.workers[0], &p, &pod, ids) < 0 ||
        (shared && worker_init(&sh.workers[1], &p, &pod, ids) < 0))
        goto done;
    Py_BEGIN_ALLOW_THREADS;
    if (shared)
        run_shared(score_chunks, &sh);
    else
        score_chunks(&sh, 0);
    Py_END_ALLOW_THREADS;
    result = Py_NewRef(Py_None);
done:
    release(&a);
    for (int k = 0; k < 2; k++) {
        PyMem_Free(sh.workers[k].first);
        free(sh.workers[k].block);
    }
    return result;
}

PyDoc_STRVAR(helped_doc,
             "helped() -> int\n\n"
             "Rows the helper thread scored since the last call (tests: the shared pass ran).");

static PyObject *helped(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyLong_FromSsize_t(__atomic_exchange_n(&helped_rows, 0, __ATOMIC_RELAXED));
}

PyDoc_STRVAR(share_doc,
             "share(on) -> bool\n\n"
             "Whether long passes of scores() may use the helper thread (helper.h; on by\n"
             "default, started on first use or here); returns the previous setting.");

static PyObject *share(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    int was = __atomic_exchange_n(&helper.enabled, on, __ATOMIC_RELAXED);
    if (on && pthread_mutex_trylock(&helper.owner) == 0) { /* started now, not in a filter */
        helper_ready();
        pthread_mutex_unlock(&helper.owner);
    }
    return PyBool_FromLong(was);
}

PyDoc_STRVAR(helping_doc,
             "helping() -> bool\n\n"
             "Whether a helper thread runs in this process (none with one CPU or a CPU limit\n"
             "under two; started by share(True) or the first long pass).");

static PyObject *helping(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyBool_FromLong(helper_running());
}

PyDoc_STRVAR(lanes_doc,
             "lanes(on) -> bool\n\n"
             "Whether scores() places pods on 4- and 8-GPU nodes in AVX2 lanes (lanes.h; on\n"
             "where the CPU has AVX2): turned on only there. Returns whether they are used.");

static PyObject *lanes(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    int used = on && cpu_has_avx2();
    __atomic_store_n(&lanes_on, used, __ATOMIC_RELAXED);
    return PyBool_FromLong(used);
}

PyDoc_STRVAR(value_doc,
             "value(slots, nodes, batch, rows, pod, limits, mix, out)\n\n"
             "F of every row of `rows` into `out`, its host room counted as the pod (cpu,\n"
             "memory) leaves it.");

static PyObject *value(PyObject *self, PyObject *args) {
    Py_ssize_t g, n;
    long long cpu, mem, margin, idle_mib;
    PyObject *bt, *rows_o, *mt, *out_o;
    (void)self;
    if (!PyArg_ParseTuple(args, "nnOO(LL)(LL)OO", &g, &n, &bt, &rows_o, &cpu, &mem, &margin,
                          &idle_mib, &mt, &out_o))
        return NULL;
    Args a = {0};
    Batch b;
    Mix mix;
    PyObject *result = NULL;
    Node node, *nd = &node;
    void *block = NULL;
    Py_ssize_t r = 0;
    const int64_t *rows;
    double *out;
    if (check_sizes(g, n) < 0 || batch_args(&a, bt, g, n, &b) < 0 ||
        !(rows = rows_arg(&a, rows_o, n, 0, &r)) || mix_args(&a, mt, r, &mix) < 0 ||
        !(out = borrow(&a, out_o, "out", 8, r, 1)) ||
        !(block = scratch(nd, mix.shapes)))
        goto done;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < r; i++) {
        Py_ssize_t at = rows[i];
        load(nd, &b, at, WHOLE, margin, idle_mib);
        rooms(nd, &b, &mix, at, i, cpu, mem);
        evaluate(nd, &mix, total_free(nd), nd->room_after, &out[i], NULL);
    }
    Py_END_ALLOW_THREADS;
    result = Py_NewRef(Py_None);
done:
    release(&a);
    free(block);
    return result;
}

PyDoc_STRVAR(stranding_doc,
             "stranding(slots, nodes, batch, rows, pod, per_pod, added, out)\n\n"
             "stranding.stranding_delta of every row of `rows` into `out`: the pod takes\n"
             "(cpu, memory) and added[i] GPU MiB.");

static PyObject *stranding(PyObject *self, PyObject *args) {
    Py_ssize_t g, n;
    long long cpu, mem;
    PyObject *bt, *rows_o, *pt, *added_o, *out_o;
    (void)self;
    if (!PyArg_ParseTuple(args, "nnOO(LL)OOO", &g, &n, &bt, &rows_o, &cpu, &mem, &pt, &added_o,
                          &out_o))
        return NULL;
    Args a = {0};
    Batch b;
    PerPod pod;
    PyObject *result = NULL;
    Py_ssize_t r = 0;
    const int64_t *rows;
    const double *added;
    double *out;
    if (check_sizes(g, n) < 0 || batch_args(&a, bt, g, n, &b) < 0 ||
        !(rows = rows_arg(&a, rows_o, n, 0, &r)) || pod_args(&a, pt, &pod) < 0 ||
        !(added = borrow(&a, added_o, "added", 8, r, 0)) ||
        !(out = borrow(&a, out_o, "out", 8, r, 1)))
        goto done;
    for (Py_ssize_t i = 0; i < r; i++)
        out[i] = stranding_delta(&b, &pod, rows[i], cpu, mem, added[i]);
    result = Py_NewRef(Py_None);
done:
    release(&a);
    return result;
}

PyDoc_STRVAR(blend_doc,
             "blend(raw, fits, prices, w_policy, w_cost, out) -> int\n\n"
             "framework.blend into `out` (NaN where a node does not fit) and the position of\n"
             "the best blended score, the first of equals (-1 when none fits).");

/* framework.blend's arithmetic, operation for operation (its docstring has the formula),
   with the best node found in the same pass: in NumPy these were a dozen whole-array
   calls, a fifth of a new pod shape's filter at 5,000 nodes. */
static PyObject *blend(PyObject *self, PyObject *args) {
    PyObject *raw_o, *fits_o, *price_o, *out_o;
    double wp, wc;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOddO", &raw_o, &fits_o, &price_o, &wp, &wc, &out_o))
        return NULL;
    Py_ssize_t n = PyObject_Length(fits_o);
    if (n < 0) return NULL;
    Args a = {0};
    const double *raw, *price;
    const char *fits;
    double *out;
    PyObject *result = NULL;
    if (!(raw = borrow(&a, raw_o, "raw", 8, n, 0)) || !(fits = borrow(&a, fits_o, "fits", 1, n, 0)) ||
        !(price = borrow(&a, price_o, "prices", 8, n, 0)) ||
        !(out = borrow(&a, out_o, "out", 8, n, 1)))
        goto done;
    double lo = INFINITY, hi = -INFINITY, p_lo = INFINITY, p_hi = -INFINITY;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!fits[i]) continue;
        lo = raw[i] < lo ? raw[i] : lo;
        hi = raw[i] > hi ? raw[i] : hi;
        if (isnan(price[i])) continue;
        p_lo = price[i] < p_lo ? price[i] : p_lo;
        p_hi = price[i] > p_hi ? price[i] : p_hi;
    }
    Py_ssize_t best = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = NAN;
        if (!fits[i]) continue;
        double policy = hi > lo ? (raw[i] - lo) / (hi - lo) : 1.0;
        double known = p_hi > p_lo ? (p_hi - price[i]) / (p_hi - p_lo) : 1.0;
        double cost = isnan(price[i]) ? 0.5 : known;
        out[i] = (wp * policy + wc * cost) / (wp + wc);
        if (!isnan(out[i]) && (best < 0 || out[i] > out[best])) best = i;
    }
    result = PyLong_FromSsize_t(best);
done:
    release(&a);
    return result;
}

PyDoc_STRVAR(fresh_doc,
             "fresh(received, prices, rows, now, stale_after, out)\n\n"
             "columns.NodeColumns.read into out = (live, prices, received): per row of\n"
             "`rows` the row itself if the node's report is fresh (now - received <=\n"
             "stale_after; -1 for a row of -1 or NaN), its $/GiB-h and report time (NaN\n"
             "unless fresh).");

/* Which candidates are available, and their prices: NodeColumns.read's arithmetic in one
   loop. In NumPy it was eleven whole-array calls, a tenth of a new pod shape's filter on
   a fleet of few node states (docs/BENCHMARKS.md, "A pass shared by its placements"). */
static PyObject *fresh(PyObject *self, PyObject *args) {
    PyObject *rec_o, *price_o, *rows_o, *live_o, *price_out_o, *rec_out_o;
    double now, stale_after;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOdd(OOO)", &rec_o, &price_o, &rows_o, &now, &stale_after,
                          &live_o, &price_out_o, &rec_out_o))
        return NULL;
    Py_ssize_t n = PyObject_Length(rec_o), r = PyObject_Length(rows_o);
    if (n < 0 || r < 0) return NULL;
    Args a = {0};
    const double *rec, *price;
    const int64_t *rows;
    int64_t *live;
    double *price_out, *rec_out;
    PyObject *result = NULL;
    if (!(rec = borrow(&a, rec_o, "received", 8, n, 0)) ||
        !(price = borrow(&a, price_o, "prices", 8, n, 0)) ||
        !(rows = rows_arg(&a, rows_o, n, 1, &r)) || !(live = borrow(&a, live_o, "live", 8, r, 1)) ||
        !(price_out = borrow(&a, price_out_o, "prices out", 8, r, 1)) ||
        !(rec_out = borrow(&a, rec_out_o, "received out", 8, r, 1)))
        goto done;
    for (Py_ssize_t i = 0; i < r; i++) {
        int64_t row = rows[i];
        double t = row >= 0 ? rec[row] : NAN;
        int ok = now - t <= stale_after; /* NaN compares false: never reported, or gone */
        live[i] = ok ? row : -1;
        price_out[i] = ok ? price[row] : NAN;
        rec_out[i] = ok ? t : NAN;
    }
    result = Py_NewRef(Py_None);
done:
    release(&a);
    return result;
}

static PyMethodDef methods[] = {
    {"scores", scores, METH_VARARGS, scores_doc},
    {"value", value, METH_VARARGS, value_doc},
    {"stranding", stranding, METH_VARARGS, stranding_doc},
    {"blend", blend, METH_VARARGS, blend_doc},
    {"fresh", fresh, METH_VARARGS, fresh_doc},
    {"share", share, METH_O, share_doc},
    {"helped", helped, METH_NOARGS, helped_doc},
    {"helping", helping, METH_NOARGS, helping_doc},
    {"lanes", lanes, METH_O, lanes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "kernel",
    .m_doc = "The FGD policies' pass over many nodes, compiled (see kernel.c).", .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit_kernel(void) {
    __atomic_store_n(&lanes_on, cpu_has_avx2(), __ATOMIC_RELAXED);
    return PyModule_Create(&module);
}
