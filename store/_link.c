/* Placing blobs at outputs, as store/blobs.py's copy_out does, many in one call.
 *
 * A full hit places one output a job: open the blob, check its size, hash every byte, link it
 * at the output (--hard-link) or copy it there, refresh its clock when stale. In Python that
 * is some ten objects and a dozen calls an output (~5-10 us on the test host, beside the
 * system calls); here it is the system calls. Only the path where everything is as expected is taken here:
 *
 *   link_blobs(blob_dir, plans, hexdigest, touch_before) -> list[float | None]
 *   copy_blobs(blob_dir, plans, hexdigest, touch_before) -> list[float | None]
 *
 * ``plans`` are (digest, size, destination, ...) tuples; each gives the seconds its output
 * took, or None when this function did nothing for it and the caller is to place it (a blob
 * missing, of another size or content, a digest that is not 32 lowercase hex digits, a link
 * refused: the destination exists, another file system, a link limit...). Nothing is written
 * for a plan it hands back. ``hexdigest(bytes) -> str`` is the store's hash (xxhash's
 * xxh3_128_hexdigest): the blob is linked only if it gives ``digest``. A blob whose mtime is
 * before ``touch_before`` (seconds since the epoch) gets its mtime set to now.
 *
 * copy_blobs is copy_out without a link: each plan is (digest, size, destination, temp),
 * ``temp`` a new name (fsutil.temp_name) in the directory to copy through (the stage, or the
 * destination's). The verified bytes are cloned (FICLONE) where the file system can, else
 * written, to ``temp``, which is then renamed over the destination (removed first: see
 * copy_out). A plan handed back leaves no temp file; its destination may be gone (removed
 * before a rename that failed), which placing it again replaces. Blobs over 64 MB are
 * handed back: copy_out copies them in chunks.
 *
 * Built with libzstd (HAVE_ZSTD, see setup.py), copy_blobs also places a compressed blob
 * (``blobs/ab/cdef....zst``, taken when there is no plain one, as Blobs.copy_out does) the
 * way Blobs._decompress_out does: one zstd frame (not a skippable one, nothing after it)
 * whose header declares the plan's size, checked before the output is allocated, and the
 * frame itself read only when it is no larger than a frame of that size can be
 * (ZSTD_compressBound); decompressed with one DCtx for the whole call; every decompressed
 * byte hashed and compared with the digest (which names the uncompressed bytes); written,
 * never cloned, to the temp file and renamed. Anything else is handed back. Without libzstd
 * every compressed blob is handed back (HAS_ZSTD is False). link_blobs never places one:
 * a hard-linking store keeps its blobs plain.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_ZSTD
#include <zstd.h>
#endif

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

/* Reads exactly ``size`` bytes of ``fd`` into ``p``: 0, or -1 on a short file or an error. */
static int read_exact(int fd, char *p, size_t size) {
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, p + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

/* Reads exactly ``size`` bytes of ``fd`` into a new bytes object; NULL (no exception set) on
 * a short file or a read error. */
static PyObject *read_all(int fd, Py_ssize_t size) {
    PyObject *data = PyBytes_FromStringAndSize(NULL, size);
    if (data == NULL)
        return NULL;
    if (read_exact(fd, PyBytes_AS_STRING(data), (size_t)size) != 0) {
        Py_DECREF(data);
        return NULL;
    }
    return data;
}

/* Whether ``hexdigest(data)`` is the str ``digest``; a hash that raises or gives anything
 * else is a no (its exception cleared). */
static int same_digest(PyObject *hexdigest, PyObject *data, PyObject *digest) {
    PyObject *got = PyObject_CallOneArg(hexdigest, data);
    int same = got != NULL && PyUnicode_Check(got) && PyUnicode_Compare(got, digest) == 0;
    Py_XDECREF(got);
    if (PyErr_Occurred())
        PyErr_Clear();
    return same;
}

/* A blob file opened for reading: O_NOFOLLOW, O_NONBLOCK: a symbolic link or a FIFO in a
 * blob's place is handed back (Python's copy_out removes it), never followed or waited on.
 * -1 (errno set) if it cannot be opened. */
static int open_blob(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOATIME);
    if (fd < 0 && (errno == EPERM || errno == EACCES) && O_NOATIME)
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    return fd;
}

#define COPY_MAX ((long long)64 << 20) /* larger blobs: copy_out, in chunks */

/* A plan's blob, opened and verified: its descriptor, stat and bytes. */
typedef struct {
    int fd;
    struct stat st;
    PyObject *data; /* NULL unless kept (copy_blobs writes them) */
    int absent;     /* handed back because there is no plain blob (its .zst form may be) */
    int compressed; /* data are the decompressed bytes of the .zst form: never clone fd */
    long long size; /* the plan's size */
    char path[4096];
} Blob;

/* What one call keeps from plan to plan. */
typedef struct {
#ifdef HAVE_ZSTD
    ZSTD_DCtx *dctx; /* made for the call's first compressed blob, freed at its end */
#endif
    int spare; /* C has no empty struct */
} Ctx;

/* Opens and verifies the blob of a plan (digest, size, ...): 1 with ``b`` filled (fd open,
 * data kept if ``keep``), 0 if handed back (nothing open), -1 on a Python error (memory). */
static int verified(const char *blob_dir, size_t dir_len, PyObject *plan, PyObject *hexdigest,
                    int keep, long long max_size, Blob *b) {
    b->absent = 0;
    b->compressed = 0;
    PyObject *odigest = PyTuple_GET_ITEM(plan, 0), *osize = PyTuple_GET_ITEM(plan, 1);
    if (!PyUnicode_Check(odigest) || !PyLong_Check(osize))
        return 0;
    Py_ssize_t dlen;
    const char *digest = PyUnicode_AsUTF8AndSize(odigest, &dlen);
    if (digest == NULL || !is_digest(digest, dlen)) {
        PyErr_Clear();
        return 0;
    }
    long long size = PyLong_AsLongLong(osize);
    if (size < 0 || size > max_size) {
        PyErr_Clear();
        return 0;
    }
    b->size = size;
    /* blob_dir/XX/REST, as Blobs.path */
    char *path = b->path;
    if (dir_len + 2 + DIGEST_LEN + 1 >= sizeof b->path)
        return 0;
    memcpy(path, blob_dir, dir_len);
    path[dir_len] = '/';
    memcpy(path + dir_len + 1, digest, 2);
    path[dir_len + 3] = '/';
    memcpy(path + dir_len + 4, digest + 2, DIGEST_LEN - 2);
    path[dir_len + 4 + DIGEST_LEN - 2] = '\0';
    int fd = open_blob(path);
    if (fd < 0) {
        b->absent = errno == ENOENT;
        return 0;
    }
    if (fstat(fd, &b->st) != 0 || !S_ISREG(b->st.st_mode) || (long long)b->st.st_size != size) {
        close(fd);
        return 0;
    }
    PyObject *data = read_all(fd, (Py_ssize_t)size);
    if (data == NULL) {
        close(fd);
        return PyErr_Occurred() ? -1 : 0;
    }
    int same = same_digest(hexdigest, data, odigest);
    if (!same || !keep) {
        Py_DECREF(data);
        data = NULL;
    }
    if (!same) {
        close(fd);
        return 0;
    }
    b->fd = fd;
    b->data = data;
    return 1;
}

#ifdef HAVE_ZSTD
/* zstd's frame magic number, as a blob's first four bytes: a skippable frame, or anything
 * else, is not a compressed blob. */
static const unsigned char ZSTD_MAGIC[4] = {0x28, 0xb5, 0x2f, 0xfd};

/* The compressed form of a plan's blob (``b->path`` + ".zst"), for which verified() found
 * no plain one (``b`` as it left it): opened, checked, decompressed and verified as
 * Blobs._decompress_out does. 1 with ``b`` filled (fd open, the decompressed bytes in
 * b->data), 0 if handed back (nothing open), -1 on a Python error (memory). The blob's bytes
 * are untrusted: its file is read only when no larger than a frame of the plan's size can
 * be, and the output is allocated only once the frame's header declares that size. */
static int verified_frame(PyObject *plan, PyObject *hexdigest, Ctx *ctx, Blob *b) {
    size_t len = strlen(b->path);
    if (len + sizeof ".zst" > sizeof b->path)
        return 0;
    memcpy(b->path + len, ".zst", sizeof ".zst");
    size_t size = (size_t)b->size; /* 0 <= size <= COPY_MAX (verified() checked) */
    int fd = open_blob(b->path);
    if (fd < 0)
        return 0;
    if (fstat(fd, &b->st) != 0 || !S_ISREG(b->st.st_mode) ||
        b->st.st_size < (off_t)sizeof ZSTD_MAGIC ||
        (unsigned long long)b->st.st_size > (unsigned long long)ZSTD_compressBound(size)) {
        close(fd);
        return 0;
    }
    size_t n = (size_t)b->st.st_size;
    char *frame = malloc(n);
    if (frame == NULL) {
        close(fd);
        return 0;
    }
    if (read_exact(fd, frame, n) != 0 || memcmp(frame, ZSTD_MAGIC, sizeof ZSTD_MAGIC) != 0 ||
        /* "unknown" and "error" are never a size of at most COPY_MAX */
        ZSTD_getFrameContentSize(frame, n) != (unsigned long long)size) {
        free(frame);
        close(fd);
        return 0;
    }
    size_t whole = ZSTD_findFrameCompressedSize(frame, n); /* one frame, nothing after it */
    if (ZSTD_isError(whole) || whole != n ||
        (ctx->dctx == NULL && (ctx->dctx = ZSTD_createDCtx()) == NULL)) {
        free(frame);
        close(fd);
        return 0;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (data == NULL) {
        free(frame);
        close(fd);
        return -1;
    }
    size_t got = ZSTD_decompressDCtx(ctx->dctx, PyBytes_AS_STRING(data), size, frame, n);
    free(frame);
    if (ZSTD_isError(got) || got != size ||
        !same_digest(hexdigest, data, PyTuple_GET_ITEM(plan, 0))) {
        Py_DECREF(data);
        close(fd);
        return 0;
    }
    b->fd = fd;
    b->data = data;
    b->compressed = 1;
    return 1;
}
#endif

/* The end of a placed plan: refresh a stale blob's clock, close it. */
static void done_with(Blob *b, double touch_before) {
    double mtime = (double)b->st.st_mtim.tv_sec + (double)b->st.st_mtim.tv_nsec * 1e-9;
    if (mtime < touch_before)
        (void)futimens(b->fd, NULL); /* a read-only cache still serves hits */
    close(b->fd);
    Py_XDECREF(b->data);
}

/* A path argument of a plan, encoded; NULL (no exception) if it is not one. */
static PyObject *path_arg(PyObject *o) {
    if (!PyUnicode_Check(o))
        return NULL;
    PyObject *encoded = PyUnicode_EncodeFSDefault(o);
    if (encoded == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if ((Py_ssize_t)strlen(PyBytes_AS_STRING(encoded)) != PyBytes_GET_SIZE(encoded)) {
        Py_DECREF(encoded); /* a NUL inside: not a path */
        return NULL;
    }
    return encoded;
}

/* One plan of link_blobs; 1 if it was placed, 0 if handed back, -1 on a Python error. */
static int link_one(const char *blob_dir, size_t dir_len, PyObject *plan, PyObject *hexdigest,
                    double touch_before, Ctx *ctx) {
    (void)ctx;
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) < 3)
        return 0;
    PyObject *dest = path_arg(PyTuple_GET_ITEM(plan, 2));
    if (dest == NULL)
        return 0;
    Blob b;
    int ok = verified(blob_dir, dir_len, plan, hexdigest, 0, PY_SSIZE_T_MAX - 1, &b);
    if (ok == 1 && link(b.path, PyBytes_AS_STRING(dest)) != 0) {
        close(b.fd);
        ok = 0;
    } else if (ok == 1) {
        done_with(&b, touch_before);
    }
    Py_DECREF(dest);
    return ok;
}

static int reflink_ok = 1; /* cleared once the file system says it never clones */

/* Writes all of ``data`` to ``fd``: 0, or -1 (errno set). */
static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t put = write(fd, p, n);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return -1;
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

/* One plan of copy_blobs; 1 if it was placed, 0 if handed back, -1 on a Python error. */
static int copy_one(const char *blob_dir, size_t dir_len, PyObject *plan, PyObject *hexdigest,
                    double touch_before, Ctx *ctx) {
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) < 4)
        return 0;
    PyObject *dest = path_arg(PyTuple_GET_ITEM(plan, 2));
    if (dest == NULL)
        return 0;
    PyObject *tmp = path_arg(PyTuple_GET_ITEM(plan, 3));
    if (tmp == NULL) {
        Py_DECREF(dest);
        return 0;
    }
    Blob b;
    int ok = verified(blob_dir, dir_len, plan, hexdigest, 1, COPY_MAX, &b);
#ifdef HAVE_ZSTD
    if (ok == 0 && b.absent)
        ok = verified_frame(plan, hexdigest, ctx, &b);
#else
    (void)ctx;
#endif
    if (ok != 1)
        goto out;
    const char *t = PyBytes_AS_STRING(tmp);
    int out = open(t, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (out < 0) {
        ok = 0;
        goto out_blob;
    }
    int cloned = 0;
    if (reflink_ok && !b.compressed) { /* a clone of a .zst would be the frame's bytes */
        if (ioctl(out, FICLONE, b.fd) == 0)
            cloned = 1;
        else if (errno == EOPNOTSUPP || errno == ENOTTY || errno == ENOSYS)
            reflink_ok = 0; /* this kernel or file system never clones: stop asking */
    }
    int bad = !cloned && write_all(out, PyBytes_AS_STRING(b.data),
                                   (size_t)PyBytes_GET_SIZE(b.data));
    bad = close(out) != 0 || bad;
    if (bad) {
        unlink(t);
        ok = 0;
        goto out_blob;
    }
    /* Unlink first: on ext4 a rename over an existing file forces a data flush
     * (auto_da_alloc), as copy_out says. */
    const char *d = PyBytes_AS_STRING(dest);
    if ((unlink(d) != 0 && errno != ENOENT) || rename(t, d) != 0) {
        unlink(t);
        ok = 0;
        goto out_blob;
    }
    done_with(&b, touch_before);
    goto out;
out_blob:
    close(b.fd);
    Py_XDECREF(b.data);
out:
    Py_DECREF(tmp);
    Py_DECREF(dest);
    return ok;
}

typedef int (*PlaceOne)(const char *, size_t, PyObject *, PyObject *, double, Ctx *);

static void end_call(Ctx *ctx) {
#ifdef HAVE_ZSTD
    ZSTD_freeDCtx(ctx->dctx); /* NULL: nothing */
    ctx->dctx = NULL;
#else
    (void)ctx;
#endif
}

static PyObject *place_all(PyObject *args, const char *format, PlaceOne one) {
    Ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    PyObject *odir, *plans, *hexdigest;
    double touch_before;
    if (!PyArg_ParseTuple(args, format, PyUnicode_FSConverter, &odir, &plans, &hexdigest,
                          &touch_before))
        return NULL;
    PyObject *seq = PySequence_Fast(plans, "plans must be a sequence");
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
        int placed = one(dir, dir_len, PySequence_Fast_GET_ITEM(seq, i), hexdigest,
                         touch_before, &ctx);
        if (placed < 0)
            goto fail;
        PyObject *item =
            placed ? PyFloat_FromDouble(now_monotonic() - started) : Py_NewRef(Py_None);
        if (item == NULL)
            goto fail;
        PyList_SET_ITEM(out, i, item);
    }
    end_call(&ctx);
    Py_DECREF(seq);
    Py_DECREF(odir);
    return out;
fail:
    end_call(&ctx);
    Py_XDECREF(out);
    Py_DECREF(seq);
    Py_DECREF(odir);
    return NULL;
}

static PyObject *link_blobs(PyObject *self, PyObject *args) {
    (void)self;
    return place_all(args, "O&OOd:link_blobs", link_one);
}

static PyObject *copy_blobs(PyObject *self, PyObject *args) {
    (void)self;
    return place_all(args, "O&OOd:copy_blobs", copy_one);
}

static PyMethodDef methods[] = {
    {"link_blobs", link_blobs, METH_VARARGS,
     "link_blobs(blob_dir, plans, hexdigest, touch_before) -> list[float | None]"},
    {"copy_blobs", copy_blobs, METH_VARARGS,
     "copy_blobs(blob_dir, plans, hexdigest, touch_before) -> list[float | None]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_link", "Placing verified blobs by hard links or copies.", -1,
    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__link(void) {
    PyObject *m = PyModule_Create(&module);
#ifdef HAVE_ZSTD
    int has_zstd = 1;
#else
    int has_zstd = 0;
#endif
    if (m != NULL && PyModule_AddObjectRef(m, "HAS_ZSTD", has_zstd ? Py_True : Py_False) < 0)
        Py_CLEAR(m);
    return m;
}
