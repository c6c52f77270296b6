/* A candidate list as Go's encoder writes it (["a","b"]), read in one pass, compiled by pip.

Why C: kube-scheduler sends up to 5,000 names per filter, in a new order for most pods.
Telling a permuted list from its bytes (namebytes.fingerprint) and reading the first list
after a start into ids (learned.py) were a few dozen whole-array NumPy calls per 8 bytes
of name, on the filter's path for most pods (docs/BENCHMARKS.md). Here each is one pass
over the body.

The format accepted is exactly the one Go writes for plain names, and nothing else (-1:
the caller reads the list another way, which also names what is wrong): '[', then names
in quotes separated by single commas, then ']', no space; every name 1..253 bytes with no
backslash and no control character (JSON decodes only their escaped forms).

A name's 8-byte words are little-endian, bytes past its end zero. The hashes are those
namebytes.py and learned.py describe; their arithmetic is unsigned 64-bit, wrapping. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NAME_MAX_BYTES 253
#define WORDS 32          /* 8-byte words of the longest name */
#define MAX_PROBES 64     /* learned.MAX_PROBES */
#define TAG 0xFFFFFFFF00000000ULL
#define EMPTY (-1)        /* learned.EMPTY */
#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

/* The names of a Go-written list: per name its offset in `body` and length. Returns how
   many (at most `cap`), or -1 when the bytes are not such a list. */
static Py_ssize_t split(const unsigned char *data, Py_ssize_t len, Py_ssize_t *starts,
                        Py_ssize_t *lengths, Py_ssize_t cap, const unsigned char **body) {
    Py_ssize_t lo = 0, hi = len;
    while (lo < hi && strchr(" \t\n\r", data[lo]) && data[lo]) lo++;
    while (hi > lo && strchr(" \t\n\r", data[hi - 1]) && data[hi - 1]) hi--;
    const unsigned char *b = data + lo;
    Py_ssize_t n = hi - lo, count = 0, i = 1;
    *body = b;
    if (n < 4 || b[0] != '[' || b[1] != '"' || b[n - 2] != '"' || b[n - 1] != ']') return -1;
    for (;;) { /* b[i] is the opening quote of a name */
        const unsigned char *q = memchr(b + i + 1, '"', (size_t)(n - i - 1));
        Py_ssize_t start = i + 1, size = q ? q - b - start : -1;
        if (size < 1 || size > NAME_MAX_BYTES || count == cap) return -1;
        for (Py_ssize_t k = start; k < start + size; k++)
            if (b[k] < 0x20 || b[k] == '\\') return -1;
        starts[count] = start;
        lengths[count++] = size;
        Py_ssize_t close = start + size;
        if (close == n - 2) return count;
        if (b[close + 1] != ',' || b[close + 2] != '"') return -1;
        i = close + 2;
    }
}

/* Word j of the name at `p` (`size` bytes). */
static uint64_t word(const unsigned char *p, Py_ssize_t size, Py_ssize_t j) {
    uint64_t w = 0;
    Py_ssize_t end = size - 8 * j < 8 ? size - 8 * j : 8;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (end == 8) { /* a whole word: one load */
        memcpy(&w, p + 8 * j, 8);
        return w;
    }
#endif
    for (Py_ssize_t k = 0; k < end; k++) w |= (uint64_t)p[8 * j + k] << (8 * k);
    return w;
}

static uint64_t fmix(uint64_t x) { /* MurmurHash3's 64-bit finaliser */
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    return x ^ (x >> 33);
}

/* namebytes._hashes: word j mixed under its key and weighted, summed, the length mixed in */
static uint64_t keyed_hash(const unsigned char *p, Py_ssize_t size, const uint64_t *keys) {
    uint64_t h = 0;
    for (Py_ssize_t j = 0; 8 * j < size; j++) h += fmix(word(p, size, j) ^ keys[j]) * keys[WORDS + j];
    return fmix(h ^ (uint64_t)size);
}

/* learned.LearnedNames.hashes: a multiply per word and the length's, then a final mix */
static uint64_t learned_hash(const unsigned char *p, Py_ssize_t size, const uint64_t *mult) {
    uint64_t h = (uint64_t)size * mult[WORDS];
    for (Py_ssize_t j = 0; 8 * j < size; j++) h += word(p, size, j) * mult[j];
    h ^= h >> 29;
    return h * mult[WORDS + 1];
}

static int borrow(PyObject *obj, Py_buffer *view, Py_ssize_t size, Py_ssize_t min_items,
                  int writable, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->itemsize != size || view->len < size * min_items) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes of %zd-byte items, at least %zd wanted",
                     name, view->len, view->itemsize, min_items);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(keyed_doc,
             "keyed(data, keys, hashes, shares) -> int\n\n"
             "Each name's keyed hash (namebytes._hashes) into `hashes` and its set share,\n"
             "fmix(hash ^ keys[-1]), into `shares`; returns how many names, or -1 when\n"
             "`data` is not a list as Go writes it. The outputs hold len(data) // 4 items.");

static PyObject *keyed(PyObject *self, PyObject *args) {
    Py_buffer data, keys, hashes, shares;
    PyObject *ko, *ho, *so;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*OOO", &data, &ko, &ho, &so)) return NULL;
    Py_ssize_t cap = data.len / 4, n = -1;
    PyObject *result = NULL;
    Py_ssize_t *spans = NULL;
    int held = 0;
    if (borrow(ko, &keys, 8, 2 * WORDS + 1, 0, "keys") < 0) goto out;
    held = 1;
    if (borrow(ho, &hashes, 8, cap, 1, "hashes") < 0) goto out;
    held = 2;
    if (borrow(so, &shares, 8, cap, 1, "shares") < 0) goto out;
    held = 3;
    spans = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)(cap > 0 ? cap : 1));
    if (!spans) {
        PyErr_NoMemory();
        goto out;
    }
    const unsigned char *body;
    const uint64_t *k = keys.buf;
    n = split(data.buf, data.len, spans, spans + cap, cap, &body);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t h = keyed_hash(body + spans[i], spans[cap + i], k);
        ((uint64_t *)hashes.buf)[i] = h;
        ((uint64_t *)shares.buf)[i] = fmix(h ^ k[2 * WORDS]);
    }
    result = PyLong_FromSsize_t(n);
out:
    PyMem_Free(spans);
    if (held >= 3) PyBuffer_Release(&shares);
    if (held >= 2) PyBuffer_Release(&hashes);
    if (held >= 1) PyBuffer_Release(&keys);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(fingerprint_doc,
             "fingerprint(data, keys) -> (count, sum of hashes, sum of shares) or None\n\n"
             "namebytes.NameIndex.fingerprint of a list as Go writes it: ``keyed``'s hashes and\n"
             "shares summed (wrapping, so in any order); None for any other bytes.");

static PyObject *fingerprint(PyObject *self, PyObject *args) {
    Py_buffer data, keys;
    PyObject *ko;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O", &data, &ko)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t cap = data.len / 4;
    Py_ssize_t *spans = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)(cap > 0 ? cap : 1));
    if (!spans) {
        PyErr_NoMemory();
    } else if (borrow(ko, &keys, 8, 2 * WORDS + 1, 0, "keys") == 0) {
        const unsigned char *body;
        const uint64_t *k = keys.buf;
        Py_ssize_t n = split(data.buf, data.len, spans, spans + cap, cap, &body);
        uint64_t sum = 0, shares = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t h = keyed_hash(body + spans[i], spans[cap + i], k);
            sum += h;
            shares += fmix(h ^ k[2 * WORDS]);
        }
        result = n < 0 ? Py_NewRef(Py_None) : Py_BuildValue("nKK", n, sum, shares);
        PyBuffer_Release(&keys);
    }
    PyMem_Free(spans);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(learned_doc,
             "learned(data, mult, table, spot, heap, end, ids) -> int\n\n"
             "The ids of a list as Go writes it whose every name was learned (learned.py's\n"
             "table, found by hash, checked word for word) into `ids` (len(data) // 4 items);\n"
             "returns how many, or -1 for another list or a name not learned.");

static PyObject *learned(PyObject *self, PyObject *args) {
    Py_buffer data, mult, table, spot, heap, ids;
    PyObject *mo, *to, *so, *ho, *io;
    Py_ssize_t end;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*OOOOnO", &data, &mo, &to, &so, &ho, &end, &io)) return NULL;
    Py_ssize_t cap = data.len / 4, n = -1;
    PyObject *result = NULL;
    Py_ssize_t *spans = NULL;
    int held = 0;
    if (borrow(mo, &mult, 8, WORDS + 2, 0, "mult") < 0) goto out;
    held = 1;
    if (borrow(to, &table, 8, 1, 0, "table") < 0) goto out;
    held = 2;
    if (borrow(so, &spot, 8, 0, 0, "spot") < 0) goto out;
    held = 3;
    if (borrow(ho, &heap, 8, end, 0, "heap") < 0) goto out;
    held = 4;
    if (borrow(io, &ids, 8, cap, 1, "ids") < 0) goto out;
    held = 5;
    Py_ssize_t width = table.len / 8, learned_ids = spot.len / 16;
    if ((width & (width - 1)) != 0 || end < 1) {
        PyErr_SetString(PyExc_ValueError, "table: not a power of two, or nothing learned");
        goto out;
    }
    spans = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)(cap > 0 ? cap : 1));
    if (!spans) {
        PyErr_NoMemory();
        goto out;
    }
    const unsigned char *body;
    const int64_t *tab = table.buf, *first = spot.buf, *length = first + learned_ids;
    const uint64_t *m = mult.buf, *words = heap.buf;
    int64_t *out = ids.buf;
    int shift = 64;
    for (Py_ssize_t w = width; w > 1; w >>= 1) shift--;
    n = split(data.buf, data.len, spans, spans + cap, cap, &body);
    /* Three passes, so that the memory each reads (on a first list after thousands of
       reports, cold) is asked for many names at once rather than one miss at a time:
       hashes, then the table's slots, then the learned names' bytes. */
    uint64_t *hashes = n > 0 ? PyMem_Malloc(sizeof(uint64_t) * (size_t)n) : NULL;
    if (n > 0 && !hashes) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        hashes[i] = learned_hash(body + spans[i], spans[cap + i], m);
        PREFETCH(&tab[shift == 64 ? 0 : (Py_ssize_t)(hashes[i] >> shift)]);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t h = hashes[i];
        Py_ssize_t slot = shift == 64 ? 0 : (Py_ssize_t)(h >> shift);
        int64_t entry = tab[slot];
        int found = 0;
        for (int probe = 0; probe < MAX_PROBES && entry != EMPTY; probe++) {
            if (((uint64_t)entry & TAG) == (h & TAG)) {
                found = 1;
                break;
            }
            slot = (slot + 1) & (width - 1);
            entry = tab[slot];
        }
        int64_t id = entry & 0xFFFFFFFF;
        if (!found || id >= learned_ids) {
            n = -1;
            break;
        }
        out[i] = id;
        PREFETCH(&first[id]);
        PREFETCH(&length[id]);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + 8 < n) PREFETCH(&words[first[out[i + 8]] < end ? first[out[i + 8]] : end - 1]);
        const unsigned char *p = body + spans[i];
        Py_ssize_t size = spans[cap + i];
        int64_t id = out[i];
        if (length[id] != size) {
            n = -1;
            break;
        }
        for (Py_ssize_t j = 0; 8 * j < size && n >= 0; j++) {
            Py_ssize_t at = first[id] + j < end ? first[id] + j : end - 1;
            if (words[at] != word(p, size, j)) n = -1; /* another name under its hash */
        }
    }
    PyMem_Free(hashes);
    result = PyLong_FromSsize_t(n);
out:
    PyMem_Free(spans);
    if (held >= 5) PyBuffer_Release(&ids);
    if (held >= 4) PyBuffer_Release(&heap);
    if (held >= 3) PyBuffer_Release(&spot);
    if (held >= 2) PyBuffer_Release(&table);
    if (held >= 1) PyBuffer_Release(&mult);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(learned_hash_doc,
             "learned_hash(name, mult) -> int\n\n"
             "learned.py's hash of one name's bytes (at most 253).");

static PyObject *learned_hash_py(PyObject *self, PyObject *args) {
    Py_buffer name, mult;
    PyObject *mo;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O", &name, &mo)) return NULL;
    PyObject *result = NULL;
    if (name.len > NAME_MAX_BYTES) {
        PyErr_SetString(PyExc_ValueError, "name: longer than 253 bytes");
    } else if (borrow(mo, &mult, 8, WORDS + 2, 0, "mult") == 0) {
        result = PyLong_FromUnsignedLongLong(learned_hash(name.buf, name.len, mult.buf));
        PyBuffer_Release(&mult);
    }
    PyBuffer_Release(&name);
    return result;
}

static PyMethodDef methods[] = {
    {"keyed", keyed, METH_VARARGS, keyed_doc},
    {"fingerprint", fingerprint, METH_VARARGS, fingerprint_doc},
    {"learned", learned, METH_VARARGS, learned_doc},
    {"learned_hash", learned_hash_py, METH_VARARGS, learned_hash_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "golist",
    .m_doc = "Candidate lists as Go writes them, read in one pass (see golist.c).",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit_golist(void) { return PyModule_Create(&module); }
