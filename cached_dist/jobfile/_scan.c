/* The job file LLD writes, parsed in one pass over its bytes.
 *
 *   lld(raw) -> (linker_output, linker_version, common_args, common_inputs, jobs) | None
 *
 * ``jobs`` is a list of (args, inputs, outputs) tuples of str; linker_output and
 * linker_version are str or None (absent). This is what jobfile.load gives for LLD's schema
 * through json and its object hook (~2.2 ms of a 300-job link's 407 KB job file on the test
 * host, ~3.5 ms in a served link), in a fraction of that: the bytes are scanned once, and
 * each distinct string becomes one str however many jobs name it (a module imported by every
 * job is one object), with no dict per job.
 *
 * It takes only the plain form LLD writes, and hands back (None) anything else for the
 * Python parser to read, judge and name in its own words: a top level of exactly "common" and
 * "jobs"; "common" of "args" (required), "inputs", "linker_output" and "linker_version"; each
 * job exactly "args", "inputs" and "outputs"; every value a list of strings or, for the two
 * names, a string; no key twice; non-empty "inputs" and "outputs" and no empty path; strings
 * without escapes or control characters; JSON whitespace between tokens, nothing after the
 * top level. Non-ASCII strings are decoded as jobfile.load decodes the text (UTF-8,
 * surrogatepass); one that does not decode is handed back. So whatever is taken here, the
 * Python parser would have taken, giving the same values (tests/test_jobfile_scan.py checks
 * both on real and damaged job files).
 *
 * Bytes are untrusted: every read is checked against the end, nothing recurses, and a
 * Python error met on the way (out of memory) is cleared and the file handed back, so the
 * Python parser meets it in its own words.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const unsigned char *s; /* into the raw bytes */
    size_t n;
    uint64_t h;
    PyObject *str; /* a strong reference, dropped with the table */
} Slot;

typedef struct {
    const unsigned char *p, *end;
    Slot *slots; /* open addressing, a power of two, at most half full */
    size_t mask, used;
    PyObject **items; /* one list of strings being read */
    size_t nitems, cap;
} S;

static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
    }
    w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

static void ws(S *st) {
    const unsigned char *p = st->p;
    while (p < st->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    st->p = p;
}

/* Whether the next byte after whitespace is c: consumes both if so, the whitespace only
 * if not. */
static int next_is(S *st, unsigned char c) {
    ws(st);
    if (st->p >= st->end || *st->p != c)
        return 0;
    st->p++;
    return 1;
}

/* next_is(c) as a step that must succeed: 0, or -1. */
static int expect(S *st, unsigned char c) {
    return next_is(st, c) ? 0 : -1;
}

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* Whether the n bytes hold no backslash (an escape) and no control character; *high gets
 * their bits or'ed (non-ASCII if 0x80 is among them). Eight bytes a step: a word has a byte
 * below 0x20 iff (w - 0x20..) & ~w & 0x80.. is not zero, a backslash iff w ^ 0x5C.. has a
 * zero byte. */
static int plain(const unsigned char *s, size_t n, uint64_t *high) {
    uint64_t bits = 0, bad = 0, w, x;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        x = w ^ (ONES * 0x5C);
        bits |= w;
        bad |= ((w - ONES * 0x20) & ~w) | ((x - ONES) & ~x);
    }
    for (; n; s++, n--) {
        bits |= *s;
        bad |= (*s < 0x20 || *s == '\\') ? HIGHS : 0;
    }
    *high = bits;
    return !(bad & HIGHS);
}

/* A string's bytes, between its quotes (st->p at the opening one): -1 for an escape, a
 * control character or no closing quote. *ascii says whether every byte is below 0x80. */
static int span(S *st, const unsigned char **s, size_t *n, int *ascii) {
    if (expect(st, '"'))
        return -1;
    const unsigned char *start = st->p;
    const unsigned char *q = memchr(start, '"', (size_t)(st->end - start));
    uint64_t high;
    /* an escaped quote ends the scan too early: the backslash before it is refused */
    if (!q || !plain(start, (size_t)(q - start), &high))
        return -1;
    *s = start;
    *n = (size_t)(q - start);
    *ascii = !(high & HIGHS);
    st->p = q + 1;
    return 0;
}

static int grow_table(S *st) {
    size_t cap = (st->mask + 1) * 2;
    Slot *slots = calloc(cap, sizeof(Slot));
    if (!slots)
        return -1;
    for (size_t i = 0; i <= st->mask; i++) {
        Slot *old = &st->slots[i];
        if (!old->str)
            continue;
        size_t j = old->h & (cap - 1);
        while (slots[j].str)
            j = (j + 1) & (cap - 1);
        slots[j] = *old;
    }
    free(st->slots);
    st->slots = slots;
    st->mask = cap - 1;
    return 0;
}

/* The one str for these bytes (a new reference), made the first time they are seen. */
static PyObject *intern(S *st, const unsigned char *s, size_t n, int ascii) {
    uint64_t h = hash_bytes(s, n);
    size_t i = h & st->mask;
    for (Slot *t; (t = &st->slots[i])->str; i = (i + 1) & st->mask) {
        if (t->h == h && t->n == n && memcmp(t->s, s, n) == 0) {
            Py_INCREF(t->str);
            return t->str;
        }
    }
    PyObject *str;
    if (ascii) {
        str = PyUnicode_New((Py_ssize_t)n, 127);
        if (str)
            memcpy(PyUnicode_1BYTE_DATA(str), s, n);
    } else {
        str = PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, "surrogatepass");
    }
    if (!str)
        return NULL;
    st->slots[i] = (Slot){s, n, h, str};
    Py_INCREF(str);
    if (++st->used * 2 > st->mask + 1 && grow_table(st)) {
        Py_DECREF(str);
        return NULL; /* the table keeps its reference, dropped with it */
    }
    return str;
}

static PyObject *string(S *st) {
    const unsigned char *s;
    size_t n;
    int ascii;
    if (span(st, &s, &n, &ascii))
        return NULL;
    return intern(st, s, n, ascii);
}

/* An object's next key, after '{' or ',': 0, or -1 when it is not a plain string. */
static int key(S *st, const unsigned char **s, size_t *n) {
    int ascii;
    if (span(st, s, n, &ascii) || expect(st, ':'))
        return -1;
    return 0;
}

#define IS(s, n, lit) ((n) == sizeof(lit) - 1 && memcmp((s), (lit), sizeof(lit) - 1) == 0)

/* After an object's member or a list's item: 1 when it goes on (','), 0 when it ends
 * (``close``), -1 otherwise. */
static int more(S *st, unsigned char close) {
    if (next_is(st, ','))
        return 1;
    return next_is(st, close) ? 0 : -1;
}

static void drop_items(S *st) {
    for (size_t i = 0; i < st->nitems; i++)
        Py_DECREF(st->items[i]);
    st->nitems = 0;
}

/* A list of strings as a tuple; ``paths``: at least ``least`` of them, none empty. */
static PyObject *strings(S *st, int paths, size_t least) {
    if (expect(st, '['))
        return NULL;
    st->nitems = 0;
    if (!next_is(st, ']')) {
        for (int go = 1; go;) {
            if (st->nitems == st->cap) {
                size_t cap = st->cap ? st->cap * 2 : 64;
                PyObject **items = realloc(st->items, cap * sizeof(PyObject *));
                if (!items)
                    goto fail;
                st->items = items;
                st->cap = cap;
            }
            PyObject *str = string(st);
            if (!str)
                goto fail;
            st->items[st->nitems++] = str;
            if (paths && PyUnicode_GET_LENGTH(str) == 0)
                goto fail;
            if ((go = more(st, ']')) < 0)
                goto fail;
        }
    }
    if (st->nitems < least)
        goto fail;
    PyObject *tuple = PyTuple_New((Py_ssize_t)st->nitems);
    if (!tuple)
        goto fail;
    for (size_t i = 0; i < st->nitems; i++)
        PyTuple_SET_ITEM(tuple, (Py_ssize_t)i, st->items[i]); /* steals */
    st->nitems = 0;
    return tuple;
fail:
    drop_items(st);
    return NULL;
}

/* Reads a value into *slot, which must still be empty (no key twice): 0, or -1. */
#define TAKE(slot, expr) ((slot) ? -1 : ((slot) = (expr)) ? 0 : -1)

/* Reads one member of an object into ``into``, st->p at its value: 0, or -1 to refuse it. */
typedef int (*Member)(S *st, const unsigned char *key, size_t n, void *into);

/* An object of at least one member, in any order, each read by ``member``: 0, or -1 at the
 * first one refused or anything else (what was read stays in ``into``, for its owner). */
static int object(S *st, Member member, void *into) {
    const unsigned char *s;
    size_t n;
    if (expect(st, '{'))
        return -1;
    for (int go = 1; go;) {
        if (key(st, &s, &n) || member(st, s, n, into) || (go = more(st, '}')) < 0)
            return -1;
    }
    return 0;
}

typedef struct {
    PyObject *args, *inputs, *outputs;
} Job;

static int job_member(S *st, const unsigned char *s, size_t n, void *into) {
    Job *j = into;
    if (IS(s, n, "args"))
        return TAKE(j->args, strings(st, 0, 0));
    if (IS(s, n, "inputs"))
        return TAKE(j->inputs, strings(st, 1, 1));
    if (IS(s, n, "outputs"))
        return TAKE(j->outputs, strings(st, 1, 1));
    return -1;
}

/* {"args": [...], "inputs": [...], "outputs": [...]} in any order, nothing else. */
static PyObject *job(S *st) {
    Job j = {NULL, NULL, NULL};
    PyObject *three = NULL;
    if (!object(st, job_member, &j) && j.args && j.inputs && j.outputs &&
        (three = PyTuple_New(3))) {
        PyTuple_SET_ITEM(three, 0, j.args); /* steals */
        PyTuple_SET_ITEM(three, 1, j.inputs);
        PyTuple_SET_ITEM(three, 2, j.outputs);
        return three;
    }
    Py_XDECREF(j.args);
    Py_XDECREF(j.inputs);
    Py_XDECREF(j.outputs);
    return NULL;
}

typedef struct {
    PyObject *linker_output, *linker_version, *args, *inputs;
} Common;

static void common_clear(Common *c) {
    Py_CLEAR(c->linker_output);
    Py_CLEAR(c->linker_version);
    Py_CLEAR(c->args);
    Py_CLEAR(c->inputs);
}

static int common_member(S *st, const unsigned char *s, size_t n, void *into) {
    Common *c = into;
    if (IS(s, n, "args"))
        return TAKE(c->args, strings(st, 0, 0));
    if (IS(s, n, "inputs"))
        return TAKE(c->inputs, strings(st, 1, 0));
    if (IS(s, n, "linker_output"))
        return TAKE(c->linker_output, string(st));
    if (IS(s, n, "linker_version"))
        return TAKE(c->linker_version, string(st));
    return -1;
}

/* [job, ...] as a list. */
static PyObject *jobs(S *st) {
    if (expect(st, '['))
        return NULL;
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    if (next_is(st, ']'))
        return list;
    for (int go = 1; go;) {
        PyObject *one = job(st);
        if (!one)
            goto fail;
        int bad = PyList_Append(list, one);
        Py_DECREF(one);
        if (bad || (go = more(st, ']')) < 0)
            goto fail;
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

typedef struct {
    Common common; /* "args" required, the others may be absent */
    int have_common;
    PyObject *jobs;
} Document;

static int document_member(S *st, const unsigned char *s, size_t n, void *into) {
    Document *d = into;
    if (IS(s, n, "common") && !d->have_common) {
        d->have_common = 1;
        return object(st, common_member, &d->common) || !d->common.args ? -1 : 0;
    }
    if (IS(s, n, "jobs"))
        return TAKE(d->jobs, jobs(st));
    return -1;
}

/* The whole document: {"common": {...}, "jobs": [...]}, in any order, and then nothing. */
static PyObject *document(S *st) {
    Document d = {{NULL, NULL, NULL, NULL}, 0, NULL};
    PyObject *result = NULL;
    if (!object(st, document_member, &d) && d.have_common && d.jobs) {
        ws(st);
        Common *c = &d.common;
        if (st->p == st->end && (c->inputs || (c->inputs = PyTuple_New(0)))) {
            PyObject *none = Py_None;
            result = Py_BuildValue("(OOOOO)", c->linker_output ? c->linker_output : none,
                                   c->linker_version ? c->linker_version : none, c->args,
                                   c->inputs, d.jobs);
        }
    }
    common_clear(&d.common);
    Py_XDECREF(d.jobs);
    return result;
}

static PyObject *lld(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE))
        return NULL;
    S st = {0};
    st.p = view.buf;
    st.end = st.p + view.len;
    st.mask = 1023;
    st.slots = calloc(st.mask + 1, sizeof(Slot));
    PyObject *result = st.slots ? document(&st) : NULL;
    for (size_t i = 0; st.slots && i <= st.mask; i++)
        Py_XDECREF(st.slots[i].str);
    free(st.slots);
    drop_items(&st);
    free(st.items);
    PyBuffer_Release(&view);
    if (result)
        return result;
    PyErr_Clear(); /* handed back: the Python parser meets whatever it was */
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"lld", lld, METH_O,
     "lld(raw) -> (linker_output, linker_version, common_args, common_inputs, jobs) or None: "
     "an LLD job file in the plain form LLD writes; None for anything else."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "The job file LLD writes, parsed in one pass.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    return PyModule_Create(&module);
}
