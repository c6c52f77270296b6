/* The headroom and fgd policies' pass over many nodes, compiled when the package is built.

Why C: a new pod shape is scored by placing it, unit by unit, on every candidate node's
GPUs and measuring F (fragmentation.py) after each trial, then S (stranding.py) and the
tie term. In NumPy that was dozens of whole-array calls per request plus more for the
trials, which kept a new shape's filter at twice the latency floor (docs/BENCHMARKS.md).
Here it is one pass, a node at a time.
Compiled ahead of time by pip, not on the request path: nothing to build at start-up, no
cache directory (issue 28).

A pass that places the pod on many nodes is shared with a helper thread on a second
CPU (pass.h, helper.h): each row is computed by one thread as it would be alone, so the
answers are the same. On nodes of 4 or 8 GPUs the trial placements run in AVX2 lanes
where the CPU has them (lanes.h): the same operations per slot, so the same bits as
`evaluate_n` (node.h).

Three more things a new shape's filter needs over every node live here for the same
reason: nodes in a state already placed get its answer copied (pass.h, "equal nodes"),
the blend of the scores with the price term, with the best node found in the same pass
(`blend` below, framework.blend's formula), and which candidates have a fresh report,
with their prices (`fresh` below, columns.NodeColumns.read).

The definitions are written in full in fragmentation.py and stranding.py; this module runs
them. Arithmetic is in the order of the plain-Python oracle (tests/fragmentation_reference
.py), which the tests compare bit for bit: MiB are whole numbers in doubles (their sums are
exact), shares are applied in mix order, one multiply and one add per shape, and the build
turns off FMA contraction (-ffp-contract=off).

This file holds what Python calls (kernel.pyi); the rest is in the headers it includes,
one idea each, compiled as one unit:
  args.h   the arrays borrowed from Python and what they describe (the batch, the mix)
  node.h   one node: its slots, F before and after each trial, the placement, S
  lanes.h  node.h's trials in AVX2 lanes
  pass.h   the pass over many nodes: equal nodes copied, rows taken in chunks
  helper.h the pass's second thread */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "node.h"
#include "pass.h"

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
