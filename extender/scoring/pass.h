/* kernel.c's `scores` pass over many nodes: nodes in a state already placed get its answer
copied ("equal nodes"), and the rows are taken in chunks, by the caller alone or, for a
pass placing the pod on many nodes, shared with the helper thread (helper.h). Included by
kernel.c only, after node.h. */

#include "helper.h"

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
