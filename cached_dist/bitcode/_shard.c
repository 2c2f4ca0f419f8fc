/* Native canonical form of a DTLTO summary index shard.
 *
 * A C port of cached_dist/bitcode/bitstream.py + shard.py (the reference): it returns the
 * very same canonical text (the sorted, newline-joined repr() of every canonical part), which
 * the Python side hashes, so both give one digest. It reads untrusted bytes: every read is
 * bounds-checked against the end of the bitstream, every loop consumes input or is bounded by
 * a count checked against the bits left, and all memory is released (or kept for the next
 * call, see canon_get) on every path.
 *
 * canonical_body(data, module_digest[, own, known]) returns
 *   bytes  the canonical text (the shard is fully understood),
 *   str    why the shard is not canonical (the caller uses the raw digest),
 *   None   "ask the reference": a value did not fit 64 bits, or a Python call failed in a
 *          way the reference should report. Never seen on real shards.
 *
 * Speed (it sits on the cache-hit path):
 *   - reading: a flat block's abbreviated records are decoded in one loop straight into one
 *     array; an abbreviation's equal operands are one step (push_op); far from the end of the
 *     bitstream a field is one unaligned 8-byte load (FAST_MARGIN);
 *   - text: written through a raw pointer after one room check per record (text buffers keep
 *     SLACK spare bytes, so short strings are copied as whole 16/24-byte blocks); each GUID is
 *     formatted once; small value and module ids index a direct table; plain module names
 *     are quoted without calling repr();
 *   - module digests: a path the job's own set (``own``) holds is looked up in ``known``
 *     directly; only other spellings cost a call of module_digest (a Python function);
 *   - sorting: parts are grouped by kind (their fixed prefixes decide the order between
 *     kinds), then sorted as strings by an MSD radix sort on 7-byte chunks;
 *   - memory: the growable buffers are kept from one call to the next (canon_get).
 * Every fast path falls back to the general one, so results and errors stay the same.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Hot helpers are forced inline (literals then get a constant length, reads a fast path). */
#define INLINE static inline __attribute__((always_inline))

/* ---- small growable arrays ------------------------------------------------------------ */

typedef struct {
    uint64_t *v;
    size_t n, cap;
} U64Vec;

typedef struct {
    char *v;
    size_t n, cap;
} Buf;

static int grow(void **p, size_t *cap, size_t need, size_t elt) {
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > ((size_t)-1) / 4 / elt)
            return -1;
        c *= 2;
    }
    void *q = realloc(*p, c * elt);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* ---- u64 -> u64 hash map (open addressing, grows) ------------------------------------ */

typedef struct {
    uint64_t *keys, *vals;
    uint8_t *used;
    size_t cap, n;
} Map;

static int map_alloc(Map *m, size_t cap) {
    m->keys = calloc(cap, sizeof(uint64_t));
    m->vals = calloc(cap, sizeof(uint64_t));
    m->used = calloc(cap, 1);
    m->cap = cap;
    m->n = 0;
    return (m->keys && m->vals && m->used) ? 0 : -1;
}

static void map_free(Map *m) {
    free(m->keys);
    free(m->vals);
    free(m->used);
    m->keys = m->vals = NULL;
    m->used = NULL;
    m->cap = m->n = 0;
}

static inline size_t map_slot(const Map *m, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 17) & (m->cap - 1);
    while (m->used[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static int map_get(const Map *m, uint64_t key, uint64_t *val) {
    if (!m->cap)
        return 0;
    size_t s = map_slot(m, key);
    if (!m->used[s])
        return 0;
    *val = m->vals[s];
    return 1;
}

/* Sets key (absent or not) to val; -1 when out of memory. */
static int map_put(Map *m, uint64_t key, uint64_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        Map bigger;
        if (map_alloc(&bigger, m->cap ? m->cap * 2 : 16)) {
            map_free(&bigger);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->used[i]) {
                size_t s = map_slot(&bigger, m->keys[i]);
                bigger.used[s] = 1;
                bigger.keys[s] = m->keys[i];
                bigger.vals[s] = m->vals[i];
                bigger.n++;
            }
        map_free(m);
        *m = bigger;
    }
    size_t s = map_slot(m, key);
    if (!m->used[s]) {
        m->used[s] = 1;
        m->keys[s] = key;
        m->n++;
    }
    m->vals[s] = val;
    return 0;
}

/* ---- id -> index: a direct table for small ids (real shards number from 0), else a Map -- */

#define DIRECT_MAX 65536 /* ids below this index the table (at most 256 KiB) */

typedef struct {
    uint32_t *direct; /* direct[id] = index + 1; 0: absent */
    size_t dcap;
    Map map; /* larger ids (or indices) */
} IdIndex;

INLINE int index_get(const IdIndex *x, uint64_t id, size_t *out) {
    if (id < x->dcap && x->direct[id]) {
        *out = (size_t)x->direct[id] - 1;
        return 1;
    }
    uint64_t v;
    if (x->map.n && map_get(&x->map, id, &v)) {
        *out = (size_t)v;
        return 1;
    }
    return 0;
}

/* Maps an absent id to val; -1 when out of memory. */
static int index_put(IdIndex *x, uint64_t id, size_t val) {
    if (id < DIRECT_MAX && val < UINT32_MAX - 1) {
        if (id >= x->dcap) {
            size_t c = x->dcap ? x->dcap : 64;
            while (c <= id)
                c *= 2;
            uint32_t *q = realloc(x->direct, c * sizeof(uint32_t));
            if (!q)
                return -1;
            memset(q + x->dcap, 0, (c - x->dcap) * sizeof(uint32_t));
            x->direct = q;
            x->dcap = c;
        }
        x->direct[id] = (uint32_t)(val + 1);
        return 0;
    }
    return map_put(&x->map, id, val);
}

static void index_free(IdIndex *x) {
    free(x->direct);
    x->direct = NULL;
    x->dcap = 0;
    map_free(&x->map);
}

/* ---- decoder state -------------------------------------------------------------------- */

enum { ENC_LITERAL = 0, ENC_FIXED = 1, ENC_VBR = 2, ENC_ARRAY = 3, ENC_CHAR6 = 4, ENC_BLOB = 5 };
enum { K_EOF, K_ENTER, K_END, K_RECORD };
/* Outcomes of a failed step. */
enum { ST_OK = 0, ST_MALFORMED, ST_UNSUPPORTED, ST_NOMEM, ST_PYERR };

typedef struct {
    uint8_t enc;
    uint8_t elt;      /* array element encoding */
    uint32_t count;   /* a scalar operand repeated this many times (see push_op) */
    uint64_t width;   /* literal value, or field width */
    uint64_t elt_w;   /* array element width */
} Op;

typedef struct {
    size_t off, n; /* into D.ops */
    size_t nvals;  /* scalar values a record of it has (the room to make) */
} Abbrev;

typedef struct {
    uint32_t *v;
    size_t n, cap;
} IdxVec; /* a block's abbreviation list: indices into D.abbrevs */

typedef struct {
    uint64_t block_id;
    uint64_t width;
    IdxVec abbrevs;
    uint64_t end_bit;
} Frame;

typedef struct {
    uint64_t block_id;
    IdxVec list;
} BlockInfo;

typedef struct {
    uint64_t code;
    size_t off, n;    /* operands: Records.ops.v[off : off + n] */
    int has_blob;
    size_t blob_off, blob_len;
} Rec;

typedef struct {
    const uint8_t *data;
    size_t len;
    uint64_t pos, end;
    uint64_t width;
    int big;            /* some value did not fit 64 bits: defer to the reference */
    int status;
    const char *reason; /* static text */
    /* abbreviations */
    Op *ops;
    size_t nops, capops;
    Abbrev *abbrevs;
    size_t nabbrevs, capabbrevs;
    IdxVec cur; /* current block's abbreviations */
    Frame *stack;
    size_t depth, capstack;
    BlockInfo *info;
    size_t ninfo, capinfo;
    Map info_index; /* block id -> index in info */
    /* the last record read: its operands are rec.v[rec0:rec.n] */
    uint64_t code;
    U64Vec rec;
    size_t rec0;
    int keep; /* append each record to rec (a flat block's records, no copy) */
    int has_blob;
    size_t blob_off, blob_len;
    uint64_t block_id;
} D;

static int fail(D *d, int status, const char *reason) {
    if (d->status == ST_OK) {
        d->status = status;
        d->reason = reason;
    }
    return -1;
}

#define MALFORMED(d, why) fail((d), ST_MALFORMED, (why))
#define UNSUPPORTED(d, why) fail((d), ST_UNSUPPORTED, (why))
#define NOMEM(d) fail((d), ST_NOMEM, "out of memory")

/* ---- bit reads ------------------------------------------------------------------------ */

static inline uint64_t load_le64(const void *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* peek64() within the last 9 bytes of the buffer: bytes past it read as zero. */
static uint64_t peek64_tail(const uint8_t *data, size_t len, uint64_t pos) {
    uint64_t b = pos >> 3;
    unsigned sh = (unsigned)(pos & 7);
    uint8_t tmp[9] = {0};
    if (b < len) {
        size_t avail = len - (size_t)b;
        memcpy(tmp, data + b, avail < 9 ? avail : 9);
    }
    uint64_t lo = load_le64(tmp);
    if (!sh)
        return lo;
    return (lo >> sh) | ((uint64_t)tmp[8] << (64 - sh));
}

/* 64 bits starting at bit ``pos``; bytes past the buffer read as zero. */
INLINE uint64_t peek64(const uint8_t *data, size_t len, uint64_t pos) {
    uint64_t b = pos >> 3;
    unsigned sh = (unsigned)(pos & 7);
    if (b + 9 <= len) { /* the common case: no padding needed */
        uint64_t lo = load_le64(data + b);
        /* (x << 1) << (63 - sh) is x << (64 - sh) for sh 1..7 and 0 for sh 0, branch-free */
        return (lo >> sh) | (((uint64_t)data[b + 8] << 1) << (63 - sh));
    }
    return peek64_tail(data, len, pos);
}

INLINE uint64_t mask(uint64_t width) {
    return width >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << width) - 1);
}

/* A read's value and new position, or an error (E_*). The readers take and return the
 * position by value so that the hot loops keep it in a register. */
typedef struct {
    uint64_t val, pos;
    int err;
} Rd;

enum { E_OK = 0, E_PAST, E_BIG, E_VBR };

/* The D-level failure for a reader error. */
static int rd_fail(D *d, int err) {
    if (err == E_BIG) {
        d->big = 1; /* the reference keeps such values: let it decide */
        return MALFORMED(d, "value over 64 bits");
    }
    return MALFORMED(d, err == E_PAST ? "read past end of bitstream" : "malformed VBR value");
}

/* VBR field, chunk by chunk (2..64 bits a chunk); values over 64 bits are E_BIG. */
static Rd vbr_slow(const uint8_t *data, size_t len, uint64_t pos, uint64_t end, uint64_t width) {
    Rd r = {0, pos, E_OK};
    uint64_t hi = (uint64_t)1 << (width - 1);
    uint64_t low = hi - 1;
    uint64_t value = 0;
    unsigned shift = 0;
    for (;;) {
        if (width > end || pos > end - width) {
            r.err = E_PAST;
            return r;
        }
        uint64_t chunk = peek64(data, len, pos) & mask(width);
        pos += width;
        uint64_t part = chunk & low;
        if (part) {
            if (shift >= 64 || (shift && (part >> (64 - shift)))) {
                r.err = E_BIG;
                return r;
            }
            value |= part << shift;
        }
        if (!(chunk & hi))
            break;
        shift += (unsigned)(width - 1);
        if (shift > 64) {
            r.err = E_VBR;
            return r;
        }
    }
    r.val = value;
    r.pos = pos;
    return r;
}

/* A VBR value of several chunks: those inside one 64-bit window need no further bounds
 * checks and cannot overflow (at most 63 value bits); anything else goes chunk by chunk. */
static Rd vbr_multi(const uint8_t *data, size_t len, uint64_t pos, uint64_t end, uint64_t width) {
    if (width <= 32 && pos <= end) {
        uint64_t w = peek64(data, len, pos);
        uint64_t lim = end - pos < 64 ? end - pos : 64;
        uint64_t m = mask(width), hi = (uint64_t)1 << (width - 1);
        uint64_t value = 0;
        unsigned shift = 0, used = 0;
        while (used + width <= lim) {
            uint64_t c = (w >> used) & m;
            value |= (c & (hi - 1)) << shift;
            used += (unsigned)width;
            if (!(c & hi)) {
                Rd r = {value, pos + used, E_OK};
                return r;
            }
            shift += (unsigned)(width - 1);
        }
    }
    return vbr_slow(data, len, pos, end, width);
}

/* VBR field: a value in one chunk (nearly all of them) takes the inline path. */
INLINE Rd vbr(const uint8_t *data, size_t len, uint64_t pos, uint64_t end, uint64_t width) {
    if (pos <= end && end - pos >= width) {
        uint64_t chunk = peek64(data, len, pos) & mask(width);
        if (!(chunk >> (width - 1))) {
            Rd r = {chunk, pos + width, E_OK};
            return r;
        }
    }
    return vbr_multi(data, len, pos, end, width);
}

/* D-level reads (block headers, abbreviation definitions, BLOCKINFO). */
static inline int rd_fixed(D *d, uint64_t width, uint64_t *out) {
    if (width > d->end || d->pos > d->end - width)
        return MALFORMED(d, "read past end of bitstream");
    *out = peek64(d->data, d->len, d->pos) & mask(width);
    d->pos += width;
    return 0;
}

static inline int rd_vbr(D *d, uint64_t width, uint64_t *out) {
    Rd r = vbr(d->data, d->len, d->pos, d->end, width);
    if (r.err)
        return rd_fail(d, r.err);
    d->pos = r.pos;
    *out = r.val;
    return 0;
}

INLINE uint64_t align32_pos(uint64_t pos) {
    return (pos + 31) & ~(uint64_t)31;
}

static void align32(D *d) {
    d->pos = align32_pos(d->pos);
}

/* Room for k more operands in d->rec. */
INLINE int rec_room(D *d, size_t k) {
    if (d->rec.cap - d->rec.n >= k)
        return 0;
    if (k > ((size_t)-1) / 16 ||
        grow((void **)&d->rec.v, &d->rec.cap, d->rec.n + k, sizeof(uint64_t)))
        return NOMEM(d);
    return 0;
}

/* ``count`` fields of at least ``width`` bits each must fit in what is left. */
static int fits(D *d, uint64_t count, uint64_t width) {
    uint64_t left = d->end - d->pos; /* count <= left / width, mostly without a division */
    if (d->pos > d->end || (count >> 32 ? count > left / width : count * width > left))
        return MALFORMED(d, "array runs past end of bitstream");
    return 0;
}

static const char CHAR6[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._";

/* ---- abbreviations -------------------------------------------------------------------- */

/* Appends an operand to the abbreviation that starts at ops[start]. A scalar operand equal to
 * the one before it (same encoding and width, or the same literal) only bumps that one's
 * count: LLVM's abbreviations are runs like 6 x VBR8 or 5 x Fixed32, read without a
 * dispatch per operand. */
static int push_op(D *d, size_t start, uint8_t enc, uint64_t width, uint8_t elt, uint64_t elt_w) {
    if (d->nops > start && enc != ENC_ARRAY && enc != ENC_BLOB) {
        Op *prev = &d->ops[d->nops - 1];
        if (prev->enc == enc && prev->width == width && prev->count < UINT32_MAX) {
            prev->count++;
            return 0;
        }
    }
    if (grow((void **)&d->ops, &d->capops, d->nops + 1, sizeof(Op)))
        return NOMEM(d);
    Op *op = &d->ops[d->nops++];
    op->enc = enc;
    op->width = width;
    op->elt = elt;
    op->elt_w = elt_w;
    op->count = 1;
    return 0;
}

static int idx_push(D *d, IdxVec *list, uint32_t idx) {
    if (grow((void **)&list->v, &list->cap, list->n + 1, sizeof(uint32_t)))
        return NOMEM(d);
    list->v[list->n++] = idx;
    return 0;
}

/* Reads a DEFINE_ABBREV body; sets *idx to the new abbreviation. */
static int read_abbrev_def(D *d, uint32_t *idx) {
    uint64_t num_ops, i = 0, v;
    size_t start = d->nops;
    if (rd_vbr(d, 5, &num_ops))
        return -1;
    while (i < num_ops) {
        if (rd_fixed(d, 1, &v))
            return -1;
        if (v) {
            if (rd_vbr(d, 8, &v) || push_op(d, start, ENC_LITERAL, v, 0, 0))
                return -1;
            i++;
            continue;
        }
        uint64_t enc;
        if (rd_fixed(d, 3, &enc))
            return -1;
        if (enc == ENC_FIXED || enc == ENC_VBR) {
            uint64_t w;
            if (rd_vbr(d, 5, &w))
                return -1;
            if (w == 0) {
                if (push_op(d, start, ENC_LITERAL, 0, 0, 0))
                    return -1;
            } else if (w > 64 || (enc == ENC_VBR && w < 2)) {
                return MALFORMED(d, "bad abbreviation operand width");
            } else if (push_op(d, start, (uint8_t)enc, w, 0, 0)) {
                return -1;
            }
        } else if (enc == ENC_ARRAY) {
            if (num_ops < 2 || i != num_ops - 2)
                return MALFORMED(d, "array must be the next-to-last abbreviation operand");
            if (rd_fixed(d, 1, &v))
                return -1;
            if (v)
                return MALFORMED(d, "array element cannot be a literal");
            uint64_t elt, ew = 0;
            if (rd_fixed(d, 3, &elt))
                return -1;
            if (elt == ENC_FIXED || elt == ENC_VBR) {
                if (rd_vbr(d, 5, &ew))
                    return -1;
                if (ew == 0 || ew > 64 || (elt == ENC_VBR && ew < 2))
                    return MALFORMED(d, "bad array element width");
            } else if (elt != ENC_CHAR6) {
                return MALFORMED(d, "unsupported array element encoding");
            }
            if (push_op(d, start, ENC_ARRAY, 0, (uint8_t)elt, ew))
                return -1;
            i++;
        } else if (enc == ENC_CHAR6) {
            if (push_op(d, start, ENC_CHAR6, 6, 0, 0))
                return -1;
        } else if (enc == ENC_BLOB) {
            if (i != num_ops - 1)
                return MALFORMED(d, "blob must be the last abbreviation operand");
            if (push_op(d, start, ENC_BLOB, 0, 0, 0))
                return -1;
        } else {
            return MALFORMED(d, "unknown abbreviation encoding");
        }
        i++;
    }
    if (d->nops == start || d->ops[start].enc == ENC_ARRAY || d->ops[start].enc == ENC_BLOB)
        return MALFORMED(d, "abbreviation has no scalar record code");
    if (grow((void **)&d->abbrevs, &d->capabbrevs, d->nabbrevs + 1, sizeof(Abbrev)))
        return NOMEM(d);
    if (d->nabbrevs >= UINT32_MAX)
        return MALFORMED(d, "too many abbreviations");
    d->abbrevs[d->nabbrevs].off = start;
    d->abbrevs[d->nabbrevs].n = d->nops - start;
    size_t nvals = 0; /* the scalar values a record of it has */
    for (size_t k = start; k < d->nops; k++)
        if (d->ops[k].enc != ENC_ARRAY && d->ops[k].enc != ENC_BLOB)
            nvals = nvals > ((size_t)-1) - d->ops[k].count ? (size_t)-1 : nvals + d->ops[k].count;
    d->abbrevs[d->nabbrevs].nvals = nvals;
    *idx = (uint32_t)d->nabbrevs++;
    return 0;
}

static BlockInfo *find_info(D *d, uint64_t block_id) {
    uint64_t i;
    return map_get(&d->info_index, block_id, &i) ? &d->info[i] : NULL;
}

static int read_blockinfo(D *d, uint64_t width, uint64_t end_bit) {
    uint64_t outer = d->width;
    long current = -1;
    d->width = width;
    for (;;) {
        uint64_t id;
        if (rd_fixed(d, width, &id))
            return -1;
        if (id == 0) {
            align32(d);
            break;
        }
        if (id == 2) {
            uint32_t idx;
            if (current < 0)
                return MALFORMED(d, "BLOCKINFO abbreviation before SETBID");
            if (read_abbrev_def(d, &idx) || idx_push(d, &d->info[current].list, idx))
                return -1;
        } else if (id == 3) {
            uint64_t code, num, v, first = 0;
            if (rd_vbr(d, 6, &code) || rd_vbr(d, 6, &num) || (num && fits(d, num, 6)))
                return -1;
            for (uint64_t i = 0; i < num; i++) {
                if (rd_vbr(d, 6, &v))
                    return -1;
                if (i == 0)
                    first = v;
            }
            if (code == 1) {
                if (!num)
                    return MALFORMED(d, "empty SETBID record");
                BlockInfo *bi = find_info(d, first);
                if (!bi) {
                    if (grow((void **)&d->info, &d->capinfo, d->ninfo + 1, sizeof(BlockInfo)))
                        return NOMEM(d);
                    if (map_put(&d->info_index, first, d->ninfo))
                        return NOMEM(d);
                    bi = &d->info[d->ninfo++];
                    bi->block_id = first;
                    bi->list.v = NULL;
                    bi->list.n = bi->list.cap = 0;
                }
                current = (long)(bi - d->info);
            }
        } else if (id == 1) {
            return MALFORMED(d, "nested block inside BLOCKINFO");
        } else {
            return MALFORMED(d, "abbreviated record inside BLOCKINFO");
        }
    }
    if (d->pos != end_bit)
        return MALFORMED(d, "BLOCKINFO length word disagrees with its END_BLOCK");
    d->width = outer;
    return 0;
}

/* ---- records -------------------------------------------------------------------------- */

static int read_unabbreviated(D *d) {
    const uint8_t *data = d->data;
    const size_t len = d->len;
    const uint64_t end = d->end;
    Rd r = vbr(data, len, d->pos, end, 6);
    if (r.err)
        return rd_fail(d, r.err);
    d->code = r.val;
    r = vbr(data, len, r.pos, end, 6);
    if (r.err)
        return rd_fail(d, r.err);
    uint64_t num = r.val;
    d->pos = r.pos;
    if (num && fits(d, num, 6))
        return -1;
    if (rec_room(d, (size_t)num)) /* num fits the bits left, so it fits a size_t */
        return -1;
    uint64_t pos = d->pos, *v = d->rec.v;
    size_t n = d->rec.n;
    d->rec0 = n;
    for (uint64_t i = 0; i < num; i++) {
        r = vbr(data, len, pos, end, 6);
        if (r.err)
            return rd_fail(d, r.err);
        v[n++] = r.val;
        pos = r.pos;
    }
    d->pos = pos;
    d->rec.n = n;
    d->has_blob = 0;
    return 0;
}

/* Bits before FAST_MARGIN from the end of the bitstream can be read without checks: one
 * unaligned 8-byte load gives 57 bits, enough for a fixed field of up to 56 bits or a VBR
 * value of one or two chunks of up to 28 bits; anything else (and anything near the end)
 * takes the checked readers, so results and errors stay exactly theirs. */
#define FAST_MARGIN 128

/* A VBR value at pos < fast_end in one or two chunks (width <= 28): 1 and the new position
 * in *pos, or 0 (nothing consumed) when it has more chunks. */
INLINE int vbr_fast(const uint8_t *data, uint64_t *pos, uint64_t width, uint64_t *out) {
    uint64_t x = load_le64(data + (*pos >> 3)) >> (*pos & 7);
    uint64_t hi = (uint64_t)1 << (width - 1), m = (hi << 1) - 1;
    uint64_t c0 = x & m;
    if (!(c0 & hi)) {
        *out = c0;
        *pos += width;
        return 1;
    }
    uint64_t c1 = (x >> width) & m;
    if (!(c1 & hi)) {
        *out = (c0 & (hi - 1)) | ((c1 & (hi - 1)) << (width - 1));
        *pos += 2 * width;
        return 1;
    }
    return 0;
}

/* The hot loop: position, end and output in locals (stores to the operand array could
 * otherwise alias d->pos and force reloads), and not inlined (a compact function of its own
 * keeps them in registers). Each step is a run of ``count`` equal scalar operands, or an
 * array or blob (always the last step). */
static __attribute__((noinline)) int read_abbreviated(D *d, uint64_t abbrev_id) {
    if (abbrev_id - 4 >= d->cur.n)
        return MALFORMED(d, "undefined abbreviation id");
    const Abbrev ab = d->abbrevs[d->cur.v[abbrev_id - 4]];
    const Op *ops = d->ops + ab.off;
    if (rec_room(d, ab.nvals)) /* every scalar; an array makes room for its elements */
        return -1;
    const uint8_t *data = d->data;
    const size_t len = d->len;
    const uint64_t end = d->end;
    const uint64_t fast_end = end > FAST_MARGIN ? end - FAST_MARGIN : 0;
    uint64_t pos = d->pos, *v = d->rec.v;
    size_t n = d->rec.n, start = n;
    int has_blob = 0;
    Rd r;
    /* An if-chain, most frequent first: it predicts better than a jump table here. */
    for (size_t k = 0; k < ab.n; k++) {
        const Op op = ops[k];
        if (op.enc == ENC_VBR) {
            for (uint32_t c = 0; c < op.count; c++) {
                if (pos < fast_end && op.width <= 28 && vbr_fast(data, &pos, op.width, &v[n])) {
                    n++;
                    continue;
                }
                r = vbr(data, len, pos, end, op.width);
                if (r.err)
                    goto bad;
                v[n++] = r.val;
                pos = r.pos;
            }
        } else if (op.enc == ENC_LITERAL) {
            for (uint32_t c = 0; c < op.count; c++)
                v[n++] = op.width;
        } else if (op.enc == ENC_FIXED || op.enc == ENC_CHAR6) {
            /* the first read past the end fails, whichever it is: one check for the run
             * (count <= 2^32 and w <= 64: the product cannot overflow) */
            uint64_t w = op.width, m = mask(w);
            if (pos > end || op.count * w > end - pos)
                goto past;
            for (uint32_t c = 0; c < op.count; c++, pos += w) {
                uint64_t x = pos < fast_end && w <= 56
                                 ? (load_le64(data + (pos >> 3)) >> (pos & 7)) & m
                                 : peek64(data, len, pos) & m;
                v[n++] = op.enc == ENC_FIXED ? x : (uint64_t)(unsigned char)CHAR6[x];
            }
        } else if (op.enc == ENC_ARRAY) {
            r = vbr(data, len, pos, end, 6);
            if (r.err)
                goto bad;
            pos = r.pos;
            uint64_t count = r.val;
            if (!count)
                continue;
            uint64_t ew = op.elt == ENC_CHAR6 ? 6 : op.elt_w;
            /* count <= (end - pos) / ew, without a division for the usual counts */
            if (pos > end || (count >> 32 ? count > (end - pos) / ew : count * ew > end - pos))
                return MALFORMED(d, "array runs past end of bitstream");
            d->rec.n = n;
            if (rec_room(d, (size_t)count)) /* count fits the bits left, so a size_t */
                return -1;
            v = d->rec.v;
            if (op.elt == ENC_VBR) {
                for (uint64_t i = 0; i < count; i++) {
                    if (pos < fast_end && ew <= 28 && vbr_fast(data, &pos, ew, &v[n])) {
                        n++;
                        continue;
                    }
                    r = vbr(data, len, pos, end, ew);
                    if (r.err)
                        goto bad;
                    v[n++] = r.val;
                    pos = r.pos;
                }
            } else if (ew <= 32) {
                /* fixed or char6 elements, all inside the bitstream (checked above): as
                 * many as a 64-bit load holds at a time */
                uint64_t m = mask(ew), per = 64 / ew, left = count;
                int char6 = op.elt == ENC_CHAR6;
                while (left) {
                    uint64_t w = peek64(data, len, pos), k2 = left < per ? left : per;
                    for (uint64_t j = 0; j < k2; j++, w >>= ew)
                        v[n++] = char6 ? (uint64_t)(unsigned char)CHAR6[w & m] : w & m;
                    pos += k2 * ew;
                    left -= k2;
                }
            } else {
                uint64_t m = mask(ew);
                for (uint64_t i = 0; i < count; i++, pos += ew)
                    v[n++] = peek64(data, len, pos) & m;
            }
        } else { /* ENC_BLOB */
            r = vbr(data, len, pos, end, 6);
            if (r.err)
                goto bad;
            uint64_t length = r.val;
            pos = align32_pos(r.pos);
            if (pos > end || length > (end - pos) / 8)
                return MALFORMED(d, "blob runs past end of bitstream");
            has_blob = 1;
            d->blob_off = (size_t)(pos >> 3);
            d->blob_len = (size_t)length;
            pos = align32_pos(pos + length * 8);
        }
    }
    d->pos = pos;
    d->rec.n = n;
    d->has_blob = has_blob;
    if (pos > end)
        return MALFORMED(d, "read past end of bitstream");
    /* vals[0] is the code: the first operand is never an array or a blob. */
    d->code = v[start];
    d->rec0 = start + 1;
    return 0;
past:
    return MALFORMED(d, "read past end of bitstream");
bad:
    return rd_fail(d, r.err);
}

static void pop_frame(D *d) {
    Frame *f = &d->stack[--d->depth];
    free(d->cur.v);
    d->cur = f->abbrevs;
    d->width = f->width;
    d->pos = f->end_bit;
    d->block_id = f->block_id;
}

/* The cursor's advance(): one ENTER, END, RECORD or EOF; BLOCKINFO is consumed here. */
static int advance(D *d, int *kind) {
    for (;;) {
        if (!d->depth && (d->pos > d->end || d->end - d->pos < 32)) {
            *kind = K_EOF;
            return 0;
        }
        uint64_t id;
        if (rd_fixed(d, d->width, &id))
            return -1;
        if (id >= 3) {
            if (!d->depth)
                return MALFORMED(d, "record at top level");
            if (!d->keep)
                d->rec.n = 0;
            if (id == 3 ? read_unabbreviated(d) : read_abbreviated(d, id))
                return -1;
            d->block_id = d->stack[d->depth - 1].block_id;
            *kind = K_RECORD;
            return 0;
        }
        if (id == 1) {
            uint64_t block_id, new_width, num_words;
            if (rd_vbr(d, 8, &block_id) || rd_vbr(d, 4, &new_width))
                return -1;
            align32(d);
            if (rd_fixed(d, 32, &num_words))
                return -1;
            uint64_t end_bit = d->pos + num_words * 32;
            if (end_bit > d->end || new_width < 1 || new_width > 32)
                return MALFORMED(d, "malformed block header");
            if (block_id == 0) {
                if (read_blockinfo(d, new_width, end_bit))
                    return -1;
                continue;
            }
            if (grow((void **)&d->stack, &d->capstack, d->depth + 1, sizeof(Frame)))
                return NOMEM(d);
            IdxVec fresh = {NULL, 0, 0};
            BlockInfo *bi = find_info(d, block_id);
            if (bi && bi->list.n) {
                if (grow((void **)&fresh.v, &fresh.cap, bi->list.n, sizeof(uint32_t))) {
                    return NOMEM(d);
                }
                memcpy(fresh.v, bi->list.v, bi->list.n * sizeof(uint32_t));
                fresh.n = bi->list.n;
            }
            Frame *f = &d->stack[d->depth++];
            f->block_id = block_id;
            f->width = d->width;
            f->abbrevs = d->cur;
            f->end_bit = end_bit;
            d->cur = fresh;
            d->width = new_width;
            d->block_id = block_id;
            *kind = K_ENTER;
            return 0;
        }
        if (id == 0) {
            if (!d->depth)
                return MALFORMED(d, "END_BLOCK at top level");
            align32(d);
            if (d->pos != d->stack[d->depth - 1].end_bit)
                return MALFORMED(d, "block length word disagrees with its END_BLOCK");
            pop_frame(d);
            *kind = K_END;
            return 0;
        }
        /* DEFINE_ABBREV */
        if (!d->depth)
            return MALFORMED(d, "DEFINE_ABBREV at top level");
        uint32_t idx;
        if (read_abbrev_def(d, &idx) || idx_push(d, &d->cur, idx))
            return -1;
    }
}

/* ---- flat blocks ---------------------------------------------------------------------- */

typedef struct {
    Rec *v;
    size_t n, cap;
    U64Vec ops;
} Records;

static void records_free(Records *r) {
    free(r->v);
    free(r->ops.v);
}

/* The records of the block just entered; a nested block is not supported. The cursor
 * decodes them straight into out->ops (keep mode), so nothing is copied. */
static int flat_records(D *d, Records *out, const char *nested) {
    out->n = 0;
    out->ops.n = 0;
    U64Vec outer = d->rec;
    d->rec = out->ops;
    d->keep = 1;
    int rc = 0;
    for (;;) {
        /* An abbreviated record (nearly every entry) is read right here, exactly as
         * advance() would read it (inside a block, with the same checks); anything else,
         * or an id too near the end, goes through advance(). */
        uint64_t w = d->width;
        uint64_t id = d->pos <= d->end && d->end - d->pos >= w
                          ? peek64(d->data, d->len, d->pos) & mask(w)
                          : 0;
        if (id >= 4) {
            d->pos += w;
            if (read_abbreviated(d, id)) {
                rc = -1;
                break;
            }
        } else {
            int kind;
            if (advance(d, &kind)) {
                rc = -1;
                break;
            }
            if (kind == K_END)
                break;
            if (kind == K_ENTER) {
                rc = UNSUPPORTED(d, nested);
                break;
            }
            if (kind == K_EOF) {
                rc = MALFORMED(d, "unterminated block");
                break;
            }
        }
        if (out->n == out->cap && grow((void **)&out->v, &out->cap, out->n + 1, sizeof(Rec))) {
            rc = NOMEM(d);
            break;
        }
        Rec *r = &out->v[out->n++];
        r->code = d->code;
        r->off = d->rec0;
        r->n = d->rec.n - d->rec0;
        r->has_blob = d->has_blob;
        r->blob_off = d->blob_off;
        r->blob_len = d->blob_len;
    }
    out->ops = d->rec;
    d->rec = outer;
    d->keep = 0;
    return rc;
}

/* ---- canonical text ------------------------------------------------------------------- */

/* What a part is: every part of a kind starts with the kind's literal prefix, and these
 * prefixes are in sorted order and none is a prefix of another, so the kind decides the order
 * of parts of different kinds: only parts of one kind are sorted as strings, past the prefix. */
enum {
    P_GUIDS,           /* ('guids', (            */
    P_MODULE,          /* ('module',             */
    P_MODULE_VERSION,  /* ('module-version', (   */
    P_STRTAB,          /* ('strtab',             */
    P_SUMMARY,         /* ('summary', (          */
    P_SUMMARY_RECORD,  /* ('summary-record',     */
    P_SUMMARY_VERSION, /* ('summary-version', 12) */
    P_KINDS
};
static const size_t KIND_PREFIX[P_KINDS] = {11, 11, 20, 11, 13, 19, 23};

typedef struct {
    Buf text;      /* all parts, back to back */
    size_t *off;   /* part i is text[off[i] : off[i + 1]) */
    uint8_t *kind; /* part i's P_* kind */
    size_t n, cap, capk;
} Parts;

/* Every text buffer keeps SLACK spare bytes past what was asked for: the writers below copy
 * short strings as whole blocks (up to 48 bytes) and GUIDs as 24 bytes, so they may write
 * (and their sources be read) a little past the end of the text. */
#define SLACK 64

/* base + k * per, saturated (a huge bound then fails as out of memory in room()). */
static size_t span(size_t base, size_t k, size_t per) {
    size_t cap = ((size_t)-1) / 4;
    if (k > (cap - base) / per)
        return cap;
    return base + k * per;
}

static char *room_slow(D *d, Buf *b, size_t n) {
    if (n > ((size_t)-1) / 4 - b->n - SLACK ||
        grow((void **)&b->v, &b->cap, b->n + n + SLACK, 1)) {
        NOMEM(d);
        return NULL;
    }
    return b->v + b->n;
}

/* Where n more bytes go in b (n <= SIZE_MAX / 4); NULL when out of memory. Write through
 * the pointer, then set b->n to the end of what was written. */
INLINE char *room(D *d, Buf *b, size_t n) {
    if (b->cap - b->n >= n + SLACK)
        return b->v + b->n;
    return room_slow(d, b, n);
}

/* A literal: constant length, so the copy is a few moves. */
#define W(p, lit) (memcpy((p), (lit), sizeof(lit) - 1), (p) + (sizeof(lit) - 1))

/* Copies n bytes; short strings (both ends keep SLACK) as up to three 16-byte blocks. */
INLINE char *w_copy(char *p, const char *s, size_t n) {
    if (n <= 48) {
        memcpy(p, s, 16);
        if (n > 16) {
            memcpy(p + 16, s + 16, 16);
            if (n > 32)
                memcpy(p + 32, s + 32, 16);
        }
    } else {
        memcpy(p, s, n);
    }
    return p + n;
}

static const char DIGITS2[] = "0001020304050607080910111213141516171819"
                              "2021222324252627282930313233343536373839"
                              "4041424344454647484950515253545556575859"
                              "6061626364656667686970717273747576777879"
                              "8081828384858687888990919293949596979899";

INLINE void put2(char *p, uint32_t v) { /* v < 100, two digits */
    memcpy(p, DIGITS2 + 2 * v, 2);
}

INLINE void put4(char *p, uint32_t v) { /* v < 10^4, four digits */
    put2(p, v / 100);
    put2(p + 2, v % 100);
}

INLINE void put8(char *p, uint32_t v) { /* v < 10^8, eight digits */
    put4(p, v / 10000);
    put4(p + 4, v % 10000);
}

/* Decimal text of v < 10^4 (no leading zeros); returns the end. */
INLINE char *w_upto4(char *p, uint32_t v) {
    if (v < 100) {
        if (v < 10) {
            *p = (char)('0' + v);
            return p + 1;
        }
        put2(p, v);
        return p + 2;
    }
    if (v < 1000) {
        *p = (char)('0' + v / 100);
        put2(p + 1, v % 100);
        return p + 3;
    }
    put4(p, v);
    return p + 4;
}

INLINE char *w_upto8(char *p, uint32_t v) { /* v < 10^8 */
    if (v < 10000)
        return w_upto4(p, v);
    p = w_upto4(p, v / 10000);
    put4(p, v % 10000);
    return p + 4;
}

/* Decimal text of v >= 100: 8-digit groups, each from four digit pairs (divisions by
 * constants only, which compile to multiplications). Returns the end. */
static char *w_u64_long(char *p, uint64_t v) {
    if (v < 100000000)
        return w_upto8(p, (uint32_t)v);
    if (v < 10000000000000000ull) {
        uint64_t hi = v / 100000000;
        p = w_upto8(p, (uint32_t)hi);
        put8(p, (uint32_t)(v - hi * 100000000));
        return p + 8;
    }
    uint64_t hi = v / 10000000000000000ull, rest = v - hi * 10000000000000000ull;
    uint32_t mid = (uint32_t)(rest / 100000000);
    p = w_upto4(p, (uint32_t)hi); /* hi <= 1844 */
    put8(p, mid);
    put8(p + 8, (uint32_t)(rest - (uint64_t)mid * 100000000));
    return p + 16;
}

/* Decimal text of v (at most 20 bytes); returns the end. */
INLINE char *w_u64(char *p, uint64_t v) {
    if (v < 10) {
        *p = (char)('0' + v);
        return p + 1;
    }
    if (v < 100) {
        memcpy(p, DIGITS2 + 2 * v, 2);
        return p + 2;
    }
    return w_u64_long(p, v);
}

/* repr() of a tuple of ints: at most 4 + 22 * n bytes. */
static char *w_tuple(char *p, const uint64_t *v, size_t n) {
    *p++ = '(';
    for (size_t i = 0; i < n; i++) {
        if (i)
            p = W(p, ", ");
        p = w_u64(p, v[i]);
    }
    return n == 1 ? W(p, ",)") : W(p, ")");
}

#define TUPLE_ROOM(n) span(4, (n), 22)

static int part_begin(D *d, Parts *p, int kind) {
    if ((p->cap - p->n < 2 && grow((void **)&p->off, &p->cap, p->n + 2, sizeof(size_t))) ||
        (p->capk == p->n && grow((void **)&p->kind, &p->capk, p->n + 1, 1)))
        return NOMEM(d);
    if (p->n == 0)
        p->off[0] = p->text.n;
    p->kind[p->n] = (uint8_t)kind;
    return 0;
}

static void part_end(Parts *p) {
    p->off[++p->n] = p->text.n;
}

/* ---- sorting -------------------------------------------------------------------------- */

typedef struct {
    uint64_t key;
    size_t idx;
} SK;

static void sk_insertion(SK *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        SK x = a[i];
        size_t j = i;
        while (j && a[j - 1].key > x.key) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* Sorts a[0:n) by key (tmp[0:n) is scratch): an MSD radix sort on the keys' varying bytes.
 * A pass buckets on the topmost bytes that differ between keys, each by its range of
 * values (keys are mostly ASCII text: a digit byte has 10 values, not 256), as many bytes
 * as about 4 buckets an item allow; a bucket's keys then share those bytes, so at most 8
 * levels, O(n) each whatever the keys (no quicksort worst case for crafted shards). Equal
 * keys end it at once; small buckets are insertion-sorted. */
#define SK_MAXB 512
static void sk_sort(SK *a, SK *tmp, size_t n) {
    if (n <= 16) {
        sk_insertion(a, n);
        return;
    }
    uint64_t k0 = a[0].key, diff = 0;
    for (size_t i = 1; i < n; i++)
        diff |= a[i].key ^ k0;
    if (!diff)
        return;
    size_t limit = n < SK_MAXB / 4 ? (n < 16 ? 64 : 4 * n) : SK_MAXB;
    unsigned sh[8], nb = 0;
    uint64_t lo[8], mul[8];
    size_t nbuckets = 1;
    for (int j = 7; j >= 0; j--) {
        unsigned s = 8 * (unsigned)j;
        if (!((diff >> s) & 0xff))
            continue; /* the same in every key */
        uint64_t mn = 0xff, mx = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t b = (a[i].key >> s) & 0xff;
            mn = b < mn ? b : mn;
            mx = b > mx ? b : mx;
        }
        size_t r = (size_t)(mx - mn + 1);
        if (nb && nbuckets * r > limit)
            break;
        sh[nb] = s;
        lo[nb] = mn;
        mul[nb] = r;
        nbuckets *= r;
        nb++;
    }
    size_t count[SK_MAXB + 1];
    memset(count, 0, (nbuckets + 1) * sizeof(size_t));
#define SK_BUCKET(key, out)                                                                   \
    do {                                                                                      \
        size_t b_ = 0;                                                                        \
        for (unsigned q_ = 0; q_ < nb; q_++)                                                  \
            b_ = b_ * mul[q_] + (size_t)((((key) >> sh[q_]) & 0xff) - lo[q_]);                \
        (out) = b_;                                                                           \
    } while (0)
    for (size_t i = 0; i < n; i++) {
        size_t b;
        SK_BUCKET(a[i].key, b);
        count[b + 1]++;
    }
    for (size_t b = 0; b < nbuckets; b++) /* count[b]: where bucket b starts */
        count[b + 1] += count[b];
    for (size_t i = 0; i < n; i++) {
        size_t b;
        SK_BUCKET(a[i].key, b);
        tmp[count[b]++] = a[i];
    }
#undef SK_BUCKET
    memcpy(a, tmp, n * sizeof(SK));
    for (size_t b = 0, s = 0; b < nbuckets; b++) { /* count[b]: where bucket b ends */
        if (count[b] - s > 1)
            sk_sort(a + s, tmp + s, count[b] - s);
        s = count[b];
    }
}

/* The first byte (>= depth) where strings i and j differ, or lim: 8 bytes at a time. */
static size_t common_upto(const char *s, const char *t, size_t depth, size_t lim) {
    size_t p = depth;
    while (p < lim) {
        uint64_t x = load_le64(s + p) ^ load_le64(t + p);
        if (x) {
            p += (size_t)__builtin_ctzll(x) / 8;
            break;
        }
        p += 8;
    }
    return p < lim ? p : lim;
}

/* Bytes [depth, depth + 7) of a string as a big-endian number (zero past its end) in the top
 * 56 bits, and min(bytes left, 8) in the low 8: comparing keys compares the strings there
 * exactly like memcmp-then-length; equal keys with a low byte under 8 mean equal strings. */
INLINE uint64_t chunk_key(const char *s, size_t len, size_t depth) {
    size_t rem = len - depth;
    uint64_t x = __builtin_bswap64(load_le64(s + depth));
    if (rem < 7)
        x = rem ? x & (~(uint64_t)0 << (64 - 8 * rem)) : 0;
    return (x & ~(uint64_t)0xff) | (rem < 8 ? rem : 8);
}

typedef struct {
    size_t lo, n, depth;
} Task;

/* Scratch of the sorts, kept with the other buffers from call to call. */
typedef struct {
    SK *a, *tmp;
    Task *tasks;
    size_t capa, capt, captasks;
} SortWs;

/* Room for sorting n items; -1 when out of memory. */
static int ws_room(SortWs *w, size_t n) {
    return grow((void **)&w->a, &w->capa, n, sizeof(SK)) ||
           grow((void **)&w->tmp, &w->capt, n, sizeof(SK)) ||
           grow((void **)&w->tasks, &w->captasks, n / 2 + 1, sizeof(Task));
}

static void ws_free(SortWs *w) {
    free(w->a);
    free(w->tmp);
    free(w->tasks);
}

/* Sorts idx[0:n) (string numbers) like the strings text[off[i]:off[i + 1]) by memcmp, then
 * length (the order the reference's list.sort() gives the parts); the strings share their
 * first ``depth`` bytes. An MSD sort: by 7-byte chunk keys, then each run of equal keys by
 * the next chunk; the prefix a run shares is skipped first. text keeps 8 readable bytes past
 * its end. -1 when out of memory. */
static int sort_strings(SortWs *w, const char *text, const size_t *off, size_t *idx, size_t n,
                        size_t depth) {
    if (n < 2)
        return 0;
    if (ws_room(w, n))
        return -1;
    SK *a = w->a, *tmp = w->tmp;
    Task *stack = w->tasks; /* pending tasks: disjoint, >= 2 items each */
    for (size_t i = 0; i < n; i++)
        a[i].idx = idx[i];
    size_t top = 0;
    Task first = {0, n, depth};
    stack[top++] = first;
    while (top) {
        Task t = stack[--top];
        SK *x = a + t.lo;
        size_t m = t.n;
        depth = t.depth;
        const char *s0 = text + off[x[0].idx];
        size_t lcp = off[x[0].idx + 1] - off[x[0].idx];
        for (size_t i = 1; i < m && lcp > depth; i++) {
            size_t k = x[i].idx, len = off[k + 1] - off[k];
            lcp = common_upto(s0, text + off[k], depth, len < lcp ? len : lcp);
        }
        depth = lcp;
        for (size_t i = 0; i < m; i++) {
            size_t k = x[i].idx;
            x[i].key = chunk_key(text + off[k], off[k + 1] - off[k], depth);
        }
        sk_sort(x, tmp, m);
        for (size_t i = 0; i < m;) {
            size_t j = i + 1;
            while (j < m && x[j].key == x[i].key)
                j++;
            if (j - i > 1 && (x[i].key & 0xff) == 8) {
                Task next = {t.lo + i, j - i, depth + 7};
                stack[top++] = next;
            }
            i = j;
        }
    }
    for (size_t i = 0; i < n; i++)
        idx[i] = a[i].idx;
    return 0;
}

/* ---- the shard -------------------------------------------------------------------------- */

#define MODULE_BLOCK 8
#define MODULE_STRTAB_BLOCK 19
#define GLOBALVAL_SUMMARY_BLOCK 20
#define STRTAB_BLOCK 23

typedef struct {
    uint64_t modid;
    size_t off, len; /* repr(name) as UTF-8 (surrogatepass): mtext[off : off + len] */
    int has_hash;
    uint64_t hash[5];
} Module;

/* A GUID's text, formatted once: ", " then the decimal digits at t[2:], their count in t[31]
 * (copied as 24 bytes: with or without the separator in front). */
typedef struct {
    char t[32];
} Slot;

typedef struct {
    D d;
    PyObject *module_digest;
    PyObject *own, *known; /* the job's own paths (a set) and path -> digest (a dict), or NULL */
    Parts parts;
    Module *mods;
    size_t nmods, capmods;
    int have_modules;
    IdIndex mod_index; /* module id -> index in mods */
    Buf mtext;         /* every module's repr, back to back */
    size_t max_mlen;   /* the longest of them */
    Buf scratch;       /* a module path */
    IdIndex guids;     /* value id -> index in slots */
    Slot *slots;
    uint64_t *gvals;
    size_t ng, capslots, capg;
    Records mst, summ, st; /* the flat blocks' records */
    Buf pending;           /* prefix records waiting for their summary record */
    SortWs ws;
    size_t *order, *moff;  /* sort order; module text offsets */
    size_t caporder, capmoff;
} Canon;

static const Module *find_module(const Canon *c, uint64_t modid) {
    size_t i;
    return index_get(&c->mod_index, modid, &i) ? &c->mods[i] : NULL;
}

/* Text of plain printable ASCII, without quote or backslash: repr() only adds quotes. */
static int plain_text(const char *s, size_t n) {
    unsigned odd = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        odd |= (ch < 0x20) | (ch > 0x7e) | (ch == '\'') | (ch == '\\');
    }
    return !odd;
}

/* Appends the UTF-8 (surrogatepass) of repr("p:" + path) (digest None) or repr("d:" +
 * str(digest)) to mtext. Plain text (the usual path, or a hex digest) is quoted directly;
 * anything else goes through Python exactly as the reference does. */
static int module_repr(Canon *c, const char *path, size_t plen, int plain_path, PyObject *spath,
                       PyObject *digest) {
    D *d = &c->d;
    const char *s = NULL;
    Py_ssize_t sn = 0;
    char tag = 'p';
    int plain = 0;
    if (digest == Py_None) {
        s = path;
        sn = (Py_ssize_t)plen;
        plain = plain_path;
    } else if (PyUnicode_CheckExact(digest)) { /* str(digest) is digest itself */
        tag = 'd';
        s = PyUnicode_AsUTF8AndSize(digest, &sn);
        if (!s)
            PyErr_Clear(); /* lone surrogates: the general path below escapes them */
        plain = s && plain_text(s, (size_t)sn);
    }
    if (plain) {
        char *p = room(d, &c->mtext, (size_t)sn + 4);
        if (!p)
            return -1;
        p[0] = '\'';
        p[1] = tag;
        p[2] = ':';
        memcpy(p + 3, s, (size_t)sn);
        p[3 + sn] = '\'';
        c->mtext.n += (size_t)sn + 4;
        return 0;
    }
    PyObject *name = digest == Py_None ? PyUnicode_FromFormat("p:%U", spath)
                                       : PyUnicode_FromFormat("d:%S", digest);
    if (!name)
        return fail(d, ST_PYERR, "");
    PyObject *rep = PyObject_Repr(name);
    Py_DECREF(name);
    if (!rep)
        return fail(d, ST_PYERR, "");
    PyObject *utf8 = PyUnicode_AsEncodedString(rep, "utf-8", "surrogatepass");
    Py_DECREF(rep);
    if (!utf8)
        return fail(d, ST_PYERR, "");
    size_t n = (size_t)PyBytes_GET_SIZE(utf8);
    char *p = n <= ((size_t)-1) / 4 ? room(d, &c->mtext, n) : (NOMEM(d), NULL);
    if (p) {
        memcpy(p, PyBytes_AS_STRING(utf8), n);
        c->mtext.n += n;
    }
    Py_DECREF(utf8);
    return p ? 0 : -1;
}

static int module_strtab(Canon *c, const Records *r) {
    D *d = &c->d;
    Module *last = NULL;
    for (size_t i = 0; i < r->n; i++) {
        const Rec *rec = &r->v[i];
        const uint64_t *ops = r->ops.v + rec->off;
        if (rec->has_blob)
            return UNSUPPORTED(d, "blob in MODULE_STRTAB_BLOCK");
        if (rec->code == 1) {
            if (!rec->n)
                return UNSUPPORTED(d, "empty MODULE_STRTAB entry");
            if (find_module(c, ops[0]))
                return UNSUPPORTED(d, "module id defined twice");
            /* one branch-free pass: the path's bytes, whether any operand is over 255, and
             * whether the path is plain text (see plain_text) */
            size_t plen = rec->n - 1;
            c->scratch.n = 0;
            char *path = room(d, &c->scratch, plen);
            if (!path)
                return -1;
            uint64_t over = 0;
            unsigned odd = 0;
            for (size_t k = 0; k < plen; k++) {
                uint64_t ch = ops[k + 1];
                over |= ch >> 8;
                odd |= (ch < 0x20) | (ch > 0x7e) | (ch == '\'') | (ch == '\\');
                path[k] = (char)ch;
            }
            if (over)
                return UNSUPPORTED(d, "module path is not a byte string");
            PyObject *spath = PyUnicode_DecodeUTF8(path, (Py_ssize_t)plen, "surrogateescape");
            if (!spath)
                return fail(d, ST_PYERR, "");
            PyObject *digest = NULL;
            if (c->own) { /* a path of the job's own, as it spells it: no Python call */
                int mine = PySet_Contains(c->own, spath);
                PyObject *found = mine > 0 ? PyDict_GetItemWithError(c->known, spath) : NULL;
                if (mine < 0 || (!found && PyErr_Occurred())) {
                    Py_DECREF(spath);
                    return fail(d, ST_PYERR, "");
                }
                if (found && PyUnicode_CheckExact(found)) {
                    digest = found;
                    Py_INCREF(digest);
                }
            }
            if (!digest)
                digest = PyObject_CallOneArg(c->module_digest, spath);
            if (!digest) {
                Py_DECREF(spath);
                return fail(d, ST_PYERR, "");
            }
            size_t start = c->mtext.n;
            /* path stays valid: module_repr only grows mtext */
            int bad = module_repr(c, path, plen, !odd, spath, digest);
            Py_DECREF(digest);
            Py_DECREF(spath);
            if (bad)
                return -1;
            if (grow((void **)&c->mods, &c->capmods, c->nmods + 1, sizeof(Module)))
                return NOMEM(d);
            if (index_put(&c->mod_index, ops[0], c->nmods))
                return NOMEM(d);
            last = &c->mods[c->nmods++];
            last->modid = ops[0];
            last->off = start;
            last->len = c->mtext.n - start;
            last->has_hash = 0;
            if (last->len > c->max_mlen)
                c->max_mlen = last->len;
        } else if (rec->code == 2) {
            if (!last || last->has_hash || rec->n != 5)
                return UNSUPPORTED(d, "MODULE_STRTAB hash without a module");
            last->has_hash = 1;
            memcpy(last->hash, ops, sizeof last->hash);
        } else {
            return UNSUPPORTED(d, "unknown MODULE_STRTAB record code");
        }
    }
    /* Two paths with one content digest: equal names (repr is injective). The reprs lie
     * back to back in mtext: sorted, equal ones are neighbours. */
    if (c->nmods > 1) {
        if (grow((void **)&c->moff, &c->capmoff, c->nmods + 1, sizeof(size_t)) ||
            grow((void **)&c->order, &c->caporder, c->nmods, sizeof(size_t)))
            return NOMEM(d);
        size_t *off = c->moff, *order = c->order;
        for (size_t i = 0; i < c->nmods; i++) {
            off[i] = c->mods[i].off;
            order[i] = i;
        }
        off[c->nmods] = c->mtext.n;
        if (sort_strings(&c->ws, c->mtext.v, off, order, c->nmods, 0))
            return NOMEM(d);
        int dup = 0;
        for (size_t k = 1; !dup && k < c->nmods; k++) {
            const Module *a = &c->mods[order[k - 1]], *b = &c->mods[order[k]];
            dup = a->len == b->len && !memcmp(c->mtext.v + a->off, c->mtext.v + b->off, a->len);
        }
        if (dup)
            return UNSUPPORTED(d, "two module paths share one content digest");
    }
    Buf *t = &c->parts.text;
    for (size_t i = 0; i < c->nmods; i++) {
        const Module *m = &c->mods[i];
        char *p;
        if (part_begin(d, &c->parts, P_MODULE) || !(p = room(d, t, 32 + m->len + TUPLE_ROOM(5))))
            return -1;
        p = W(p, "('module', ");
        p = w_copy(p, c->mtext.v + m->off, m->len);
        p = W(p, ", ");
        p = m->has_hash ? w_tuple(p, m->hash, 5) : W(p, "None");
        p = W(p, ")");
        t->n = (size_t)(p - t->v);
        part_end(&c->parts);
    }
    c->have_modules = 1;
    return 0;
}

/* The GUID of value id ``id``, with ", " in front when sep; NULL when the id has none. */
INLINE char *w_guid(Canon *c, char *p, uint64_t id, int sep) {
    size_t i;
    if (!index_get(&c->guids, id, &i)) {
        UNSUPPORTED(&c->d, "value id has no VALUE_GUID");
        return NULL;
    }
    const char *s = c->slots[i].t;
    size_t n = (unsigned char)s[31];
    if (sep) {
        memcpy(p, s, 24);
        return p + 2 + n;
    }
    memcpy(p, s + 2, 24);
    return p + n;
}

/* The module's repr; NULL when the id is not in MODULE_STRTAB. */
INLINE char *w_module(Canon *c, char *p, uint64_t modid) {
    const Module *m = find_module(c, modid);
    if (!m) {
        UNSUPPORTED(&c->d, "module id not in MODULE_STRTAB");
        return NULL;
    }
    return w_copy(p, c->mtext.v + m->off, m->len);
}

/* repr() of a tuple of GUIDs for the given value ids. */
static char *w_guid_tuple(Canon *c, char *p, const uint64_t *ids, size_t n) {
    *p++ = '(';
    for (size_t i = 0; i < n; i++)
        if (!(p = w_guid(c, p, ids[i], i != 0)))
            return NULL;
    return n == 1 ? W(p, ",)") : W(p, ")");
}

/* Room for one summary record's text: a module repr and 32 bytes an operand cover it. */
static size_t record_room(const Canon *c, size_t n) {
    return span(96 + c->max_mlen, n, 32);
}

/* FS_COMBINED[_PROFILE] as the reference's _function() tuple; the checks come first, then
 * the text in the order that decides which missing id is reported. */
static char *w_function(Canon *c, char *p, uint64_t code, const uint64_t *ops, size_t n) {
    D *d = &c->d;
    if (n < 9) {
        UNSUPPORTED(d, "short function summary record");
        return NULL;
    }
    uint64_t numrefs = ops[6], rorefs = ops[7], worefs = ops[8];
    if (numrefs > n - 9 || rorefs > numrefs || worefs > numrefs - rorefs) {
        UNSUPPORTED(d, "function summary ref counts do not fit the record");
        return NULL;
    }
    size_t calls_start = 9 + (size_t)numrefs;
    const uint64_t *tail = ops + calls_start;
    size_t ntail = n - calls_start;
    if (code == 5 && ntail % 2) {
        UNSUPPORTED(d, "odd callee list in COMBINED_PROFILE");
        return NULL;
    }
    *p++ = '(';
    p = w_u64(p, code);
    p = W(p, ", ");
    if (!(p = w_guid(c, p, ops[0], 0)))
        return NULL;
    p = W(p, ", ");
    if (!(p = w_module(c, p, ops[1])))
        return NULL;
    for (int k = 2; k <= 5; k++) {
        p = W(p, ", ");
        p = w_u64(p, ops[k]);
    }
    p = W(p, ", ");
    p = w_u64(p, rorefs);
    p = W(p, ", ");
    p = w_u64(p, worefs);
    p = W(p, ", ");
    if (!(p = w_guid_tuple(c, p, ops + 9, (size_t)numrefs)))
        return NULL;
    p = W(p, ", ");
    if (code == 5) {
        size_t ncalls = ntail / 2;
        *p++ = '(';
        for (size_t i = 0; i < ncalls; i++) {
            p = i ? W(p, ", (") : W(p, "(");
            if (!(p = w_guid(c, p, tail[2 * i], 0)))
                return NULL;
            p = W(p, ", ");
            p = w_u64(p, tail[2 * i + 1]);
            *p++ = ')';
        }
        p = ncalls == 1 ? W(p, ",)") : W(p, ")");
    } else if (!(p = w_guid_tuple(c, p, tail, ntail))) {
        return NULL;
    }
    *p++ = ')';
    return p;
}

static int is_prefix(uint64_t code) {
    return code >= 11 && code <= 15;
}

/* Records a VALUE_GUID mapping: the GUID's text goes in a new slot. */
static int add_guid(Canon *c, uint64_t valueid, uint64_t g) {
    D *d = &c->d;
    if (grow((void **)&c->slots, &c->capslots, c->ng + 1, sizeof(Slot)) ||
        grow((void **)&c->gvals, &c->capg, c->ng + 1, sizeof(uint64_t)) ||
        index_put(&c->guids, valueid, c->ng))
        return NOMEM(d);
    Slot *s = &c->slots[c->ng];
    memset(s, 0, sizeof *s);
    s->t[0] = ',';
    s->t[1] = ' ';
    s->t[31] = (char)(w_u64(s->t + 2, g) - (s->t + 2));
    c->gvals[c->ng++] = g;
    return 0;
}

static int summary(Canon *c, const Records *r) {
    D *d = &c->d;
    Buf *t = &c->parts.text;
    int have_version = 0;
    uint64_t version = 0;
    for (size_t i = 0; i < r->n; i++) {
        const Rec *rec = &r->v[i];
        const uint64_t *ops = r->ops.v + rec->off;
        if (rec->has_blob)
            return UNSUPPORTED(d, "blob in summary record");
        if (rec->code == 10) {
            if (have_version || rec->n != 1)
                return UNSUPPORTED(d, "repeated or malformed summary VERSION");
            have_version = 1;
            version = ops[0];
        } else if (rec->code == 16) {
            uint64_t g;
            if (rec->n == 3) {
                if (ops[1] >> 32) {
                    d->big = 1; /* the GUID would not fit 64 bits */
                    return MALFORMED(d, "GUID over 64 bits");
                }
                g = (ops[1] << 32) | ops[2];
            } else if (rec->n == 2) {
                g = ops[1];
            } else {
                return UNSUPPORTED(d, "malformed VALUE_GUID record");
            }
            size_t old;
            if (index_get(&c->guids, ops[0], &old))
                return UNSUPPORTED(d, "value id mapped twice");
            if (add_guid(c, ops[0], g))
                return -1;
        }
    }
    if (!have_version)
        return UNSUPPORTED(d, "summary block has no VERSION record");
    if (version != 12)
        return UNSUPPORTED(d, "unsupported summary version");
    char *p;
    if (part_begin(d, &c->parts, P_SUMMARY_VERSION) || !(p = room(d, t, 32)))
        return -1;
    p = W(p, "('summary-version', 12)");
    t->n = (size_t)(p - t->v);
    part_end(&c->parts);
    {
        /* the GUIDs in order, each from its slot */
        size_t k = c->ng;
        int bad = ws_room(&c->ws, k);
        SK *sorted = c->ws.a, *tmp = c->ws.tmp;
        if (bad) {
            NOMEM(d);
        } else {
            for (size_t i = 0; i < k; i++) {
                sorted[i].key = c->gvals[i];
                sorted[i].idx = i;
            }
            sk_sort(sorted, tmp, k);
            bad = part_begin(d, &c->parts, P_GUIDS) || !(p = room(d, t, span(16, k, 22)));
        }
        if (!bad) {
            p = W(p, "('guids', (");
            for (size_t i = 0; i < k; i++) {
                const char *s = c->slots[sorted[i].idx].t;
                size_t n = (unsigned char)s[31];
                memcpy(p, i ? s : s + 2, 24);
                p += i ? n + 2 : n;
            }
            p = k == 1 ? W(p, ",))") : W(p, "))");
            t->n = (size_t)(p - t->v);
            part_end(&c->parts);
        }
        if (bad)
            return -1;
    }
    /* Groups: pending prefix records + one summary record (+ ORIGINAL_NAME records). The open
     * group is the last part of the text, written in place: nothing else is written to the
     * text while it is open (prefix records wait in ``pending``; FLAGS and BLOCK_COUNT parts,
     * which cannot fail, are written after the loop). */
    Buf pending = c->pending; /* a kept buffer, emptied */
    pending.n = 0;
    size_t npending = 0;
    size_t ngroup = 0; /* items in the open group; 0: no group open */
    int rc = 0;
#define CHECK(x)        \
    do {                \
        if (x) {        \
            rc = -1;    \
            goto done;  \
        }               \
    } while (0)
#define CLOSE_GROUP()                                                                     \
    do {                                                                                  \
        if (ngroup) {                                                                     \
            CHECK(!(p = room(d, t, 3)));                                                  \
            p = ngroup == 1 ? W(p, ",))") : W(p, "))");                                   \
            t->n = (size_t)(p - t->v);                                                    \
            part_end(&c->parts);                                                          \
        }                                                                                 \
        ngroup = 0;                                                                       \
    } while (0)
    for (size_t i = 0; i < r->n; i++) {
        const Rec *rec = &r->v[i];
        const uint64_t *ops = r->ops.v + rec->off;
        uint64_t code = rec->code;
        size_t n = rec->n;
        if (code == 10 || code == 16 || code == 20 || code == 24)
            continue;
        if (is_prefix(code)) {
            CHECK(!(p = room(d, &pending, span(32, n, 22))));
            if (npending)
                p = W(p, ", ");
            *p++ = '(';
            p = w_u64(p, code);
            p = W(p, ", ");
            p = w_tuple(p, ops, n);
            *p++ = ')';
            pending.n = (size_t)(p - pending.v);
            npending++;
        } else if (code == 4 || code == 5 || code == 6 || code == 8) {
            if (code == 6 && n < 4)
                CHECK(UNSUPPORTED(d, "short COMBINED_GLOBALVAR_INIT_REFS record"));
            if (code == 8 && n != 4)
                CHECK(UNSUPPORTED(d, "malformed COMBINED_ALIAS record"));
            CLOSE_GROUP();
            size_t need = record_room(c, n);
            CHECK(need > ((size_t)-1) / 4 - pending.n ||
                  part_begin(d, &c->parts, P_SUMMARY) ||
                  !(p = room(d, t, 16 + pending.n + need)));
            p = W(p, "('summary', (");
            if (pending.n)
                memcpy(p, pending.v, pending.n);
            p += pending.n;
            ngroup = npending + 1;
            if (npending)
                p = W(p, ", ");
            pending.n = 0;
            npending = 0;
            if (code == 4 || code == 5) {
                CHECK(!(p = w_function(c, p, code, ops, n)));
            } else if (code == 6) {
                p = W(p, "(6, ");
                CHECK(!(p = w_guid(c, p, ops[0], 0)));
                p = W(p, ", ");
                CHECK(!(p = w_module(c, p, ops[1])));
                p = W(p, ", ");
                p = w_u64(p, ops[2]);
                p = W(p, ", ");
                p = w_u64(p, ops[3]);
                p = W(p, ", ");
                CHECK(!(p = w_guid_tuple(c, p, ops + 4, n - 4)));
                *p++ = ')';
            } else {
                p = W(p, "(8, ");
                CHECK(!(p = w_guid(c, p, ops[0], 0)));
                p = W(p, ", ");
                CHECK(!(p = w_module(c, p, ops[1])));
                p = W(p, ", ");
                p = w_u64(p, ops[2]);
                CHECK(!(p = w_guid(c, p, ops[3], 1)));
                *p++ = ')';
            }
            t->n = (size_t)(p - t->v);
        } else if (code == 9) {
            if (!ngroup || npending)
                CHECK(UNSUPPORTED(d, "COMBINED_ORIGINAL_NAME without a summary"));
            CHECK(!(p = room(d, t, span(32, n, 22))));
            p = W(p, ", (9, ");
            p = w_tuple(p, ops, n);
            *p++ = ')';
            t->n = (size_t)(p - t->v);
            ngroup++;
        } else {
            CHECK(UNSUPPORTED(d, "unsupported summary record code"));
        }
    }
    if (npending)
        CHECK(UNSUPPORTED(d, "type-test records without a following function summary"));
    CLOSE_GROUP();
    for (size_t i = 0; i < r->n; i++) { /* FLAGS and BLOCK_COUNT */
        const Rec *rec = &r->v[i];
        if (rec->code != 20 && rec->code != 24)
            continue;
        CHECK(part_begin(d, &c->parts, P_SUMMARY_RECORD) ||
              !(p = room(d, t, span(48, rec->n, 22))));
        p = W(p, "('summary-record', ");
        p = w_u64(p, rec->code);
        p = W(p, ", ");
        p = w_tuple(p, r->ops.v + rec->off, rec->n);
        p = W(p, ")");
        t->n = (size_t)(p - t->v);
        part_end(&c->parts);
    }
done:
#undef CHECK
#undef CLOSE_GROUP
    c->pending = pending;
    return rc;
}

static int module_block(Canon *c) {
    D *d = &c->d;
    Records *summ = &c->summ;
    int have_summary = 0;
    int rc = -1;
    for (;;) {
        int kind;
        if (advance(d, &kind))
            goto out;
        if (kind == K_END)
            break;
        if (kind == K_ENTER) {
            if (d->block_id == MODULE_STRTAB_BLOCK && !c->have_modules) {
                if (flat_records(d, &c->mst, "unknown sub-block in MODULE_STRTAB_BLOCK") ||
                    module_strtab(c, &c->mst))
                    goto out;
            } else if (d->block_id == GLOBALVAL_SUMMARY_BLOCK && !have_summary) {
                if (flat_records(d, summ, "unknown sub-block in GLOBALVAL_SUMMARY_BLOCK"))
                    goto out;
                have_summary = 1;
            } else {
                UNSUPPORTED(d, "unexpected block in MODULE_BLOCK");
                goto out;
            }
            continue;
        }
        if (kind == K_EOF) {
            MALFORMED(d, "unterminated MODULE_BLOCK");
            goto out;
        }
        if (d->code != 1 || d->has_blob) {
            UNSUPPORTED(d, "unknown MODULE_BLOCK record code");
            goto out;
        }
        Buf *t = &c->parts.text;
        size_t n = d->rec.n - d->rec0;
        char *p;
        if (part_begin(d, &c->parts, P_MODULE_VERSION) || !(p = room(d, t, span(32, n, 22))))
            goto out;
        p = W(p, "('module-version', ");
        p = w_tuple(p, d->rec.v + d->rec0, n);
        p = W(p, ")");
        t->n = (size_t)(p - t->v);
        part_end(&c->parts);
    }
    if (!have_summary) {
        UNSUPPORTED(d, "no GLOBALVAL_SUMMARY_BLOCK");
        goto out;
    }
    rc = summary(c, summ);
out:
    return rc;
}

static int shard(Canon *c) {
    D *d = &c->d;
    int seen_module = 0;
    for (;;) {
        int kind;
        if (advance(d, &kind))
            return -1;
        if (kind == K_EOF)
            break;
        if (kind != K_ENTER)
            return UNSUPPORTED(d, "unexpected top-level entry");
        if (d->block_id == MODULE_BLOCK) {
            if (seen_module)
                return UNSUPPORTED(d, "more than one MODULE_BLOCK");
            seen_module = 1;
            if (module_block(c))
                return -1;
        } else if (d->block_id == STRTAB_BLOCK) {
            Records *st = &c->st;
            if (flat_records(d, st, "unknown sub-block in STRTAB_BLOCK"))
                return -1;
            for (size_t i = 0; i < st->n; i++) {
                const Rec *rec = &st->v[i];
                if (rec->code != 1 || rec->n)
                    return UNSUPPORTED(d, "unknown STRTAB record code");
                Buf *t = &c->parts.text;
                char *p;
                int bad = part_begin(d, &c->parts, P_STRTAB) || !(p = room(d, t, 16));
                if (!bad) {
                    p = W(p, "('strtab', ");
                    t->n = (size_t)(p - t->v);
                }
                if (!bad && !rec->has_blob) {
                    p = W(p, "None");
                    t->n = (size_t)(p - t->v);
                } else if (!bad) {
                    PyObject *blob = PyBytes_FromStringAndSize(
                        (const char *)d->data + rec->blob_off, (Py_ssize_t)rec->blob_len);
                    PyObject *rep = blob ? PyObject_Repr(blob) : NULL;
                    Py_XDECREF(blob);
                    Py_ssize_t n;
                    const char *s = rep ? PyUnicode_AsUTF8AndSize(rep, &n) : NULL;
                    if (!s)
                        bad = fail(d, ST_PYERR, "");
                    else if (!(p = (size_t)n <= ((size_t)-1) / 4 ? room(d, t, (size_t)n + 1)
                                                                 : (NOMEM(d), NULL)))
                        bad = -1;
                    else {
                        memcpy(p, s, (size_t)n);
                        t->n += (size_t)n;
                        p += n;
                    }
                    Py_XDECREF(rep);
                }
                if (bad)
                    return -1;
                *p++ = ')';
                t->n = (size_t)(p - t->v);
                part_end(&c->parts);
            }
        } else {
            return UNSUPPORTED(d, "unknown top-level block");
        }
    }
    if (!seen_module)
        return UNSUPPORTED(d, "no MODULE_BLOCK");
    return 0;
}

/* bitcode_payload(): skip a wrapper header, check the magic; sets pos and end in bits. */
static int payload(D *d) {
    const uint8_t *p = d->data;
    uint64_t start = 0, end = d->len;
#define U32(o)                                                                            \
    ((uint64_t)p[o] | (uint64_t)p[(o) + 1] << 8 | (uint64_t)p[(o) + 2] << 16 |               \
     (uint64_t)p[(o) + 3] << 24)
    if (d->len >= 20 && U32(0) == 0x0B17C0DEu) {
        uint64_t offset = U32(8), size = U32(12);
        if (offset + size > d->len || offset < 20)
            return MALFORMED(d, "bitcode wrapper header points outside the file");
        start = offset;
        end = offset + size;
    }
#undef U32
    if (start + 4 > d->len || memcmp(p + start, "BC\xc0\xde", 4))
        return MALFORMED(d, "not LLVM bitcode (missing 'BC' 0xC0DE magic)");
    if ((end - start) % 4)
        return MALFORMED(d, "bitcode size is not a multiple of 4 bytes");
    d->pos = (start + 4) * 8;
    d->end = end * 8;
    return 0;
}

/* The growable buffers of a call are kept for the next one (each call otherwise spends much
 * of its time growing them again): ``spare`` holds them between calls. Everything runs under
 * the GIL; a call made while one is running (module_digest may run any Python code, even
 * canonical_body) finds no spare and allocates its own. */
static Canon *spare;
#define KEEP_MAX ((size_t)16 << 20) /* bytes of buffers worth keeping */

/* Frees what a call allocated for itself (and forgets it). */
static void free_call(Canon *c) {
    D *d = &c->d;
    free(d->ops);
    free(d->abbrevs);
    free(d->cur.v);
    for (size_t i = 0; i < d->depth; i++)
        free(d->stack[i].abbrevs.v);
    free(d->stack);
    for (size_t i = 0; i < d->ninfo; i++)
        free(d->info[i].list.v);
    free(d->info);
    map_free(&d->info_index);
    free(c->mods);
    index_free(&c->mod_index);
    index_free(&c->guids);
    d->ops = NULL;
    d->abbrevs = NULL;
    d->cur.v = NULL;
    d->stack = NULL;
    d->depth = 0;
    d->info = NULL;
    d->ninfo = 0;
    c->mods = NULL;
}

/* Frees the buffers kept from call to call. */
static void free_kept(Canon *c) {
    free(c->d.rec.v);
    free(c->parts.text.v);
    free(c->parts.off);
    free(c->parts.kind);
    free(c->mtext.v);
    free(c->scratch.v);
    free(c->slots);
    free(c->gvals);
    records_free(&c->mst);
    records_free(&c->summ);
    records_free(&c->st);
    free(c->pending.v);
    ws_free(&c->ws);
    free(c->order);
    free(c->moff);
}

/* A Canon for one call: the spare one emptied (its buffers kept), or a fresh one. */
static Canon *canon_get(void) {
    Canon *c = spare, k;
    spare = NULL;
    if (!c)
        return calloc(1, sizeof(Canon));
    k = *c;
    memset(c, 0, sizeof *c);
    c->d.rec.v = k.d.rec.v;
    c->d.rec.cap = k.d.rec.cap;
    c->parts.text.v = k.parts.text.v;
    c->parts.text.cap = k.parts.text.cap;
    c->parts.off = k.parts.off;
    c->parts.cap = k.parts.cap;
    c->parts.kind = k.parts.kind;
    c->parts.capk = k.parts.capk;
    c->mtext.v = k.mtext.v;
    c->mtext.cap = k.mtext.cap;
    c->scratch.v = k.scratch.v;
    c->scratch.cap = k.scratch.cap;
    c->slots = k.slots;
    c->capslots = k.capslots;
    c->gvals = k.gvals;
    c->capg = k.capg;
    c->mst.v = k.mst.v;
    c->mst.cap = k.mst.cap;
    c->mst.ops.v = k.mst.ops.v;
    c->mst.ops.cap = k.mst.ops.cap;
    c->summ.v = k.summ.v;
    c->summ.cap = k.summ.cap;
    c->summ.ops.v = k.summ.ops.v;
    c->summ.ops.cap = k.summ.ops.cap;
    c->st.v = k.st.v;
    c->st.cap = k.st.cap;
    c->st.ops.v = k.st.ops.v;
    c->st.ops.cap = k.st.ops.cap;
    c->pending.v = k.pending.v;
    c->pending.cap = k.pending.cap;
    c->ws = k.ws;
    c->order = k.order;
    c->caporder = k.caporder;
    c->moff = k.moff;
    c->capmoff = k.capmoff;
    return c;
}

/* Ends a call: its buffers become the spare, unless there is one already or they are big. */
static void canon_put(Canon *c) {
    size_t bytes = c->d.rec.cap * 8 + c->parts.text.cap + c->parts.cap * 9 + c->mtext.cap +
                   c->scratch.cap + c->capslots * sizeof(Slot) + c->capg * 8 +
                   (c->mst.cap + c->summ.cap + c->st.cap) * sizeof(Rec) +
                   (c->mst.ops.cap + c->summ.ops.cap + c->st.ops.cap) * 8 + c->pending.cap +
                   (c->ws.capa + c->ws.capt) * sizeof(SK) +
                   c->ws.captasks * sizeof(Task) + (c->caporder + c->capmoff) * 8;
    free_call(c);
    if (!spare && bytes <= KEEP_MAX) {
        spare = c;
    } else {
        free_kept(c);
        free(c);
    }
}

static PyObject *canonical_body(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *module_digest, *own = Py_None, *known = Py_None;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O|OO:canonical_body", &view, &module_digest, &own, &known))
        return NULL;
    if ((own == Py_None) != (known == Py_None) ||
        (own != Py_None && (!PyAnySet_Check(own) || !PyDict_Check(known)))) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "own must be a set and known a dict, or both None");
        return NULL;
    }
    Canon *c = canon_get();
    if (!c) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    c->d.data = view.buf;
    c->d.len = (size_t)view.len;
    c->d.width = 2;
    c->module_digest = module_digest;
    if (own != Py_None) { /* held by args for the call */
        c->own = own;
        c->known = known;
    }
    PyObject *result = NULL;
    int bad = payload(&c->d) || shard(c);
    if (c->d.status == ST_PYERR) {
        /* The reference propagates a failing module_digest; let it do so (or not). */
        PyErr_Clear();
        result = Py_None;
        Py_INCREF(result);
    } else if (c->d.status == ST_NOMEM) {
        result = PyErr_NoMemory();
    } else if (c->d.big) {
        result = Py_None; /* some value needs more than 64 bits: the reference decides */
        Py_INCREF(result);
    } else if (bad) {
        if (c->d.status == ST_MALFORMED)
            result = PyUnicode_FromFormat("malformed bitcode: %s", c->d.reason);
        else
            result = PyUnicode_FromString(c->d.reason);
    } else {
        const Parts *pt = &c->parts;
        size_t n = pt->n, total = n ? n - 1 : 0;
        size_t start[P_KINDS + 1] = {0};
        int bad_sort = grow((void **)&c->order, &c->caporder, n ? n : 1, sizeof(size_t));
        size_t *order = c->order;
        if (!bad_sort) { /* by kind (a counting sort), then the parts of each kind as strings */
            for (size_t i = 0; i < n; i++)
                start[pt->kind[i] + 1]++;
            for (int k = 0; k < P_KINDS; k++)
                start[k + 1] += start[k];
            size_t fill[P_KINDS];
            memcpy(fill, start, sizeof fill);
            for (size_t i = 0; i < n; i++)
                order[fill[pt->kind[i]]++] = i;
            for (int k = 0; k < P_KINDS && !bad_sort; k++)
                bad_sort = sort_strings(&c->ws, pt->text.v, pt->off, order + start[k],
                                        start[k + 1] - start[k], KIND_PREFIX[k]);
        }
        if (bad_sort) {
            result = PyErr_NoMemory();
        } else {
            for (size_t i = 0; i < n; i++)
                total += pt->off[i + 1] - pt->off[i];
            result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
            if (result) {
                char *out = PyBytes_AS_STRING(result);
                for (size_t k = 0; k < n; k++) {
                    size_t i = order[k], len = pt->off[i + 1] - pt->off[i];
                    if (k)
                        *out++ = '\n';
                    memcpy(out, pt->text.v + pt->off[i], len);
                    out += len;
                }
            }
        }
    }
    canon_put(c);
    PyBuffer_Release(&view);
    return result;
}

/* Module teardown: drop the spare buffers. */
static void module_free(void *m) {
    (void)m;
    if (spare) {
        free_kept(spare);
        free(spare);
        spare = NULL;
    }
}

static PyMethodDef methods[] = {
    {"canonical_body", canonical_body, METH_VARARGS,
     "canonical_body(data, module_digest[, own, known]) -> bytes (canonical text) | str (why "
     "not) | None (ask the reference). A module path in ``own`` (a set) found in ``known`` (a "
     "dict of str) takes that digest; module_digest is asked for the others."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_shard", "Native canonical form of DTLTO summary shards.", -1,
    methods, NULL, NULL, NULL, module_free,
};

PyMODINIT_FUNC PyInit__shard(void) {
    return PyModule_Create(&module);
}
