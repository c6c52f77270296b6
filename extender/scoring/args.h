/* The arguments of kernel.c's entry points and what they describe: the node columns
(batch.GpuBatch), the workload mix, the mix's mean pod, the rows to read. Included by
kernel.c only, after Python.h.

Arrays come in through the buffer protocol (NumPy arrays, C-contiguous), so building needs
no NumPy headers; each is checked for its item size and count and named in the error, and
released with the call's other arrays (`release`). [slot, node] arrays are slot-major:
element (j, n) at j * nodes + n. */

#define WHOLE (-1)     /* a whole-GPU ask or shape (batch.WHOLE) */
#define MAX_SLOTS 64   /* plain GPUs per node the kernel takes */
#define ON_DEMAND_ONLY 1
#define SPOT_ONLY 2

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
