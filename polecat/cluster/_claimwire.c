/* polecat.cluster._claimwire: the claim frame's payload (polecat/cluster/claimwire.py) read and written in C.
 *
 * claimwire.py is the specification (its rule 1): frame(payload) gives what its Python decode gives after
 * unframe, payload(kind, sender, items) the bytes msgpack.packb gives for its Python items, or each answers
 * None and the Python path runs:
 *
 * 1. frame(payload) reads the msgpack payload ``[kind, sender, items]`` of kinds 1-4 in the exact layout
 *    of claimwire.py's docstring: arrays where it has lists, ints (never bools) where it has ints, a float
 *    or an int where it has a time (an int read as float() reads it), bin of 32 bytes for digests and of
 *    ``verify_bytes`` for sketches, str (strict UTF-8) for URLs, senders, holders and headers, nil where
 *    it allows one, bools for ``truncated`` and ``stored``, nothing after the payload. Anything else
 *    (a refusal, and the odd frames Python reads too: a map where a list is, a bool seq, a float kind)
 *    answers None, so Python decodes or refuses it with its own error: the kernel never refuses a frame.
 * 2. The records (ClaimFrame, Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord: slotted
 *    dataclasses without __post_init__, their slots checked against the field names by bind()) are made
 *    by the type's allocator and their slots filled, as their __init__ would fill them (which a frozen
 *    dataclass does field by field through object.__setattr__: most of the Python decode's time).
 * 3. payload(kind, sender, items) packs kind 1 (a list or tuple of Claim), 2 (of Answer), 3 (of bytes) or
 *    4 (a ClaimFrame) as msgpack.packb(..., use_bin_type=True) packs claimwire.py's lists: the smallest
 *    int, fixstr/str8/16/32, bin8/16/32, float64, fix/16/32 arrays. Records of the exact bound types,
 *    sections that are lists or tuples, and scalars of the exact types None, bool, int (64-bit signed or
 *    unsigned), float, str (UTF-8 encodable), bytes are packed; anything else answers None.
 * 4. bind_records(Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord) binds those six types alone,
 *    as bind() binds them (claims.py, where the books make them, binds them at its import; frame() and
 *    payload() still answer None until bind()). make(type, *values) makes a record of one of the six
 *    bound types from every field's value in field order, as rule 2 makes a decoded one and as its
 *    __init__ would (positional, every field given): the records a book answers with and a copy's
 *    revisit, ~0.1 us against ~0.7 us for a frozen dataclass's __init__ (and ~3 us for a FetchRecord's
 *    dataclasses.replace). Another type, or another count of values, is a TypeError.
 *
 * Nothing here runs Python code: every object read is of an exact builtin or bound type, so a list being
 * packed cannot change under it. The GIL is held throughout; the bound types are the module's only state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

enum { T_FRAME, T_CLAIM, T_ANSWER, T_NEAR, T_NEAR_ANSWER, T_ORIGINAL, T_RECORD, N_TYPES };
#define MAX_FIELDS 10

static const char *const FIELDS[N_TYPES][MAX_FIELDS + 1] = {
    {"sender", "claims", "answers", "durable", "near", "near_answers", "withdrawn", "deposits", "deposited",
     "separate", NULL},
    {"seq", "digest", "url", "fetched_at", NULL},
    {"seq", "original", NULL},
    {"seq", "digest", "url", "fetched_at", "index", "verify", NULL},
    {"seq", "original", NULL},
    {"digest", "url", "fetched_at", "holder", "rank", NULL},
    {"url", "fetched_at", "status", "headers", "content_hash", "size", "truncated", "duplicate_of", "kind",
     NULL},
};

/* ClaimFrame's slots by name, in FIELDS order. */
enum { F_SENDER, F_CLAIMS, F_ANSWERS, F_DURABLE, F_NEAR, F_NEAR_ANSWERS, F_WITHDRAWN, F_DEPOSITS, F_DEPOSITED,
       F_SEPARATE };

typedef struct {
    PyTypeObject *type;
    Py_ssize_t n;
    Py_ssize_t offset[MAX_FIELDS];
} Layout;

static Layout LAYOUTS[N_TYPES];
static Py_ssize_t VERIFY_LEN = -1;
static PyObject *REVISIT; /* FetchRecord.kind of a deposit */

#define SLOT(obj, t, i) (*(PyObject **)((char *)(obj) + LAYOUTS[t].offset[i]))

/* Rule 2: a record of bound type t with its slots set to vals (references stolen, all non-NULL). */
static PyObject *build(int t, PyObject **vals) {
    Layout *l = &LAYOUTS[t];
    PyObject *o = l->type->tp_alloc(l->type, 0);
    if (o == NULL) {
        for (Py_ssize_t i = 0; i < l->n; i++) Py_DECREF(vals[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < l->n; i++) *(PyObject **)((char *)o + l->offset[i]) = vals[i];
    return o;
}

/* build() of values that may be NULL (a failed read): all released then, and NULL. */
static PyObject *build_or_drop(int t, PyObject **vals) {
    for (Py_ssize_t i = 0; i < LAYOUTS[t].n; i++) {
        if (vals[i] == NULL) {
            for (Py_ssize_t j = 0; j < LAYOUTS[t].n; j++) Py_XDECREF(vals[j]);
            return NULL;
        }
    }
    return build(t, vals);
}

static int bind_one(int t, PyObject *type) {
    if (!PyType_Check(type)) {
        PyErr_Format(PyExc_TypeError, "bind: argument %d is not a type", t + 1);
        return -1;
    }
    PyTypeObject *tp = (PyTypeObject *)type;
    if (tp->tp_dictoffset != 0 || PyObject_HasAttrString(type, "__post_init__")) {
        PyErr_Format(PyExc_TypeError, "bind: %s has a __dict__ or a __post_init__", tp->tp_name);
        return -1;
    }
    PyObject *slots = PyObject_GetAttrString(type, "__slots__");
    if (slots == NULL) return -1;
    Py_ssize_t n = 0;
    while (FIELDS[t][n] != NULL) n++;
    int same = PyTuple_Check(slots) && PyTuple_GET_SIZE(slots) == n;
    for (Py_ssize_t i = 0; same && i < n; i++) {
        PyObject *s = PyTuple_GET_ITEM(slots, i);
        same = PyUnicode_Check(s) && PyUnicode_CompareWithASCIIString(s, FIELDS[t][i]) == 0;
    }
    Py_DECREF(slots);
    if (!same) {
        PyErr_Format(PyExc_TypeError, "bind: the slots of %s are not the fields this kernel fills", tp->tp_name);
        return -1;
    }
    Layout l = {tp, n, {0}};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttrString(type, FIELDS[t][i]);
        if (d == NULL) return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX
                 && !(((PyMemberDescrObject *)d)->d_member->flags & READONLY);
        if (ok) l.offset[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "bind: %s.%s is not a plain slot", tp->tp_name, FIELDS[t][i]);
            return -1;
        }
    }
    Py_INCREF(type);
    Py_XDECREF(LAYOUTS[t].type);
    LAYOUTS[t] = l;
    return 0;
}

static PyObject *bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != N_TYPES + 1) {
        PyErr_SetString(PyExc_TypeError, "bind(ClaimFrame, Claim, Answer, NearClaim, NearAnswer, Original, "
                                         "FetchRecord, verify_bytes)");
        return NULL;
    }
    Py_ssize_t verify = PyLong_AsSsize_t(args[N_TYPES]);
    if (verify == -1 && PyErr_Occurred()) return NULL;
    for (int t = 0; t < N_TYPES; t++) {
        if (bind_one(t, args[t]) < 0) {
            VERIFY_LEN = -1; /* unbound: frame() and payload() answer None */
            return NULL;
        }
    }
    VERIFY_LEN = verify;
    Py_RETURN_NONE;
}

/* Rule 4: the record types claims.py makes. */
static PyObject *bind_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != T_RECORD - T_CLAIM + 1) {
        PyErr_SetString(PyExc_TypeError,
                        "bind_records(Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord)");
        return NULL;
    }
    for (int t = T_CLAIM; t <= T_RECORD; t++)
        if (bind_one(t, args[t - T_CLAIM]) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Rule 4: a record of a bound claims.py type from its field values. */
static PyObject *make(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs >= 1) {
        for (int t = T_CLAIM; t <= T_RECORD; t++) {
            if (LAYOUTS[t].type != (PyTypeObject *)args[0]) continue;
            if (nargs - 1 != LAYOUTS[t].n) {
                PyErr_Format(PyExc_TypeError, "make(): %s takes %zd values, not %zd", LAYOUTS[t].type->tp_name,
                             LAYOUTS[t].n, nargs - 1);
                return NULL;
            }
            PyObject *vals[MAX_FIELDS];
            for (Py_ssize_t i = 0; i < LAYOUTS[t].n; i++) {
                Py_INCREF(args[i + 1]);
                vals[i] = args[i + 1];
            }
            return build(t, vals);
        }
    }
    PyErr_SetString(PyExc_TypeError, "make(type, *values): type is a record type bound by bind_records()");
    return NULL;
}

/* ---- Rule 1: reading ---- */

typedef struct {
    const unsigned char *p, *end;
} Reader;

static inline int avail(Reader *r, Py_ssize_t n) { return r->end - r->p >= n; }

static inline uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

/* An array header: its length, or -1. */
static Py_ssize_t read_array(Reader *r) {
    if (!avail(r, 1)) return -1;
    unsigned char c = *r->p;
    Py_ssize_t n;
    if ((c & 0xf0) == 0x90) {
        r->p += 1;
        n = c & 0x0f;
    } else if (c == 0xdc && avail(r, 3)) {
        n = (Py_ssize_t)be(r->p + 1, 2);
        r->p += 3;
    } else if (c == 0xdd && avail(r, 5)) {
        n = (Py_ssize_t)be(r->p + 1, 4);
        r->p += 5;
    } else {
        return -1;
    }
    return n <= r->end - r->p ? n : -1; /* each item is a byte at least */
}

/* An array header of exactly n items. */
static int read_array_of(Reader *r, Py_ssize_t n) { return read_array(r) == n ? 0 : -1; }

static int read_nil(Reader *r) {
    if (avail(r, 1) && *r->p == 0xc0) {
        r->p++;
        return 1;
    }
    return 0;
}

/* An int: *neg set for a negative one (v then its two's complement), -1 if not an int. */
static int read_int(Reader *r, int *neg, uint64_t *v) {
    if (!avail(r, 1)) return -1;
    unsigned char c = *r->p;
    *neg = 0;
    if (c <= 0x7f) {
        *v = c;
        r->p += 1;
        return 0;
    }
    if (c >= 0xe0) {
        *neg = 1;
        *v = (uint64_t)(int64_t)(int8_t)c;
        r->p += 1;
        return 0;
    }
    int n;
    switch (c) {
    case 0xcc: case 0xd0: n = 1; break;
    case 0xcd: case 0xd1: n = 2; break;
    case 0xce: case 0xd2: n = 4; break;
    case 0xcf: case 0xd3: n = 8; break;
    default: return -1;
    }
    if (!avail(r, 1 + n)) return -1;
    uint64_t u = be(r->p + 1, n);
    if (c >= 0xd0) { /* signed: sign-extend from n bytes */
        int shift = 64 - 8 * n;
        int64_t s = (int64_t)(u << shift) >> shift;
        *neg = s < 0;
        u = (uint64_t)s;
    }
    *v = u;
    r->p += 1 + n;
    return 0;
}

static PyObject *int_object(int neg, uint64_t v) {
    return neg ? PyLong_FromLongLong((long long)(int64_t)v) : PyLong_FromUnsignedLongLong(v);
}

static PyObject *read_int_object(Reader *r) {
    int neg;
    uint64_t v;
    return read_int(r, &neg, &v) < 0 ? NULL : int_object(neg, v);
}

/* A time: a float, or an int as float(int) reads it (correctly rounded). */
static PyObject *read_time(Reader *r) {
    if (!avail(r, 1)) return NULL;
    unsigned char c = *r->p;
    if (c == 0xcb && avail(r, 9)) {
        uint64_t u = be(r->p + 1, 8);
        double d;
        memcpy(&d, &u, 8);
        r->p += 9;
        return PyFloat_FromDouble(d);
    }
    if (c == 0xca && avail(r, 5)) {
        uint32_t u = (uint32_t)be(r->p + 1, 4);
        float f;
        memcpy(&f, &u, 4);
        r->p += 5;
        return PyFloat_FromDouble((double)f);
    }
    PyObject *i = read_int_object(r);
    if (i == NULL) return NULL;
    double d = PyLong_AsDouble(i);
    Py_DECREF(i);
    return PyFloat_FromDouble(d);
}

/* A str (str8/16/32 or fixstr) of strict UTF-8; NULL otherwise (the decode error cleared). */
static PyObject *read_str(Reader *r) {
    if (!avail(r, 1)) return NULL;
    unsigned char c = *r->p;
    Py_ssize_t n, h;
    if ((c & 0xe0) == 0xa0) {
        n = c & 0x1f;
        h = 1;
    } else if (c == 0xd9 && avail(r, 2)) {
        n = (Py_ssize_t)be(r->p + 1, 1);
        h = 2;
    } else if (c == 0xda && avail(r, 3)) {
        n = (Py_ssize_t)be(r->p + 1, 2);
        h = 3;
    } else if (c == 0xdb && avail(r, 5)) {
        n = (Py_ssize_t)be(r->p + 1, 4);
        h = 5;
    } else {
        return NULL;
    }
    if (!avail(r, h + n)) return NULL;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->p + h, n, NULL);
    if (s == NULL) {
        PyErr_Clear();
        return NULL;
    }
    r->p += h + n;
    return s;
}

/* A bin of exactly len bytes. */
static PyObject *read_bin(Reader *r, Py_ssize_t len) {
    if (!avail(r, 1)) return NULL;
    unsigned char c = *r->p;
    Py_ssize_t n, h;
    if (c == 0xc4 && avail(r, 2)) {
        n = (Py_ssize_t)be(r->p + 1, 1);
        h = 2;
    } else if (c == 0xc5 && avail(r, 3)) {
        n = (Py_ssize_t)be(r->p + 1, 2);
        h = 3;
    } else if (c == 0xc6 && avail(r, 5)) {
        n = (Py_ssize_t)be(r->p + 1, 4);
        h = 5;
    } else {
        return NULL;
    }
    if ((len >= 0 && n != len) || !avail(r, h + n)) return NULL;
    PyObject *b = PyBytes_FromStringAndSize((const char *)r->p + h, n);
    if (b != NULL) r->p += h + n;
    return b;
}

static PyObject *read_bool(Reader *r) {
    if (!avail(r, 1) || (*r->p != 0xc2 && *r->p != 0xc3)) return NULL;
    return PyBool_FromLong(*r->p++ == 0xc3);
}

/* A section: an array, each item read by one(). */
static PyObject *read_section(Reader *r, PyObject *(*one)(Reader *)) {
    Py_ssize_t n = read_array(r);
    if (n < 0) return NULL;
    PyObject *t = PyTuple_New(n);
    if (t == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = one(r);
        if (item == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, item);
    }
    return t;
}

static PyObject *read_digest(Reader *r) { return read_bin(r, 32); }

/* [seq, digest, url, fetched_at] */
static PyObject *read_claim(Reader *r) {
    if (read_array_of(r, 4) < 0) return NULL;
    PyObject *v[4] = {NULL};
    (void)((v[0] = read_int_object(r)) && (v[1] = read_digest(r)) && (v[2] = read_str(r)) && (v[3] = read_time(r)));
    return build_or_drop(T_CLAIM, v);
}

/* [seq, url, fetched_at] or [seq, nil, nil] */
static PyObject *read_answer(Reader *r) {
    if (read_array_of(r, 3) < 0) return NULL;
    PyObject *v[2] = {read_int_object(r), NULL};
    if (v[0] == NULL) return NULL;
    if (read_nil(r)) {
        if (read_nil(r)) v[1] = Py_NewRef(Py_None);
    } else {
        PyObject *url = read_str(r), *at = url ? read_time(r) : NULL;
        if (at != NULL) {
            v[1] = PyTuple_Pack(2, url, at);
        }
        Py_XDECREF(url);
        Py_XDECREF(at);
    }
    return build_or_drop(T_ANSWER, v);
}

/* [seq, digest, url, fetched_at, index, verify]: the index 0 <= index < 2**64. */
static PyObject *read_near(Reader *r) {
    if (read_array_of(r, 6) < 0) return NULL;
    PyObject *v[6] = {NULL};
    if ((v[0] = read_int_object(r)) && (v[1] = read_digest(r)) && (v[2] = read_str(r)) && (v[3] = read_time(r))) {
        int neg;
        uint64_t index;
        if (read_int(r, &neg, &index) == 0 && !neg && (v[4] = PyLong_FromUnsignedLongLong(index)))
            v[5] = read_bin(r, VERIFY_LEN);
    }
    return build_or_drop(T_NEAR, v);
}

/* [seq, nil] or [seq, [digest, url, fetched_at, holder, bins, bits]] */
static PyObject *read_near_answer(Reader *r) {
    if (read_array_of(r, 2) < 0) return NULL;
    PyObject *v[2] = {read_int_object(r), NULL};
    if (v[0] == NULL) return NULL;
    if (read_nil(r)) {
        v[1] = Py_NewRef(Py_None);
    } else if (read_array_of(r, 6) == 0) {
        PyObject *o[5] = {NULL};
        if ((o[0] = read_digest(r)) && (o[1] = read_str(r)) && (o[2] = read_time(r)) && (o[3] = read_str(r))) {
            PyObject *bins = read_int_object(r), *bits = bins ? read_int_object(r) : NULL;
            if (bits != NULL) o[4] = PyTuple_Pack(2, bins, bits);
            Py_XDECREF(bins);
            Py_XDECREF(bits);
        }
        v[1] = build_or_drop(T_ORIGINAL, o);
    }
    return build_or_drop(T_NEAR_ANSWER, v);
}

/* [a, b] as the tuple (a, b), each read by its reader */
static PyObject *read_pair(Reader *r, PyObject *(*read_a)(Reader *), PyObject *(*read_b)(Reader *)) {
    if (read_array_of(r, 2) < 0) return NULL;
    PyObject *a = read_a(r), *b = a ? read_b(r) : NULL;
    PyObject *pair = b ? PyTuple_Pack(2, a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return pair;
}

/* [name, value] */
static PyObject *read_header(Reader *r) { return read_pair(r, read_str, read_str); }

/* [seq, url, fetched_at, status, headers, digest, size, truncated, duplicate_of, body] as
 * (seq, FetchRecord(..., kind "revisit"), body) */
static PyObject *read_deposit(Reader *r) {
    if (read_array_of(r, 10) < 0) return NULL;
    PyObject *seq = read_int_object(r);
    if (seq == NULL) return NULL;
    PyObject *v[9] = {NULL}, *body = NULL;
    if ((v[0] = read_str(r)) && (v[1] = read_time(r)) && (v[2] = read_int_object(r))
        && (v[3] = read_section(r, read_header)) && (v[4] = read_digest(r)) && (v[5] = read_int_object(r))
        && (v[6] = read_bool(r)) && (v[7] = read_str(r))) {
        v[8] = Py_NewRef(REVISIT);
        body = read_nil(r) ? Py_NewRef(Py_None) : read_bin(r, -1);
    }
    PyObject *record = build_or_drop(T_RECORD, v);
    PyObject *deposit = record && body ? PyTuple_Pack(3, seq, record, body) : NULL;
    Py_DECREF(seq);
    Py_XDECREF(record);
    Py_XDECREF(body);
    return deposit;
}

/* [seq, stored] */
static PyObject *read_deposited(Reader *r) { return read_pair(r, read_int_object, read_bool); }

/* Rule 1: the frame, NULL (with no error set) where Python must decide. */
static PyObject *read_frame(Reader *r) {
    if (read_array_of(r, 3) < 0 || !avail(r, 1)) return NULL;
    unsigned char kind = *r->p++;
    if (kind < 1 || kind > 4) return NULL;
    PyObject *v[MAX_FIELDS] = {NULL};
    if ((v[F_SENDER] = read_str(r)) == NULL) return NULL;
    v[F_SEPARATE] = Py_NewRef(kind == 4 ? Py_False : Py_True);
    int read = 0; /* every section the frame carries read */
    if (kind < 4) {
        int section = kind == 1 ? F_CLAIMS : kind == 2 ? F_ANSWERS : F_DURABLE;
        v[section] = read_section(r, kind == 1 ? read_claim : kind == 2 ? read_answer : read_digest);
        read = v[section] != NULL;
    } else {
        Py_ssize_t n = read_array(r);
        read = (n == 5 || n == 8) && (v[F_NEAR] = read_section(r, read_near))
               && (v[F_NEAR_ANSWERS] = read_section(r, read_near_answer))
               && (v[F_WITHDRAWN] = read_section(r, read_digest)) && (v[F_DEPOSITS] = read_section(r, read_deposit))
               && (v[F_DEPOSITED] = read_section(r, read_deposited));
        if (read && n == 8) {
            read = (v[F_CLAIMS] = read_section(r, read_claim)) && (v[F_ANSWERS] = read_section(r, read_answer))
                   && (v[F_DURABLE] = read_section(r, read_digest));
        }
    }
    for (int i = 0; read && i < MAX_FIELDS; i++) { /* the sections the frame does not carry: empty */
        if (v[i] == NULL) v[i] = PyTuple_New(0);
    }
    if (r->p != r->end) { /* msgpack's "extra data" */
        for (int i = 0; i < MAX_FIELDS; i++) Py_XDECREF(v[i]);
        return NULL;
    }
    return build_or_drop(T_FRAME, v);
}

static PyObject *frame(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (VERIFY_LEN < 0) Py_RETURN_NONE;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Reader r = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len};
    PyObject *f = read_frame(&r);
    PyBuffer_Release(&view);
    if (f == NULL) { /* Python decides (rule 1), with its own errors, memory ones too */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return f;
}

/* ---- Rule 3: writing ---- */

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} Writer;

static int reserve(Writer *w, Py_ssize_t n) {
    if (w->cap - w->len >= n) return 0;
    Py_ssize_t cap = w->cap ? w->cap : 256;
    while (cap - w->len < n) {
        if (cap > PY_SSIZE_T_MAX / 2) return -1;
        cap *= 2;
    }
    char *buf = PyMem_Realloc(w->buf, cap);
    if (buf == NULL) return -1;
    w->buf = buf;
    w->cap = cap;
    return 0;
}

/* A one-byte marker then v in n big-endian bytes. */
static int put(Writer *w, unsigned char marker, uint64_t v, int n) {
    if (reserve(w, 1 + n) < 0) return -1;
    w->buf[w->len++] = (char)marker;
    for (int i = n - 1; i >= 0; i--) w->buf[w->len++] = (char)(v >> (8 * i));
    return 0;
}

static int put_bytes(Writer *w, const char *p, Py_ssize_t n) {
    if (reserve(w, n) < 0) return -1;
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    return 0;
}

/* A length-prefixed header: the fix form (fix_base | n, below fix_limit; fix_limit 0: none), else the
 * 8-, 16- or 32-bit form (marker8 0: none). */
static int put_len(Writer *w, Py_ssize_t n, unsigned char fix_base, Py_ssize_t fix_limit, unsigned char m8,
                   unsigned char m16, unsigned char m32) {
    if (n < fix_limit) return put(w, (unsigned char)(fix_base | n), 0, 0);
    if (m8 && n < 0x100) return put(w, m8, (uint64_t)n, 1);
    if (n < 0x10000) return put(w, m16, (uint64_t)n, 2);
    if ((uint64_t)n <= 0xffffffffULL) return put(w, m32, (uint64_t)n, 4);
    return -1;
}

static int put_array(Writer *w, Py_ssize_t n) { return put_len(w, n, 0x90, 16, 0, 0xdc, 0xdd); }

static int put_object(Writer *w, PyObject *o) {
    if (o == Py_None) return put(w, 0xc0, 0, 0);
    if (o == Py_True) return put(w, 0xc3, 0, 0);
    if (o == Py_False) return put(w, 0xc2, 0, 0);
    if (PyLong_CheckExact(o)) {
        int overflow;
        long long s = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(o);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) return -1;
            return put(w, 0xcf, u, 8);
        }
        if (overflow < 0 || (s == -1 && PyErr_Occurred())) return -1;
        if (s >= 0) {
            uint64_t u = (uint64_t)s;
            if (u < 0x80) return put(w, (unsigned char)u, 0, 0);
            if (u < 0x100) return put(w, 0xcc, u, 1);
            if (u < 0x10000) return put(w, 0xcd, u, 2);
            if (u < 0x100000000ULL) return put(w, 0xce, u, 4);
            return put(w, 0xcf, u, 8);
        }
        if (s >= -32) return put(w, (unsigned char)(int8_t)s, 0, 0);
        if (s >= -128) return put(w, 0xd0, (uint64_t)s & 0xff, 1);
        if (s >= -32768) return put(w, 0xd1, (uint64_t)s & 0xffff, 2);
        if (s >= -2147483648LL) return put(w, 0xd2, (uint64_t)s & 0xffffffffULL, 4);
        return put(w, 0xd3, (uint64_t)s, 8);
    }
    if (PyFloat_CheckExact(o)) {
        double d = PyFloat_AS_DOUBLE(o);
        uint64_t u;
        memcpy(&u, &d, 8);
        return put(w, 0xcb, u, 8);
    }
    if (PyUnicode_CheckExact(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL || put_len(w, n, 0xa0, 32, 0xd9, 0xda, 0xdb) < 0) return -1;
        return put_bytes(w, s, n);
    }
    if (PyBytes_CheckExact(o)) {
        Py_ssize_t n = PyBytes_GET_SIZE(o);
        if (put_len(w, n, 0, 0, 0xc4, 0xc5, 0xc6) < 0) return -1;
        return put_bytes(w, PyBytes_AS_STRING(o), n);
    }
    return -1;
}

/* A list or tuple: its items and length; -1 for anything else. */
static Py_ssize_t items_of(PyObject *o, PyObject ***items) {
    if (!PyList_CheckExact(o) && !PyTuple_CheckExact(o)) return -1;
    *items = PySequence_Fast_ITEMS(o);
    return PySequence_Fast_GET_SIZE(o);
}

/* A list or tuple as an array of its items, each put by one() */
static int put_section(Writer *w, PyObject *o, int (*one)(Writer *, PyObject *)) {
    PyObject **items;
    Py_ssize_t n = items_of(o, &items);
    if (n < 0 || put_array(w, n) < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (one(w, items[i]) < 0) return -1;
    }
    return 0;
}

/* The slots first..last of a record of bound type t, each an item. */
static int put_slots(Writer *w, PyObject *o, int t, int first, int last) {
    for (int i = first; i <= last; i++) {
        PyObject *v = SLOT(o, t, i);
        if (v == NULL || put_object(w, v) < 0) return -1;
    }
    return 0;
}

/* [seq, digest, url, fetched_at] */
static int put_claim(Writer *w, PyObject *c) {
    if (!Py_IS_TYPE(c, LAYOUTS[T_CLAIM].type) || put_array(w, 4) < 0) return -1;
    return put_slots(w, c, T_CLAIM, 0, 3);
}

/* [seq, nil, nil] or [seq, url, fetched_at]: original[0] and [1] */
static int put_answer(Writer *w, PyObject *a) {
    if (!Py_IS_TYPE(a, LAYOUTS[T_ANSWER].type) || put_array(w, 3) < 0 || put_slots(w, a, T_ANSWER, 0, 0) < 0)
        return -1;
    PyObject *o = SLOT(a, T_ANSWER, 1);
    if (o == Py_None) return put(w, 0xc0, 0, 0) < 0 ? -1 : put(w, 0xc0, 0, 0);
    if (o == NULL || !PyTuple_CheckExact(o) || PyTuple_GET_SIZE(o) < 2) return -1;
    return put_object(w, PyTuple_GET_ITEM(o, 0)) < 0 ? -1 : put_object(w, PyTuple_GET_ITEM(o, 1));
}

/* [seq, digest, url, fetched_at, index, verify] */
static int put_near(Writer *w, PyObject *c) {
    if (!Py_IS_TYPE(c, LAYOUTS[T_NEAR].type) || put_array(w, 6) < 0) return -1;
    return put_slots(w, c, T_NEAR, 0, 5);
}

/* [seq, nil] or [seq, [digest, url, fetched_at, holder, *rank]] */
static int put_near_answer(Writer *w, PyObject *a) {
    if (!Py_IS_TYPE(a, LAYOUTS[T_NEAR_ANSWER].type) || put_array(w, 2) < 0
        || put_slots(w, a, T_NEAR_ANSWER, 0, 0) < 0)
        return -1;
    PyObject *o = SLOT(a, T_NEAR_ANSWER, 1), **rank;
    if (o == Py_None) return put(w, 0xc0, 0, 0);
    Py_ssize_t n;
    if (o == NULL || !Py_IS_TYPE(o, LAYOUTS[T_ORIGINAL].type) || SLOT(o, T_ORIGINAL, 4) == NULL
        || (n = items_of(SLOT(o, T_ORIGINAL, 4), &rank)) < 0 || put_array(w, 4 + n) < 0
        || put_slots(w, o, T_ORIGINAL, 0, 3) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (put_object(w, rank[i]) < 0) return -1;
    }
    return 0;
}

/* A list or tuple of items as an array (a header [name, value], a deposit's answer [seq, stored]). */
static int put_list(Writer *w, PyObject *o) { return put_section(w, o, put_object); }

/* [seq, url, fetched_at, status, headers, content_hash, size, truncated, duplicate_of, body] of
 * (seq, FetchRecord, body) */
static int put_deposit(Writer *w, PyObject *d) {
    if (!PyTuple_CheckExact(d) || PyTuple_GET_SIZE(d) != 3) return -1;
    PyObject *rec = PyTuple_GET_ITEM(d, 1);
    if (!Py_IS_TYPE(rec, LAYOUTS[T_RECORD].type) || SLOT(rec, T_RECORD, 3) == NULL || put_array(w, 10) < 0
        || put_object(w, PyTuple_GET_ITEM(d, 0)) < 0 || put_slots(w, rec, T_RECORD, 0, 2) < 0
        || put_section(w, SLOT(rec, T_RECORD, 3), put_list) < 0 || put_slots(w, rec, T_RECORD, 4, 7) < 0)
        return -1;
    return put_object(w, PyTuple_GET_ITEM(d, 2));
}

/* 1 for a list or tuple with items, 0 for an empty one, -1 for anything else. */
static int nonempty(PyObject *section) {
    PyObject **items;
    Py_ssize_t n = items_of(section, &items);
    return n < 0 ? -1 : n > 0;
}

/* [near, near answers, withdrawn, deposits, deposited] and, when any is non-empty, [claims, answers,
 * durable] after them */
static int put_near_items(Writer *w, PyObject *f) {
    if (!Py_IS_TYPE(f, LAYOUTS[T_FRAME].type)) return -1;
    for (int i = 0; i < MAX_FIELDS; i++) {
        if (SLOT(f, T_FRAME, i) == NULL) return -1;
    }
    int claims = nonempty(SLOT(f, T_FRAME, F_CLAIMS)), answers = nonempty(SLOT(f, T_FRAME, F_ANSWERS)),
        durable = nonempty(SLOT(f, T_FRAME, F_DURABLE));
    if (claims < 0 || answers < 0 || durable < 0) return -1;
    int exact = claims || answers || durable;
    if (put_array(w, exact ? 8 : 5) < 0 || put_section(w, SLOT(f, T_FRAME, F_NEAR), put_near) < 0
        || put_section(w, SLOT(f, T_FRAME, F_NEAR_ANSWERS), put_near_answer) < 0
        || put_section(w, SLOT(f, T_FRAME, F_WITHDRAWN), put_object) < 0
        || put_section(w, SLOT(f, T_FRAME, F_DEPOSITS), put_deposit) < 0
        || put_section(w, SLOT(f, T_FRAME, F_DEPOSITED), put_list) < 0)
        return -1;
    if (!exact) return 0;
    if (put_section(w, SLOT(f, T_FRAME, F_CLAIMS), put_claim) < 0
        || put_section(w, SLOT(f, T_FRAME, F_ANSWERS), put_answer) < 0)
        return -1;
    return put_section(w, SLOT(f, T_FRAME, F_DURABLE), put_object);
}

static PyObject *payload(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "payload(kind, sender, items)");
        return NULL;
    }
    if (VERIFY_LEN < 0 || !PyLong_CheckExact(args[0])) Py_RETURN_NONE;
    long kind = PyLong_AsLong(args[0]);
    if (kind < 1 || kind > 4) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Writer w = {NULL, 0, 0};
    int ok = put_array(&w, 3) == 0 && put(&w, (unsigned char)kind, 0, 0) == 0 && put_object(&w, args[1]) == 0;
    if (ok) {
        PyObject *items = args[2];
        ok = (kind == 1   ? put_section(&w, items, put_claim)
              : kind == 2 ? put_section(&w, items, put_answer)
              : kind == 3 ? put_section(&w, items, put_object)
                          : put_near_items(&w, items)) == 0;
    }
    PyObject *out = ok ? PyBytes_FromStringAndSize(w.buf, w.len) : NULL;
    PyMem_Free(w.buf);
    if (out == NULL) { /* Python packs it (rule 3), raising what msgpack raises */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(ClaimFrame, Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord, verify_bytes): the "
     "record types frame() builds and payload() reads, and the length of a sketch."},
    {"bind_records", (PyCFunction)(void (*)(void))bind_records, METH_FASTCALL,
     "bind_records(Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord): the record types make() "
     "builds."},
    {"make", (PyCFunction)(void (*)(void))make, METH_FASTCALL,
     "make(type, *values): a record of a type bound by bind_records(), its fields set to values in order."},
    {"frame", frame, METH_O, "frame(payload): the ClaimFrame of a claim frame's payload, or None."},
    {"payload", (PyCFunction)(void (*)(void))payload, METH_FASTCALL,
     "payload(kind, sender, items): the msgpack payload of a claim frame, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_claimwire", "The claim frame codec of polecat/cluster/claimwire.py in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__claimwire(void) {
    REVISIT = PyUnicode_InternFromString("revisit");
    if (REVISIT == NULL) return NULL;
    return PyModule_Create(&module_def);
}
