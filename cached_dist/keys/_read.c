/* Reading an input file whole, as keys/digests.py's read_regular does, in one call.
 *
 * A link reads every module and every shard once: some 600 small files for a 300-job link of
 * archive members, 6,000 for 3,000. In Python each read is five system calls wrapped in
 * objects and tuples (~7 us a file on the test host); here it is the five system calls
 * (~4.6 us). The checks are read_regular's exactly, and so are its errors:
 *
 *   read_exact(path, dev, ino, size, mtime_ns) -> bytes
 *   read_new(path) -> (bytes, (dev, ino, size, mtime_ns))   stat first (no examined stat)
 *
 * opens ``path`` without blocking (O_NONBLOCK: a FIFO put in its place never waits) and
 * without updating its access time where allowed (O_NOATIME), refuses a file that is not the
 * one examined (device and inode, regular), reads at most size + 1 bytes (one more tells a
 * file that grew), and refuses a file whose length or (size, mtime) changed meanwhile.
 * Errors are OSError: from the system call (errno, strerror, the path), or with read_regular's
 * message. The caller checks the examined stat is of a regular file.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef O_NOATIME
#define O_NOATIME 0
#endif

static long long mtime_ns(const struct stat *st) {
    return (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

/* An OSError with a message of read_regular's, closing ``fd``. */
static PyObject *refuse(int fd, PyObject *path, const char *what) {
    close(fd);
    PyErr_Format(PyExc_OSError, "%U %s", path, what);
    return NULL;
}

/* An OSError from errno, as the os module raises it (FileNotFoundError...), closing ``fd``. */
static PyObject *from_errno(int fd, PyObject *path) {
    int saved = errno;
    if (fd >= 0)
        close(fd);
    errno = saved;
    return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
}

/* The bytes of ``name`` (``path``, encoded), exactly as examined (dev, ino, size, mtime). */
static PyObject *read_as(PyObject *path, const char *name, unsigned long long dev,
                         unsigned long long ino, long long size, long long mtime) {
    if (size < 0 || size >= PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_ValueError, "read_exact: size out of range");
        return NULL;
    }
    int fd = open(name, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOATIME);
    if (fd < 0 && (errno == EPERM || errno == EACCES) && O_NOATIME)
        fd = open(name, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* not the owner: no O_NOATIME */
    if (fd < 0)
        return from_errno(-1, path);
    struct stat now;
    if (fstat(fd, &now) < 0)
        return from_errno(fd, path);
    if ((unsigned long long)now.st_dev != dev || (unsigned long long)now.st_ino != ino ||
        !S_ISREG(now.st_mode))
        return refuse(fd, path, "was replaced while being read");
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size + 1);
    if (data == NULL) {
        close(fd);
        return NULL;
    }
    char *buf = PyBytes_AS_STRING(data);
    Py_ssize_t got = 0;
    while (got < (Py_ssize_t)size) {
        ssize_t n = read(fd, buf + got, (size_t)(size + 1 - got));
        if (n < 0) {
            if (errno == EINTR) {
                if (PyErr_CheckSignals() < 0) {
                    Py_DECREF(data);
                    close(fd);
                    return NULL;
                }
                continue;
            }
            Py_DECREF(data);
            return from_errno(fd, path);
        }
        if (n == 0)
            break;
        got += n;
    }
    struct stat after;
    if (fstat(fd, &after) < 0) {
        Py_DECREF(data);
        return from_errno(fd, path);
    }
    close(fd);
    if (got != (Py_ssize_t)size || (long long)after.st_size != size || mtime_ns(&after) != mtime) {
        Py_DECREF(data);
        PyErr_Format(PyExc_OSError, "%U changed while being read", path);
        return NULL;
    }
    if (_PyBytes_Resize(&data, got) < 0)
        return NULL;
    return data;
}

static PyObject *read_exact(PyObject *self, PyObject *args) {
    PyObject *path, *encoded;
    unsigned long long dev, ino;
    long long size, mtime;
    if (!PyArg_ParseTuple(args, "UKKLL:read_exact", &path, &dev, &ino, &size, &mtime))
        return NULL;
    if (!PyUnicode_FSConverter(path, &encoded))
        return NULL;
    PyObject *data = read_as(path, PyBytes_AS_STRING(encoded), dev, ino, size, mtime);
    Py_DECREF(encoded);
    return data;
}

/* read_new(path) -> (bytes, (dev, ino, size, mtime_ns)): a file nobody examined yet. It is
 * examined here first (stat: a FIFO or a device is never opened), then read as read_exact. */
static PyObject *read_new(PyObject *self, PyObject *args) {
    PyObject *path, *encoded;
    if (!PyArg_ParseTuple(args, "U:read_new", &path))
        return NULL;
    if (!PyUnicode_FSConverter(path, &encoded))
        return NULL;
    const char *name = PyBytes_AS_STRING(encoded);
    struct stat st;
    PyObject *data = NULL, *result = NULL;
    if (stat(name, &st) < 0)
        from_errno(-1, path);
    else if (!S_ISREG(st.st_mode))
        PyErr_Format(PyExc_OSError, "%U is not a regular file", path);
    else
        data = read_as(path, name, (unsigned long long)st.st_dev,
                       (unsigned long long)st.st_ino, (long long)st.st_size, mtime_ns(&st));
    Py_DECREF(encoded);
    if (data != NULL) {
        result = Py_BuildValue("(N(KKLL))", data, (unsigned long long)st.st_dev,
                               (unsigned long long)st.st_ino, (long long)st.st_size,
                               mtime_ns(&st));
    }
    return result;
}

static PyMethodDef methods[] = {
    {"read_exact", read_exact, METH_VARARGS,
     "read_exact(path, dev, ino, size, mtime_ns) -> bytes: the file's bytes, exactly as "
     "examined (keys/digests.py read_regular), else OSError."},
    {"read_new", read_new, METH_VARARGS,
     "read_new(path) -> (bytes, (dev, ino, size, mtime_ns)): stat, then read_exact."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_read", "Reading examined input files whole.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__read(void) {
    return PyModule_Create(&module);
}
