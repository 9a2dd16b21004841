/* polecat.store._warc: the native twins of python_record, payload_digest_from, new_record_id's
 * formatting and python_warc_date in polecat/store/warc.py (the rules below are python_record's; the
 * other three say theirs where they are defined).
 *
 * record(fields, content_type, first_line, headers, length_line, payload, rename, end) returns the bytes
 * python_record returns for the same arguments. The Python function is the specification:
 *
 * 1. Lines. The HTTP head is first_line, one "name: value" line a header (with rename, a name that
 *    lower()s to content-encoding, transfer-encoding or content-length gets "X-Archive-Orig-" in front),
 *    then "Content-Length: <length_line>" unless length_line is None; its lines are joined by CRLF and
 *    end with an empty line. The WARC head is "WARC/1.1", the fields, "Content-Type: <content_type>" and
 *    "Content-Length: <head's length + payload>", then an empty line.
 * 2. CR and LF. warc._lines replaces every CR and LF inside a line by a space (a line that has neither
 *    is left as it is), so that no field can end the header early. In UTF-8, bytes 0x0D and 0x0A are
 *    only ever those two characters, so they are replaced in each line's encoded bytes.
 * 3. Encoding. UTF-8, lone surrogates as backslash escapes (warc._encode): a str that has none is read
 *    through PyUnicode_AsUTF8AndSize; one that has some is encoded with "backslashreplace", which
 *    escapes each surrogate on its own, so encoding line by line equals encoding the joined text.
 * 4. Names. An ASCII name is compared without case; any other name through its own lower() (only a
 *    non-ASCII character that lowers to ASCII could make it match; none of the three names has one
 *    today, but lower() is what the specification calls).
 * 5. Types. fields is a list of str and headers a sequence of (str, str) pairs, where a str may be of
 *    a subclass that keeps str's __str__, __format__ and lower (see plain_str); anything else is a
 *    TypeError, on which warc.py runs the specification instead.
 *
 * Lengths are summed in Py_ssize_t with an overflow check before the one allocation of the result; the
 * GIL is held throughout; nothing is shared between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_PIECES_PER_LINE 4

/* One line's text: up to four str pieces, each as UTF-8 (borrowed from the str, or an owned bytes). */
typedef struct {
    const char *data[MAX_PIECES_PER_LINE];
    Py_ssize_t size[MAX_PIECES_PER_LINE];
    int count;
} Line;

typedef struct {
    Line *lines;
    Py_ssize_t used, cap;
    PyObject *owned; /* list of bytes objects made by "backslashreplace" encoding */
    Py_ssize_t total;
} Text;

static int text_init(Text *t, Py_ssize_t cap) {
    t->lines = PyMem_Malloc(sizeof(Line) * (size_t)(cap > 0 ? cap : 1));
    t->used = 0;
    t->cap = cap > 0 ? cap : 1;
    t->owned = NULL;
    t->total = 0;
    if (t->lines == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void text_free(Text *t) {
    PyMem_Free(t->lines);
    Py_XDECREF(t->owned);
}

static Line *text_line(Text *t) {
    if (t->used == t->cap) {
        Py_ssize_t cap = t->cap * 2;
        Line *grown = PyMem_Realloc(t->lines, sizeof(Line) * (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        t->lines = grown;
        t->cap = cap;
    }
    Line *line = &t->lines[t->used++];
    line->count = 0;
    return line;
}

static int add_size(Text *t, Py_ssize_t n) {
    if (n > PY_SSIZE_T_MAX - 64 - t->total) {
        PyErr_SetString(PyExc_OverflowError, "WARC head too large");
        return -1;
    }
    t->total += n;
    return 0;
}

static int add_bytes(Text *t, Line *line, const char *data, Py_ssize_t n) {
    line->data[line->count] = data;
    line->size[line->count++] = n;
    return add_size(t, n);
}

/* Rule 5: a str, or a str subclass that formats, prints and lowers as str does (aiohttp's header names
 * are multidict.istr): its f-string is then its text. The last such subclass seen is remembered (held,
 * so its address cannot be reused by another type). */
static PyObject *plain_subtype = NULL;

static int same_attr(PyTypeObject *tp, const char *name) {
    PyObject *mine = PyObject_GetAttrString((PyObject *)tp, name);
    PyObject *str_s = PyObject_GetAttrString((PyObject *)&PyUnicode_Type, name);
    int same = mine != NULL && mine == str_s;
    Py_XDECREF(mine);
    Py_XDECREF(str_s);
    PyErr_Clear();
    return same;
}

static int plain_str(PyObject *s) {
    PyTypeObject *tp = Py_TYPE(s);
    if (tp == &PyUnicode_Type || (PyObject *)tp == plain_subtype)
        return 1;
    if (!PyUnicode_Check(s) || tp->tp_str != PyUnicode_Type.tp_str || !same_attr(tp, "__format__") ||
        !same_attr(tp, "lower"))
        return 0;
    Py_XSETREF(plain_subtype, Py_NewRef((PyObject *)tp));
    return 1;
}

/* Rule 3: a str piece of a line, as UTF-8. */
static int add_str(Text *t, Line *line, PyObject *s) {
    if (!plain_str(s)) {
        PyErr_SetString(PyExc_TypeError, "WARC head pieces must be str");
        return -1;
    }
    Py_ssize_t n;
    const char *data = PyUnicode_AsUTF8AndSize(s, &n);
    if (data == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear();
        PyObject *encoded = PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace");
        if (encoded == NULL)
            return -1;
        if (t->owned == NULL && (t->owned = PyList_New(0)) == NULL) {
            Py_DECREF(encoded);
            return -1;
        }
        int failed = PyList_Append(t->owned, encoded);
        Py_DECREF(encoded);
        if (failed < 0)
            return -1;
        data = PyBytes_AS_STRING(encoded); /* kept alive by t->owned */
        n = PyBytes_GET_SIZE(encoded);
    }
    return add_bytes(t, line, data, n);
}

static int add_literal(Text *t, Line *line, const char *s) { return add_bytes(t, line, s, (Py_ssize_t)strlen(s)); }

/* Rule 4. */
static const char *const RENAMED[] = {"content-encoding", "transfer-encoding", "content-length"};

static int renamed(PyObject *name) {
    if (PyUnicode_IS_ASCII(name)) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(name);
        const char *s = (const char *)PyUnicode_1BYTE_DATA(name);
        for (size_t i = 0; i < sizeof RENAMED / sizeof *RENAMED; i++)
            if ((Py_ssize_t)strlen(RENAMED[i]) == n && PyOS_strnicmp(s, RENAMED[i], (size_t)n) == 0)
                return 1;
        return 0;
    }
    PyObject *lower = PyObject_CallMethod(name, "lower", NULL);
    if (lower == NULL)
        return -1;
    int hit = 0;
    if (PyUnicode_Check(lower))
        for (size_t i = 0; !hit && i < sizeof RENAMED / sizeof *RENAMED; i++)
            hit = PyUnicode_CompareWithASCIIString(lower, RENAMED[i]) == 0;
    Py_DECREF(lower);
    return hit;
}

/* Rule 2: the lines joined by CRLF, CR and LF inside a line made spaces. */
static char *write_lines(char *out, const Text *t, Py_ssize_t from, Py_ssize_t to) {
    for (Py_ssize_t i = from; i < to; i++) {
        if (i > from) {
            *out++ = '\r';
            *out++ = '\n';
        }
        const Line *line = &t->lines[i];
        for (int j = 0; j < line->count; j++) {
            const char *p = line->data[j];
            for (Py_ssize_t k = 0, n = line->size[j]; k < n; k++) {
                char c = p[k];
                *out++ = (c == '\r' || c == '\n') ? ' ' : c;
            }
        }
    }
    return out;
}

static PyObject *record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "record() takes 8 arguments");
        return NULL;
    }
    PyObject *fields = args[0], *content_type = args[1], *first_line = args[2], *headers = args[3];
    PyObject *length_line = args[4];
    Py_ssize_t payload = PyLong_AsSsize_t(args[5]);
    int rename = PyObject_IsTrue(args[6]), end = PyObject_IsTrue(args[7]);
    if ((payload == -1 && PyErr_Occurred()) || rename < 0 || end < 0)
        return NULL;
    if (payload < 0) {
        PyErr_SetString(PyExc_ValueError, "payload must not be negative");
        return NULL;
    }
    if (!PyList_Check(fields)) {
        PyErr_SetString(PyExc_TypeError, "record(): fields must be a list");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(headers, "record(): headers must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t nfields = PyList_GET_SIZE(fields), nheaders = PySequence_Fast_GET_SIZE(seq);
    PyObject *result = NULL, *length_text = NULL;
    char number[32];
    Text t;
    if (text_init(&t, nfields + nheaders + 4) < 0) {
        Py_DECREF(seq);
        return NULL;
    }

    /* The block's HTTP head: lines [0, block_end). */
    Line *line = text_line(&t);
    if (line == NULL || add_str(&t, line, first_line) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < nheaders; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "record(): each header must be a (name, value) tuple");
            goto done;
        }
        PyObject *name = PyTuple_GET_ITEM(pair, 0), *value = PyTuple_GET_ITEM(pair, 1);
        if (!plain_str(name) || !plain_str(value)) {
            PyErr_SetString(PyExc_TypeError, "record(): header names and values must be str");
            goto done;
        }
        int hit = rename ? renamed(name) : 0;
        if (hit < 0 || (line = text_line(&t)) == NULL)
            goto done;
        if ((hit && add_literal(&t, line, "X-Archive-Orig-") < 0) || add_str(&t, line, name) < 0 ||
            add_literal(&t, line, ": ") < 0 || add_str(&t, line, value) < 0)
            goto done;
    }
    if (length_line != Py_None) {
        /* f"{length_line}" of an int is its decimal str. */
        if (!PyLong_Check(length_line)) {
            PyErr_SetString(PyExc_TypeError, "record(): length_line must be an int or None");
            goto done;
        }
        if ((length_text = PyObject_Str(length_line)) == NULL || (line = text_line(&t)) == NULL ||
            add_literal(&t, line, "Content-Length: ") < 0 || add_str(&t, line, length_text) < 0)
            goto done;
    }
    Py_ssize_t block_end = t.used, block_pieces = t.total;
    Py_ssize_t block_size = block_pieces + 2 * (block_end - 1) + 4; /* the joins, then the empty line */

    /* The WARC fields: lines [block_end, t.used). */
    for (Py_ssize_t i = 0; i < nfields; i++) {
        if ((line = text_line(&t)) == NULL || add_str(&t, line, PyList_GET_ITEM(fields, i)) < 0)
            goto done;
    }
    Py_ssize_t fields_size = t.total - block_pieces + (nfields > 0 ? 2 * (nfields - 1) : 0);
    if (block_size > PY_SSIZE_T_MAX - payload) {
        PyErr_SetString(PyExc_OverflowError, "WARC record too large");
        goto done;
    }
    int digits = snprintf(number, sizeof number, "%zd", block_size + payload);
    Line ct; /* not a line of its own: written as it is, CR and LF included (as _head writes it) */
    ct.count = 0;
    Py_ssize_t before = t.total;
    if (add_str(&t, &ct, content_type) < 0)
        goto done;
    Py_ssize_t ct_size = t.total - before;
    /* "WARC/1.1\r\n" fields "\r\nContent-Type: " ct "\r\nContent-Length: " n "\r\n\r\n" */
    Py_ssize_t head_size = 10 + fields_size + 16 + ct_size + 18 + digits + 4;
    Py_ssize_t size = head_size + block_size + (end ? 4 : 0);
    result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL)
        goto done;
    char *out = PyBytes_AS_STRING(result);
    memcpy(out, "WARC/1.1\r\n", 10);
    out = write_lines(out + 10, &t, block_end, t.used);
    memcpy(out, "\r\nContent-Type: ", 16);
    memcpy(out + 16, ct.data[0], (size_t)ct_size);
    out += 16 + ct_size;
    memcpy(out, "\r\nContent-Length: ", 18);
    memcpy(out + 18, number, (size_t)digits);
    out += 18 + digits;
    memcpy(out, "\r\n\r\n", 4);
    out = write_lines(out + 4, &t, 0, block_end);
    memcpy(out, "\r\n\r\n", 4);
    out += 4;
    if (end) {
        memcpy(out, "\r\n\r\n", 4);
        out += 4;
    }
    if (out != PyBytes_AS_STRING(result) + size) { /* the sizes above are wrong: never hand out bytes */
        Py_CLEAR(result);
        PyErr_SetString(PyExc_SystemError, "record(): size mismatch");
    }
done:
    Py_XDECREF(length_text);
    text_free(&t);
    Py_DECREF(seq);
    return result;
}

/* payload_digest(sha256): "sha256:" + RFC 4648 base32 of the 32 bytes, with its "====" padding. */
static PyObject *payload_digest(PyObject *self, PyObject *arg) {
    static const char B32[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    if (!PyBytes_Check(arg) || PyBytes_GET_SIZE(arg) != 32) {
        PyErr_SetString(PyExc_ValueError, "a SHA-256 digest has 32 bytes");
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(arg);
    char out[7 + 56];
    memcpy(out, "sha256:", 7);
    char *o = out + 7;
    /* 32 bytes = six 5-byte groups of 8 characters, then 2 bytes (16 bits, padded to 20: 4 characters). */
    for (int g = 0; g < 6; g++) {
        uint64_t n = 0;
        for (int i = 0; i < 5; i++)
            n = n << 8 | d[g * 5 + i];
        for (int shift = 35; shift >= 0; shift -= 5)
            *o++ = B32[(n >> shift) & 31];
    }
    uint32_t tail = ((uint32_t)d[30] << 8 | d[31]) << 4;
    for (int shift = 15; shift >= 0; shift -= 5)
        *o++ = B32[(tail >> shift) & 31];
    memcpy(o, "====", 4);
    return PyUnicode_FromStringAndSize(out, (Py_ssize_t)sizeof out);
}

/* record_id(raw16): the version 4 UUID URN of 16 random bytes, as warc.new_record_id makes it. */
static PyObject *record_id(PyObject *self, PyObject *arg) {
    static const char HEX[] = "0123456789abcdef";
    if (!PyBytes_Check(arg) || PyBytes_GET_SIZE(arg) != 16) {
        PyErr_SetString(PyExc_ValueError, "record_id() takes 16 bytes");
        return NULL;
    }
    unsigned char raw[16];
    memcpy(raw, PyBytes_AS_STRING(arg), 16);
    raw[6] = (unsigned char)((raw[6] & 0x0F) | 0x40);
    raw[8] = (unsigned char)((raw[8] & 0x3F) | 0x80);
    char out[47]; /* "<urn:uuid:" 36 ">" */
    memcpy(out, "<urn:uuid:", 10);
    char *o = out + 10;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *o++ = '-';
        *o++ = HEX[raw[i] >> 4];
        *o++ = HEX[raw[i] & 15];
    }
    *o = '>';
    return PyUnicode_FromStringAndSize(out, (Py_ssize_t)sizeof out);
}

/* warc_date(ts): warc.python_warc_date(ts) for a finite ts whose second is in the years 1000..9999 UTC
 * (the four-digit years of strftime's %Y); None for any other, on which warc.py runs the specification (and its error). The
 * microseconds are rounded half to even as Python's round() does (nearbyint in the default rounding
 * mode, on the same double), carrying into the second. */
static PyObject *warc_date(PyObject *self, PyObject *arg) {
    double ts = PyFloat_AsDouble(arg);
    if (ts == -1.0 && PyErr_Occurred())
        return NULL;
    if (!isfinite(ts) || ts < -62135596800.0 || ts >= 253402300800.0)
        Py_RETURN_NONE;
    double whole;
    double frac = modf(ts, &whole);
    double micros = nearbyint(frac * 1e6);
    if (micros >= 1000000.0) {
        whole += 1;
        micros -= 1000000.0;
    } else if (micros < 0) {
        whole -= 1;
        micros += 1000000.0;
    }
    int64_t second = (int64_t)whole;
    /* Days from 1970-01-01 to a civil date (Howard Hinnant's algorithm), inverted. */
    int64_t days = second >= 0 ? second / 86400 : -((-second + 86399) / 86400);
    int64_t rest = second - days * 86400;
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t day = doy - (153 * mp + 2) / 5 + 1;
    int64_t month = mp < 10 ? mp + 3 : mp - 9;
    int64_t year = yoe + era * 400 + (month <= 2);
    if (year < 1000 || year > 9999) /* strftime's %Y writes years before 1000 unpadded */
        Py_RETURN_NONE;
    char out[40];
    int n = snprintf(out, sizeof out, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", (int)year, (int)month, (int)day,
                     (int)(rest / 3600), (int)(rest / 60 % 60), (int)(rest % 60), (int)micros);
    return PyUnicode_FromStringAndSize(out, n);
}

static PyMethodDef methods[] = {
    {"payload_digest", payload_digest, METH_O,
     "payload_digest(sha256): the WARC-Payload-Digest of a body whose SHA-256 is sha256\n"
     "(polecat.store.warc.payload_digest_from)."},
    {"record_id", record_id, METH_O,
     "record_id(raw16): the WARC-Record-ID URN of 16 random bytes (polecat.store.warc.new_record_id)."},
    {"warc_date", warc_date, METH_O,
     "warc_date(ts): polecat.store.warc.python_warc_date(ts), or None outside the years 1000-9999."},
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL,
     "record(fields, content_type, first_line, headers, length_line, payload, rename, end): a WARC\n"
     "record up to its payload (polecat.store.warc.python_record)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "polecat.store._warc",
    "Native WARC head assembly (polecat.store.warc.python_record is the specification).",
    0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__warc(void) { return PyModuleDef_Init(&module_def); }
