/* Serving blobs by hard links, as store/blobs.py's copy_out(link=True) does, many in one call.
 *
 * A full hit served with --hard-link places one output a job: open the blob, check its size,
 * hash every byte, link it at the output, refresh its clock when stale. In Python that is some
 * ten objects and a dozen calls an output (~5 us on the test host, beside the system calls);
 * here it is the system calls. Only the path where everything is as expected is taken here:
 *
 *   link_blobs(blob_dir, plans, hexdigest, touch_before) -> list[float | None]
 *
 * ``plans`` are (digest, size, destination, ...) tuples; each gives the seconds its output
 * took, or None when this function did nothing for it and the caller is to place it (a blob
 * missing, of another size or content, a digest that is not 32 lowercase hex digits, a link
 * refused: the destination exists, another file system, a link limit...). Nothing is written
 * for a plan it hands back. ``hexdigest(bytes) -> str`` is the store's hash (xxhash's
 * xxh3_128_hexdigest): the blob is linked only if it gives ``digest``. A blob whose mtime is
 * before ``touch_before`` (seconds since the epoch) gets its mtime set to now.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef O_NOATIME
#define O_NOATIME 0
#endif

#define DIGEST_LEN 32

static double now_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Whether ``s`` is ``DIGEST_LEN`` lowercase hex digits: only such a digest names a blob
 * (anything else could name a path outside the store). */
static int is_digest(const char *s, Py_ssize_t n) {
    if (n != DIGEST_LEN)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return 1;
}

/* Reads exactly ``size`` bytes of ``fd`` into a new bytes object; NULL (no exception set) on
 * a short file or a read error. */
static PyObject *read_all(int fd, Py_ssize_t size) {
    PyObject *data = PyBytes_FromStringAndSize(NULL, size);
    if (data == NULL)
        return NULL;
    char *p = PyBytes_AS_STRING(data);
    Py_ssize_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, p + got, (size_t)(size - got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            Py_DECREF(data);
            return NULL;
        }
        got += n;
    }
    return data;
}

/* One plan; 1 if it was placed, 0 if handed back, -1 on a Python error (memory). */
static int link_one(const char *blob_dir, size_t dir_len, PyObject *plan, PyObject *hexdigest,
                    double touch_before) {
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) < 3)
        return 0;
    PyObject *odigest = PyTuple_GET_ITEM(plan, 0), *osize = PyTuple_GET_ITEM(plan, 1),
             *odest = PyTuple_GET_ITEM(plan, 2);
    if (!PyUnicode_Check(odigest) || !PyLong_Check(osize) || !PyUnicode_Check(odest))
        return 0;
    Py_ssize_t dlen, destlen;
    const char *digest = PyUnicode_AsUTF8AndSize(odigest, &dlen);
    if (digest == NULL || !is_digest(digest, dlen)) {
        PyErr_Clear();
        return 0;
    }
    long long size = PyLong_AsLongLong(osize);
    if (size < 0 || size >= PY_SSIZE_T_MAX) {
        PyErr_Clear();
        return 0;
    }
    PyObject *dest_bytes = PyUnicode_EncodeFSDefault(odest);
    if (dest_bytes == NULL) {
        PyErr_Clear();
        return 0;
    }
    const char *dest = PyBytes_AS_STRING(dest_bytes);
    destlen = PyBytes_GET_SIZE(dest_bytes);
    if ((Py_ssize_t)strlen(dest) != destlen) { /* a NUL inside: not a path */
        Py_DECREF(dest_bytes);
        return 0;
    }
    /* blob_dir/XX/REST, as Blobs.path */
    char path[4096];
    if (dir_len + 2 + DIGEST_LEN + 1 >= sizeof path) {
        Py_DECREF(dest_bytes);
        return 0;
    }
    memcpy(path, blob_dir, dir_len);
    path[dir_len] = '/';
    memcpy(path + dir_len + 1, digest, 2);
    path[dir_len + 3] = '/';
    memcpy(path + dir_len + 4, digest + 2, DIGEST_LEN - 2);
    path[dir_len + 4 + DIGEST_LEN - 2] = '\0';

    int placed = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOATIME);
    if (fd < 0 && (errno == EPERM || errno == EACCES) && O_NOATIME)
        fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        goto out;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (long long)st.st_size != size)
        goto out_fd;
    PyObject *data = read_all(fd, (Py_ssize_t)size);
    if (data == NULL) {
        if (PyErr_Occurred()) {
            placed = -1;
        }
        goto out_fd;
    }
    PyObject *got = PyObject_CallOneArg(hexdigest, data);
    Py_DECREF(data);
    if (got == NULL) {
        PyErr_Clear();
        goto out_fd;
    }
    int same = PyUnicode_Check(got) && PyUnicode_Compare(got, odigest) == 0;
    Py_DECREF(got);
    if (PyErr_Occurred())
        PyErr_Clear();
    if (!same)
        goto out_fd;
    if (link(path, dest) != 0)
        goto out_fd;
    placed = 1;
    double mtime = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
    if (mtime < touch_before)
        (void)futimens(fd, NULL); /* a read-only cache still serves hits */
out_fd:
    close(fd);
out:
    Py_DECREF(dest_bytes);
    return placed;
}

static PyObject *link_blobs(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *odir, *plans, *hexdigest;
    double touch_before;
    if (!PyArg_ParseTuple(args, "O&OOd:link_blobs", PyUnicode_FSConverter, &odir, &plans,
                          &hexdigest, &touch_before))
        return NULL;
    PyObject *seq = PySequence_Fast(plans, "link_blobs: plans must be a sequence");
    if (seq == NULL) {
        Py_DECREF(odir);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        goto fail;
    const char *dir = PyBytes_AS_STRING(odir);
    size_t dir_len = (size_t)PyBytes_GET_SIZE(odir);
    for (Py_ssize_t i = 0; i < n; i++) {
        double started = now_monotonic();
        int placed = link_one(dir, dir_len, PySequence_Fast_GET_ITEM(seq, i), hexdigest,
                              touch_before);
        if (placed < 0)
            goto fail;
        PyObject *item = placed ? PyFloat_FromDouble(now_monotonic() - started) : Py_NewRef(Py_None);
        if (item == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, item);
    }
    Py_DECREF(seq);
    Py_DECREF(odir);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    Py_DECREF(odir);
    return NULL;
}

static PyMethodDef methods[] = {
    {"link_blobs", link_blobs, METH_VARARGS,
     "link_blobs(blob_dir, plans, hexdigest, touch_before) -> list[float | None]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_link",
                                    "Serving verified blobs by hard links (store/_link.c).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__link(void) { return PyModule_Create(&module); }
