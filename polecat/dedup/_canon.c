/* polecat.dedup._canon: the link loop and the miss path of polecat/dedup/canon.py in C.
 *
 * canon.py is the specification (its module docstring has the rules, canonicalize_links's docstring the
 * memo keys); this kernel gives the same results, memo entries and counters for every input:
 *
 * 1. Kernel.links(hrefs, base) is Canonicalizer.canonicalize_links: the same memo keys (tuples
 *    ``(base part, href without its fragment)``) and values (``(canonical or None, rewritten)``) in the
 *    same dict, the same bound (cleared when full), the same counters. Non-ASCII hrefs run here too
 *    (never cut at a ``#``, as in canon.py); only the str operations differ.
 * 2. resolve is Canonicalizer._resolve: ada's C API (parse with or without the base, validity, scheme,
 *    href, components), then rule 4 (percent-escapes) and rule 5 (query) on the ASCII serialization.
 *    A str that does not encode (lone surrogates) gives (None, False) as in canon.py; a serialization
 *    that is not ASCII raises UnicodeDecodeError as canon.py's ``.decode("ascii")`` would.
 * 3. Tracking keys: canon.py lowercases a key with str.lower() and compares it with the lowercased
 *    patterns. A key of an ASCII query is ASCII, so its lower() is ASCII lowercasing, and no non-ASCII
 *    pattern can match it: only the ASCII patterns are kept here.
 * 4. keep_query_order: the host is cut from the href as polecat/hosts.py host_key does and given to the
 *    HostPatternMap's __contains__ (a Python call, only for a query on a crawl that has patterns).
 * 5. simple_link is Canonicalizer._plain: on a base that is its own serialization, a simple href's
 *    WHATWG serialization is built by string work (the base's origin or directory, or the href's own
 *    origin as ada serializes it, memoized in origins; dot segments removed in place) and handed to
 *    canonical_form as ada's would be; such hrefs never touch the memo, as in canon.py.
 *
 * ada is called through function pointers that canon.py takes from the cffi module of the ada_url package
 * (ffi.addressof), so building this needs no ada headers: the few prototypes and structs below are
 * copied from ada_c.h. bind_ada() checks them on known URLs before the kernel may be used.
 *
 * Bad input: every index from ada is clamped as Python slicing clamps it; buffers are sized from the
 * serialization's length (the canonical form is never longer); every ada object is freed on every path.
 * The GIL is held throughout (a page is tens of microseconds). The only state shared across calls is the
 * ada function table, written once by bind_ada.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* From ada_c.h (ada-url 2.x/3.x C API). */
typedef struct {
    const char *data;
    size_t length;
} ada_string;

typedef struct {
    uint32_t protocol_end;
    uint32_t username_end;
    uint32_t host_start;
    uint32_t host_end;
    uint32_t port;
    uint32_t pathname_start;
    uint32_t search_start;
    uint32_t hash_start;
} ada_url_components;

typedef void *ada_url;

#define ADA_OMITTED 0xffffffffu
#define SCHEME_HTTP 0
#define SCHEME_HTTPS 2

typedef struct {
    ada_url (*parse)(const char *, size_t);
    ada_url (*parse_with_base)(const char *, size_t, const char *, size_t);
    bool (*can_parse)(const char *, size_t);
    void (*free)(ada_url);
    bool (*is_valid)(ada_url);
    uint8_t (*scheme_type)(ada_url);
    ada_string (*get_href)(ada_url);
    const ada_url_components *(*get_components)(ada_url);
} ada_api;

#define ADA_FUNCTIONS 8
static ada_api ada;
static bool ada_bound = false;

/* ---- rule 4: percent-escapes ------------------------------------------------------------------- */

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool unreserved(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

/* canon._normalize_pct of src[0:n] into out (room for n bytes); returns the length written. A '%' not
 * followed by two hex digits is copied as it is, and so is what follows it (canon.py splits at every
 * '%' and looks only at the first two characters of each piece). */
static Py_ssize_t normalize_pct(const char *src, Py_ssize_t n, char *out) {
    static const char HEX[] = "0123456789ABCDEF";
    Py_ssize_t w = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int hi, lo;
        if (src[i] == '%' && i + 2 < n && (hi = hex_value((unsigned char)src[i + 1])) >= 0 &&
            (lo = hex_value((unsigned char)src[i + 2])) >= 0) {
            unsigned char c = (unsigned char)(hi * 16 + lo);
            if (unreserved(c)) {
                out[w++] = (char)c;
            } else {
                out[w++] = '%';
                out[w++] = HEX[hi];
                out[w++] = HEX[lo];
            }
            i += 2;
        } else {
            out[w++] = src[i];
        }
    }
    return w;
}

/* ---- rule 5: the query ------------------------------------------------------------------------- */

typedef struct {
    const char *text; /* lowercased pattern (ASCII) */
    Py_ssize_t len;
} stem;

typedef struct {
    const char *start;
    Py_ssize_t len;
    Py_ssize_t key_len; /* up to the first '=' (str.partition) */
    Py_ssize_t order;   /* position in the query: equal keys keep it (a stable sort) */
} param;

static int compare_params(const void *pa, const void *pb) {
    const param *a = pa, *b = pb;
    Py_ssize_t n = a->key_len < b->key_len ? a->key_len : b->key_len;
    int c = memcmp(a->start, b->start, (size_t)n);
    if (c != 0) return c;
    if (a->key_len != b->key_len) return a->key_len < b->key_len ? -1 : 1;
    return a->order < b->order ? -1 : (a->order > b->order);
}

static bool lower_equals(const char *key, const stem *s) {
    for (Py_ssize_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
        if (c != (unsigned char)s->text[i]) return false;
    }
    return true;
}

/* ---- the kernel object ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *memo;       /* the Canonicalizer's dict: (base part, href) -> (canonical | None, rewritten) */
    PyObject *origins;    /* scheme://authority as written -> as serialized, or None (canon._plain) */
    Py_ssize_t memo_entries;
    PyObject *keep_order; /* HostPatternMap.__contains__, or NULL when there is no pattern */
    PyObject *stems;      /* bytes holding every stem's text, owned here */
    stem *exact;
    Py_ssize_t n_exact;
    stem *prefixes;
    Py_ssize_t n_prefixes;
    uint64_t total, collapsed, rejected;
} Kernel;

static bool is_tracking(const Kernel *k, const char *key, Py_ssize_t key_len) {
    for (Py_ssize_t i = 0; i < k->n_exact; i++)
        if (k->exact[i].len == key_len && lower_equals(key, &k->exact[i])) return true;
    for (Py_ssize_t i = 0; i < k->n_prefixes; i++)
        if (k->prefixes[i].len <= key_len && lower_equals(key, &k->prefixes[i])) return true;
    return false;
}

/* Canonicalizer._canonical_query of q[0:n] (already percent-normalized) into out; returns its length.
 * params has room for n / 2 + 2 entries (kept pieces are non-empty and '&'-separated). */
static Py_ssize_t canonical_query(const Kernel *k, const char *q, Py_ssize_t n, bool sort, param *params,
                                  char *out) {
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i <= n;) {
        const char *amp = memchr(q + i, '&', (size_t)(n - i));
        Py_ssize_t end = amp ? amp - q : n;
        if (end > i) {
            const char *eq = memchr(q + i, '=', (size_t)(end - i));
            Py_ssize_t key_len = eq ? eq - (q + i) : end - i;
            if (!is_tracking(k, q + i, key_len)) {
                params[kept] = (param){q + i, end - i, key_len, kept};
                kept++;
            }
        }
        i = end + 1;
    }
    if (sort && kept > 1) qsort(params, (size_t)kept, sizeof(param), compare_params);
    Py_ssize_t w = 0;
    for (Py_ssize_t i = 0; i < kept; i++) {
        if (i) out[w++] = '&';
        memcpy(out + w, params[i].start, (size_t)params[i].len);
        w += params[i].len;
    }
    return w;
}

/* 1 if the query of href (an http(s) serialization) keeps its order: polecat/hosts.py host_key(href) in the map. */
static int keeps_order(const Kernel *k, const char *href, Py_ssize_t n) {
    if (k->keep_order == NULL) return 0;
    Py_ssize_t start = -1;
    for (Py_ssize_t i = 0; i + 1 < n; i++) {
        if (href[i] == '/' && href[i + 1] == '/') {
            start = i + 2;
            break;
        }
    }
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "substring not found");
        return -1;
    }
    const char *slash = memchr(href + start, '/', (size_t)(n - start));
    Py_ssize_t end = slash ? slash - href : n;
    for (Py_ssize_t i = end - 1; i >= start; i--) {
        if (href[i] == '@') {
            start = i + 1;
            break;
        }
    }
    PyObject *host = PyUnicode_DecodeASCII(href + start, end - start, NULL);
    if (host == NULL) return -1;
    PyObject *found = PyObject_CallOneArg(k->keep_order, host);
    Py_DECREF(host);
    if (found == NULL) return -1;
    int keep = PyObject_IsTrue(found);
    Py_DECREF(found);
    return keep;
}

static Py_ssize_t clamp(uint32_t index, Py_ssize_t n) { return (Py_ssize_t)index > n ? n : (Py_ssize_t)index; }

/* The canonical form of the ASCII serialization h[0:n] with components c (rules 3-5); sets *rewritten. */
static PyObject *canonical_form(const Kernel *k, const char *h, Py_ssize_t n, const ada_url_components *c,
                                bool *rewritten) {
    enum { STACK = 512 };
    char stack_out[2 * STACK + 2], stack_tmp[STACK];
    param stack_params[STACK / 2 + 2];
    char *out = stack_out, *tmp = stack_tmp;
    param *params = stack_params;
    PyObject *result = NULL;
    if (n > STACK) {
        out = PyMem_Malloc((size_t)(2 * n + 2));
        tmp = PyMem_Malloc((size_t)n);
        params = PyMem_Malloc(sizeof(param) * (size_t)(n / 2 + 2));
        if (out == NULL || tmp == NULL || params == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    /* Python slices: href[a:b] is empty when b <= a, and both clamp to the length. */
    Py_ssize_t path_start = clamp(c->pathname_start, n);
    Py_ssize_t end = c->hash_start == ADA_OMITTED ? n : clamp(c->hash_start, n);
    Py_ssize_t path_end = c->search_start == ADA_OMITTED ? end : clamp(c->search_start, n);
    Py_ssize_t w = path_start;
    memcpy(out, h, (size_t)path_start);
    if (path_end > path_start) {
        Py_ssize_t len = path_end - path_start;
        if (memchr(h + path_start, '%', (size_t)len))
            w += normalize_pct(h + path_start, len, out + w);
        else {
            memcpy(out + w, h + path_start, (size_t)len);
            w += len;
        }
    }
    if (c->search_start != ADA_OMITTED) {
        int keep = keeps_order(k, h, n);
        if (keep < 0) goto done;
        Py_ssize_t q_start = clamp(c->search_start, n - 1) + 1;
        if (q_start > n) q_start = n;
        Py_ssize_t q_len = end > q_start ? end - q_start : 0;
        const char *q = h + q_start;
        if (memchr(q, '%', (size_t)q_len)) {
            q_len = normalize_pct(q, q_len, tmp);
            q = tmp;
        }
        Py_ssize_t written = canonical_query(k, q, q_len, !keep, params, out + w + 1);
        if (written) {
            out[w] = '?';
            w += 1 + written;
        }
    }
    *rewritten = w != n || memcmp(out, h, (size_t)n) != 0;
    result = PyUnicode_New(w, 127);
    if (result != NULL) memcpy(PyUnicode_1BYTE_DATA(result), out, (size_t)w);
done:
    if (out != stack_out) {
        PyMem_Free(out);
        PyMem_Free(tmp);
        PyMem_Free(params);
    }
    return result;
}

/* Canonicalizer._resolve: *canonical (new ref, or Py_None) and *rewritten of url against the UTF-8 base
 * (NULL: parsed alone). Returns -1 with an exception set. */
static int resolve(const Kernel *k, PyObject *url, const char *base, Py_ssize_t base_len,
                   PyObject **canonical, bool *rewritten) {
    PyObject *encoded = NULL;
    const char *raw;
    Py_ssize_t raw_len;
    *rewritten = false;
    if (PyUnicode_IS_ASCII(url)) {
        raw = (const char *)PyUnicode_1BYTE_DATA(url);
        raw_len = PyUnicode_GET_LENGTH(url);
    } else {
        encoded = PyUnicode_AsUTF8String(url);
        if (encoded == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
            PyErr_Clear(); /* lone surrogates: the text was mis-decoded upstream */
            *canonical = Py_NewRef(Py_None);
            return 0;
        }
        raw = PyBytes_AS_STRING(encoded);
        raw_len = PyBytes_GET_SIZE(encoded);
    }
    ada_url obj = base == NULL ? ada.parse(raw, (size_t)raw_len)
                               : ada.parse_with_base(raw, (size_t)raw_len, base, (size_t)base_len);
    Py_XDECREF(encoded);
    if (obj == NULL) return PyErr_NoMemory(), -1;
    int status = 0;
    uint8_t scheme;
    if (!ada.is_valid(obj) || ((scheme = ada.scheme_type(obj)) != SCHEME_HTTP && scheme != SCHEME_HTTPS)) {
        *canonical = Py_NewRef(Py_None);
        goto done;
    }
    ada_string href = ada.get_href(obj);
    if (href.length > (size_t)PY_SSIZE_T_MAX) {
        status = -1;
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n = (Py_ssize_t)href.length;
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((unsigned char)href.data[i] >= 0x80) { /* as canon.py's .decode("ascii") */
            PyObject *failed = PyUnicode_DecodeASCII(href.data, n, NULL);
            Py_XDECREF(failed);
            status = -1;
            goto done;
        }
    }
    if (!memchr(href.data, '?', href.length) && !memchr(href.data, '#', href.length) &&
        !memchr(href.data, '%', href.length)) {
        *canonical = PyUnicode_New(n, 127); /* nothing below would change it */
        if (*canonical == NULL) {
            status = -1;
            goto done;
        }
        memcpy(PyUnicode_1BYTE_DATA(*canonical), href.data, href.length);
        goto done;
    }
    const ada_url_components *parts = ada.get_components(obj);
    if (parts == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ada_get_components gave NULL");
        status = -1;
        goto done;
    }
    *canonical = canonical_form(k, href.data, n, parts, rewritten);
    if (*canonical == NULL) status = -1;
done:
    ada.free(obj);
    return status;
}

/* The UTF-8 of a base as canon.py encodes it; *ok false when it does not encode. */
static const char *utf8_of(PyObject *text, Py_ssize_t *len, bool *ok) {
    const char *raw = PyUnicode_AsUTF8AndSize(text, len);
    *ok = raw != NULL;
    if (raw == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return NULL;
        PyErr_Clear();
    }
    return raw;
}

/* Canonicalizer.canonicalize: resolve and count. Returns a new reference (a str or None). */
static PyObject *canonicalize_one(Kernel *k, PyObject *url, PyObject *base) {
    const char *raw_base = NULL;
    Py_ssize_t base_len = 0;
    if (base != Py_None) {
        bool ok;
        raw_base = utf8_of(base, &base_len, &ok);
        if (!ok) {
            if (PyErr_Occurred()) return NULL;
            raw_base = "\xff"; /* a base that does not parse: nothing resolves against it */
            base_len = 1;
        }
    }
    PyObject *canonical;
    bool rewritten;
    if (resolve(k, url, raw_base, base_len, &canonical, &rewritten) < 0) return NULL;
    k->total++;
    k->rejected += canonical == Py_None;
    k->collapsed += rewritten;
    return canonical;
}

static bool starts_with_http(PyObject *s) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    static const char HTTPS[] = "https://";
    Py_ssize_t i = 0;
    for (; i < 4; i++)
        if (i >= n || PyUnicode_READ(kind, data, i) != (Py_UCS4)HTTPS[i]) return false;
    if (i < n && PyUnicode_READ(kind, data, i) == 's') i++;
    return i + 3 <= n && PyUnicode_READ(kind, data, i) == ':' && PyUnicode_READ(kind, data, i + 1) == '/' &&
           PyUnicode_READ(kind, data, i + 2) == '/';
}

enum key_part { NO_KEY, KEY_NONE_BASE, KEY_ORIGIN, KEY_DIR, KEY_WHOLE_BASE };

/* canon._memo_key for key_href (the href without its fragment; fragment_only when it was only one). */
static enum key_part memo_key(PyObject *href, bool fragment_only, bool has_origin, bool has_dir) {
    if (fragment_only) return KEY_WHOLE_BASE;
    Py_ssize_t n = PyUnicode_GET_LENGTH(href);
    if (n == 0) return NO_KEY;
    Py_UCS4 first = PyUnicode_READ_CHAR(href, 0);
    if (first == '?' || first == '#' || first <= ' ') return NO_KEY; /* the parser strips a leading C0 */
    if (starts_with_http(href)) return KEY_NONE_BASE;
    if (first == '/' && has_origin) return KEY_ORIGIN;
    if (PyUnicode_FindChar(href, ':', 0, n, 1) >= 0 || !has_dir) return NO_KEY; /* "http:?x" */
    return KEY_DIR;
}

/* canon._authority_prefix: scheme://authority of an http(s) base, or "" */
static PyObject *authority_prefix(PyObject *base) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(base);
    if (!starts_with_http(base)) return PyUnicode_New(0, 0);
    Py_ssize_t slashes = PyUnicode_READ_CHAR(base, 4) == 's' ? 6 : 5;
    Py_ssize_t end = PyUnicode_FindChar(base, '/', slashes + 2, n, 1);
    if (end == -2) return NULL;
    return end < 0 ? Py_NewRef(base) : PyUnicode_Substring(base, 0, end);
}

/* ---- simple hrefs on a serialized base (canon.Canonicalizer._plain) ----------------------------- */

#define ORIGIN_ENTRIES 4096 /* canon.ORIGIN_ENTRIES */

typedef struct {
    Py_ssize_t path_start; /* the base's origin is base[0:path_start] */
    Py_ssize_t dir_end;    /* its directory path is base[path_start:dir_end] (up to its last '/') */
} plain_base;

/* canon._plain_base: true (and *pb set) when the http(s) base[0:n] is its own serialization. */
static bool plain_base_of(const char *base, Py_ssize_t n, plain_base *pb) {
    ada_url obj = ada.parse(base, (size_t)n);
    if (obj == NULL) return false;
    bool plain = false;
    uint8_t scheme;
    if (ada.is_valid(obj) && ((scheme = ada.scheme_type(obj)) == SCHEME_HTTP || scheme == SCHEME_HTTPS)) {
        ada_string href = ada.get_href(obj);
        const ada_url_components *c = ada.get_components(obj);
        if (c != NULL && href.length == (size_t)n && memcmp(href.data, base, (size_t)n) == 0 &&
            c->pathname_start < (uint32_t)n) {
            Py_ssize_t end = c->search_start != ADA_OMITTED ? clamp(c->search_start, n)
                             : c->hash_start != ADA_OMITTED ? clamp(c->hash_start, n) : n;
            pb->path_start = c->pathname_start;
            for (Py_ssize_t i = end - 1; i >= pb->path_start; i--) {
                if (base[i] == '/') {
                    pb->dir_end = i + 1;
                    plain = true;
                    break;
                }
            }
        }
    }
    ada.free(obj);
    return plain;
}

/* canon._serialized_origin of origin[0:n] (ASCII): a new str, or None. */
static PyObject *serialized_origin(const char *origin, Py_ssize_t n) {
    char stack[256];
    char *raw = n < (Py_ssize_t)sizeof stack ? stack : PyMem_Malloc((size_t)n + 1);
    if (raw == NULL) return PyErr_NoMemory();
    memcpy(raw, origin, (size_t)n);
    raw[n] = '/';
    ada_url obj = ada.parse(raw, (size_t)n + 1);
    if (raw != stack) PyMem_Free(raw);
    if (obj == NULL) return PyErr_NoMemory();
    PyObject *result = NULL;
    uint8_t scheme;
    if (ada.is_valid(obj) && ((scheme = ada.scheme_type(obj)) == SCHEME_HTTP || scheme == SCHEME_HTTPS)) {
        ada_string href = ada.get_href(obj);
        const ada_url_components *c = ada.get_components(obj);
        bool ascii = true;
        for (size_t i = 0; i < href.length; i++) ascii &= (unsigned char)href.data[i] < 0x80;
        if (c != NULL && ascii && href.length > 0 && (size_t)c->pathname_start == href.length - 1) {
            result = PyUnicode_New((Py_ssize_t)c->pathname_start, 127);
            if (result != NULL) memcpy(PyUnicode_1BYTE_DATA(result), href.data, c->pathname_start);
        }
    } else {
        result = Py_NewRef(Py_None);
    }
    if (result == NULL && !PyErr_Occurred()) result = Py_NewRef(Py_None);
    ada.free(obj);
    return result;
}

/* The memoized serialized origin of h[0:n]: a borrowed str or None; NULL with an exception set. */
static PyObject *origin_of(Kernel *k, const char *h, Py_ssize_t n) {
    PyObject *key = PyUnicode_New(n, 127);
    if (key == NULL) return NULL;
    memcpy(PyUnicode_1BYTE_DATA(key), h, (size_t)n);
    PyObject *known = PyDict_GetItemWithError(k->origins, key); /* borrowed */
    if (known == NULL && !PyErr_Occurred()) {
        PyObject *made = serialized_origin(h, n);
        if (made != NULL) {
            if (PyDict_GET_SIZE(k->origins) >= ORIGIN_ENTRIES) PyDict_Clear(k->origins);
            if (PyDict_SetItem(k->origins, key, made) == 0) known = made; /* the dict holds it */
            Py_DECREF(made);
        }
    }
    Py_DECREF(key);
    return known;
}

/* canon._SIMPLE_PATH / _SIMPLE_QUERY: the characters the WHATWG parser copies as they are. */
static bool simple_chars(const char *s, Py_ssize_t n, bool query) {
    static const char PATH[] = "-._~!$&'()*+,;=:@/";
    static const char QUERY[] = "-._~!$&()*+,;=:@/?";
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) continue;
        if (c == '%') {
            if (i + 2 >= n) return false;
            if (hex_value((unsigned char)s[i + 1]) < 0 || hex_value((unsigned char)s[i + 2]) < 0) return false;
            if (!query && s[i + 1] == '2' && (s[i + 2] == 'e' || s[i + 2] == 'E')) return false;
            i += 2;
            continue;
        }
        if (c == 0 || !strchr(query ? QUERY : PATH, c)) return false;
    }
    return true;
}

/* canon._remove_dot_segments of p[0:n] (p[0] is '/') in place; returns the new length. The write
 * position never passes the read position: a segment is copied, dropped, or (last) left as a '/'. */
static Py_ssize_t remove_dot_segments(char *p, Py_ssize_t n) {
    Py_ssize_t w = 0;
    for (Py_ssize_t r = 0; r < n;) {
        Py_ssize_t s = r + 1, e = s;
        while (e < n && p[e] != '/') e++;
        bool last = e >= n, dots = e - s == 2 && p[s] == '.' && p[s + 1] == '.', dot = e - s == 1 && p[s] == '.';
        if (dots)
            while (w > 0 && p[--w] != '/') {
            }
        if (dots || dot) {
            if (last) p[w++] = '/';
        } else {
            p[w] = '/';
            memmove(p + w + 1, p + s, (size_t)(e - s));
            w += 1 + e - s;
        }
        r = e;
    }
    return w;
}

/* The simple-href path of Canonicalizer.canonicalize_links: 1 when href (ASCII, fragment cut at cut) was
 * canonicalized and appended to out, 0 when it is not simple, -1 with an exception set. */
static int simple_link(Kernel *k, PyObject *href, const char *base, const plain_base *pb, Py_ssize_t cut,
                       PyObject *out) {
    const char *h = (const char *)PyUnicode_1BYTE_DATA(href);
    Py_ssize_t n = PyUnicode_GET_LENGTH(href);
    const char *q = memchr(h, '?', (size_t)n);
    Py_ssize_t path_len = q ? q - h : n, query_len = q ? n - path_len : 0; /* query_len counts the '?' */
    const char *origin = base, *dir = base, *tail = h;
    Py_ssize_t origin_len = pb->path_start, dir_len = 0, tail_len = path_len;
    if ((path_len >= 7 && memcmp(h, "http://", 7) == 0) || (path_len >= 8 && memcmp(h, "https://", 8) == 0)) {
        Py_ssize_t from = h[4] == 's' ? 8 : 7;
        const char *slash = memchr(h + from, '/', (size_t)(path_len - from));
        if (slash == NULL) return 0;
        PyObject *known = origin_of(k, h, slash - h);
        if (known == NULL) return -1;
        if (known == Py_None) return 0;
        origin = (const char *)PyUnicode_1BYTE_DATA(known);
        origin_len = PyUnicode_GET_LENGTH(known);
        tail = slash;
        tail_len = path_len - (slash - h);
    } else if (path_len > 0 && h[0] == '/') {
        if (path_len > 1 && h[1] == '/') return 0; /* scheme-relative: //host */
    } else {
        if (path_len == 0 || memchr(h, ':', (size_t)path_len)) return 0; /* a scheme, or only a query */
        dir = base + pb->path_start;
        dir_len = pb->dir_end - pb->path_start;
    }
    if (!simple_chars(tail, tail_len, false) || (q && !simple_chars(q + 1, query_len - 1, true))) return 0;
    enum { STACK = 1024 };
    char stack[STACK];
    Py_ssize_t size = origin_len + dir_len + tail_len + query_len;
    char *buf = size <= STACK ? stack : PyMem_Malloc((size_t)size);
    if (buf == NULL) return PyErr_NoMemory(), -1;
    memcpy(buf, origin, (size_t)origin_len);
    memcpy(buf + origin_len, dir, (size_t)dir_len);
    memcpy(buf + origin_len + dir_len, tail, (size_t)tail_len);
    Py_ssize_t path = dir_len + tail_len;
    char *p = buf + origin_len;
    for (Py_ssize_t i = 0; i + 1 < path; i++) {
        if (p[i] == '/' && p[i + 1] == '.') {
            path = remove_dot_segments(p, path);
            break;
        }
    }
    Py_ssize_t w = origin_len + path;
    ada_url_components c = {0, 0, 0, 0, 0, (uint32_t)origin_len, ADA_OMITTED, ADA_OMITTED};
    if (q) {
        c.search_start = (uint32_t)w;
        memcpy(buf + w, q, (size_t)query_len);
        w += query_len;
    }
    bool rewritten;
    PyObject *canonical = canonical_form(k, buf, w, &c, &rewritten);
    if (buf != stack) PyMem_Free(buf);
    if (canonical == NULL) return -1;
    k->total++;
    k->collapsed += rewritten || cut >= 0;
    int status = PyList_Append(out, canonical);
    Py_DECREF(canonical);
    return status < 0 ? -1 : 1;
}

/* Canonicalizer.canonicalize_links for one href; appends to out. */
static int one_link(Kernel *k, PyObject *href, PyObject *base, const char *raw_base, Py_ssize_t base_len,
                    const plain_base *pb, PyObject *parts[], PyObject *out) {
    if (!PyUnicode_Check(href)) {
        PyErr_Format(PyExc_TypeError, "href must be str, not %.100s", Py_TYPE(href)->tp_name);
        return -1;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(href), cut = -1;
    if (PyUnicode_IS_ASCII(href)) {
        const char *data = (const char *)PyUnicode_1BYTE_DATA(href);
        const char *hash = memchr(data, '#', (size_t)n);
        if (hash) cut = hash - data;
        if (cut > 0 && (unsigned char)data[cut - 1] <= ' ') cut = -1; /* the parser would strip it */
    }
    PyObject *key_href = cut < 0 ? Py_NewRef(href) : PyUnicode_Substring(href, 0, cut);
    if (key_href == NULL) return -1;
    if (pb != NULL && PyUnicode_IS_ASCII(href)) {
        int simple = simple_link(k, key_href, raw_base, pb, cut, out);
        if (simple != 0) {
            Py_DECREF(key_href);
            return simple < 0 ? -1 : 0;
        }
    }
    enum key_part part = memo_key(key_href, cut == 0, PyUnicode_GET_LENGTH(parts[KEY_ORIGIN]) > 0,
                                  PyUnicode_GET_LENGTH(parts[KEY_DIR]) > 0);
    PyObject *canonical;
    int status = -1;
    if (part == NO_KEY) {
        Py_DECREF(key_href);
        canonical = canonicalize_one(k, href, base);
        if (canonical == NULL) return -1;
        status = canonical == Py_None ? 0 : PyList_Append(out, canonical);
        Py_DECREF(canonical);
        return status;
    }
    PyObject *key = PyTuple_Pack(2, parts[part], key_href);
    if (key == NULL) goto done;
    /* Keys and values hold only str, None and bool: the collector would untrack them at its first pass,
     * after traversing them; untracked now, the memo's tuples never cost a collection anything. */
    PyObject_GC_UnTrack(key);
    PyObject *hit = PyDict_GetItemWithError(k->memo, key); /* borrowed */
    if (hit == NULL) {
        if (PyErr_Occurred()) goto done;
        bool rewritten;
        if (resolve(k, key_href, part == KEY_NONE_BASE ? NULL : raw_base, base_len, &canonical, &rewritten) < 0)
            goto done;
        hit = PyTuple_Pack(2, canonical, rewritten ? Py_True : Py_False);
        Py_DECREF(canonical);
        if (hit == NULL) goto done;
        PyObject_GC_UnTrack(hit);
        if (PyDict_GET_SIZE(k->memo) >= k->memo_entries) PyDict_Clear(k->memo);
        int stored = PyDict_SetItem(k->memo, key, hit);
        Py_DECREF(hit); /* the memo holds it */
        if (stored < 0) goto done;
    } else if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 2) {
        PyErr_SetString(PyExc_TypeError, "memo values must be (canonical, rewritten) pairs");
        goto done;
    }
    canonical = PyTuple_GET_ITEM(hit, 0);
    k->total++;
    status = 0;
    if (canonical == Py_None) {
        k->rejected++;
        goto done;
    }
    /* A fragment is always dropped, so an href that had one was always rewritten. */
    k->collapsed += PyTuple_GET_ITEM(hit, 1) == Py_True || cut >= 0;
    status = PyList_Append(out, canonical);
done:
    Py_XDECREF(key);
    Py_DECREF(key_href);
    return status;
}

static PyObject *Kernel_links(Kernel *k, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "links(hrefs, base: str)");
        return NULL;
    }
    PyObject *base = args[1];
    PyObject *seq = PySequence_Fast(args[0], "hrefs must be iterable");
    if (seq == NULL) return NULL;
    /* hrefs is read item by item, each held while it is used: keep_order is a Python call. */
    PyObject *out = PyList_New(0);
    PyObject *parts[KEY_WHOLE_BASE + 1] = {NULL};
    if (out == NULL) goto fail;
    Py_ssize_t base_len;
    bool ok;
    const char *raw_base = utf8_of(base, &base_len, &ok);
    if (!ok) {
        if (PyErr_Occurred()) goto fail;
        raw_base = "";
        base_len = 0;
    }
    if (!ada.can_parse(raw_base, (size_t)base_len)) { /* nothing resolves against it */
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *href = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
            PyObject *canonical = NULL;
            if (PyUnicode_Check(href))
                canonical = canonicalize_one(k, href, base);
            else
                PyErr_Format(PyExc_TypeError, "href must be str, not %.100s", Py_TYPE(href)->tp_name);
            Py_DECREF(href);
            if (canonical == NULL) goto fail;
            int appended = canonical == Py_None ? 0 : PyList_Append(out, canonical);
            Py_DECREF(canonical);
            if (appended < 0) goto fail;
        }
        Py_DECREF(seq);
        return out;
    }
    Py_ssize_t slash = PyUnicode_FindChar(base, '/', 0, PyUnicode_GET_LENGTH(base), -1);
    if (slash == -2) goto fail;
    parts[KEY_NONE_BASE] = PyUnicode_New(0, 0);
    parts[KEY_ORIGIN] = authority_prefix(base);
    parts[KEY_DIR] = PyUnicode_Substring(base, 0, slash + 1);
    parts[KEY_WHOLE_BASE] = Py_NewRef(base);
    if (!parts[KEY_NONE_BASE] || !parts[KEY_ORIGIN] || !parts[KEY_DIR]) goto fail;
    plain_base pb;
    bool plain = plain_base_of(raw_base, base_len, &pb);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *href = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        int status = one_link(k, href, base, raw_base, base_len, plain ? &pb : NULL, parts, out);
        Py_DECREF(href);
        if (status < 0) goto fail;
    }
    for (int p = 0; p <= KEY_WHOLE_BASE; p++) Py_XDECREF(parts[p]);
    Py_DECREF(seq);
    return out;
fail:
    for (int p = 0; p <= KEY_WHOLE_BASE; p++) Py_XDECREF(parts[p]);
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *Kernel_canonicalize(Kernel *k, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2 || !PyUnicode_Check(args[0]) ||
        (nargs == 2 && args[1] != Py_None && !PyUnicode_Check(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "canonicalize(url: str, base: str | None = None)");
        return NULL;
    }
    return canonicalize_one(k, args[0], nargs == 2 ? args[1] : Py_None);
}

static PyObject *Kernel_resolve(Kernel *k, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyUnicode_Check(args[0]) || (args[1] != Py_None && !PyBytes_Check(args[1]))) {
        PyErr_SetString(PyExc_TypeError, "resolve(url: str, base: bytes | None)");
        return NULL;
    }
    PyObject *canonical;
    bool rewritten;
    const char *base = args[1] == Py_None ? NULL : PyBytes_AS_STRING(args[1]);
    Py_ssize_t base_len = args[1] == Py_None ? 0 : PyBytes_GET_SIZE(args[1]);
    if (resolve(k, args[0], base, base_len, &canonical, &rewritten) < 0) return NULL;
    PyObject *pair = PyTuple_Pack(2, canonical, rewritten ? Py_True : Py_False);
    Py_DECREF(canonical);
    return pair;
}

static PyObject *Kernel_counts(Kernel *k, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("(KKK)", (unsigned long long)k->total, (unsigned long long)k->collapsed,
                         (unsigned long long)k->rejected);
}

/* Copies the ASCII str stems of a tuple into one buffer; non-ASCII ones can never match (rule 3). */
static int read_stems(PyObject *tuple, stem **out, Py_ssize_t *count, char **buffer, Py_ssize_t *used) {
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    *out = PyMem_Calloc((size_t)(n ? n : 1), sizeof(stem));
    if (*out == NULL) return PyErr_NoMemory(), -1;
    *count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyTuple_GET_ITEM(tuple, i);
        if (!PyUnicode_Check(s)) {
            PyErr_SetString(PyExc_TypeError, "tracking stems must be str");
            return -1;
        }
        if (!PyUnicode_IS_ASCII(s)) continue;
        Py_ssize_t len = PyUnicode_GET_LENGTH(s);
        memcpy(*buffer + *used, PyUnicode_1BYTE_DATA(s), (size_t)len);
        (*out)[(*count)++] = (stem){*buffer + *used, len};
        *used += len;
    }
    return 0;
}

static Py_ssize_t stems_length(PyObject *tuple) {
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        PyObject *s = PyTuple_GET_ITEM(tuple, i);
        if (PyUnicode_Check(s)) total += PyUnicode_GET_LENGTH(s);
    }
    return total;
}

static PyObject *Kernel_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *memo, *exact, *prefixes, *keep_order;
    Py_ssize_t memo_entries;
    static char *names[] = {"memo", "memo_entries", "exact", "prefixes", "keep_order", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!nO!O!O:Kernel", names, &PyDict_Type, &memo,
                                     &memo_entries, &PyTuple_Type, &exact, &PyTuple_Type, &prefixes,
                                     &keep_order))
        return NULL;
    if (!ada_bound) {
        PyErr_SetString(PyExc_RuntimeError, "bind_ada() has not succeeded");
        return NULL;
    }
    if (keep_order != Py_None && !PyCallable_Check(keep_order)) {
        PyErr_SetString(PyExc_TypeError, "keep_order must be callable or None");
        return NULL;
    }
    Kernel *k = (Kernel *)type->tp_alloc(type, 0);
    if (k == NULL) return NULL;
    k->memo = Py_NewRef(memo);
    k->origins = PyDict_New();
    if (k->origins == NULL) goto fail;
    k->memo_entries = memo_entries;
    k->keep_order = keep_order == Py_None ? NULL : Py_NewRef(keep_order);
    k->stems = PyBytes_FromStringAndSize(NULL, stems_length(exact) + stems_length(prefixes) + 1);
    if (k->stems == NULL) goto fail;
    char *buffer = PyBytes_AS_STRING(k->stems);
    Py_ssize_t used = 0;
    if (read_stems(exact, &k->exact, &k->n_exact, &buffer, &used) < 0 ||
        read_stems(prefixes, &k->prefixes, &k->n_prefixes, &buffer, &used) < 0)
        goto fail;
    return (PyObject *)k;
fail:
    Py_DECREF(k);
    return NULL;
}

static int Kernel_traverse(Kernel *k, visitproc visit, void *arg) {
    Py_VISIT(k->memo);
    Py_VISIT(k->origins);
    Py_VISIT(k->keep_order);
    return 0;
}

static int Kernel_clear(Kernel *k) {
    Py_CLEAR(k->memo);
    Py_CLEAR(k->origins);
    Py_CLEAR(k->keep_order);
    return 0;
}

static void Kernel_dealloc(Kernel *k) {
    PyObject_GC_UnTrack(k);
    Kernel_clear(k);
    Py_CLEAR(k->stems);
    PyMem_Free(k->exact);
    PyMem_Free(k->prefixes);
    Py_TYPE(k)->tp_free((PyObject *)k);
}

static PyMethodDef Kernel_methods[] = {
    {"links", (PyCFunction)(void (*)(void))Kernel_links, METH_FASTCALL,
     "links(hrefs, base) -> list[str]: Canonicalizer.canonicalize_links"},
    {"canonicalize", (PyCFunction)(void (*)(void))Kernel_canonicalize, METH_FASTCALL,
     "canonicalize(url, base=None) -> str | None: Canonicalizer.canonicalize"},
    {"resolve", (PyCFunction)(void (*)(void))Kernel_resolve, METH_FASTCALL,
     "resolve(url, base) -> (str | None, bool): Canonicalizer._resolve (counts nothing)"},
    {"counts", (PyCFunction)Kernel_counts, METH_NOARGS, "counts() -> (total, collapsed, rejected)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "polecat.dedup._canon.Kernel",
    .tp_basicsize = sizeof(Kernel),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Kernel(memo, memo_entries, exact, prefixes, keep_order): a Canonicalizer's links loop",
    .tp_new = Kernel_new,
    .tp_traverse = (traverseproc)Kernel_traverse,
    .tp_clear = (inquiry)Kernel_clear,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_methods = Kernel_methods,
};

/* ---- binding ada ------------------------------------------------------------------------------- */

/* Parses url (against base when given) and checks the scheme, serialization and components. */
static bool ada_gives(const ada_api *api, const char *url, const char *base, uint8_t scheme, const char *href,
                      uint32_t path, uint32_t search, uint32_t hash) {
    ada_url obj = base ? api->parse_with_base(url, strlen(url), base, strlen(base)) : api->parse(url, strlen(url));
    if (obj == NULL) return false;
    bool ok = api->is_valid(obj) && api->scheme_type(obj) == scheme;
    if (ok) {
        ada_string got = api->get_href(obj);
        const ada_url_components *c = api->get_components(obj);
        ok = got.length == strlen(href) && memcmp(got.data, href, got.length) == 0 && c != NULL &&
             c->pathname_start == path && c->search_start == search && c->hash_start == hash;
    }
    api->free(obj);
    return ok;
}

static PyObject *bind_ada(PyObject *Py_UNUSED(module), PyObject *addresses) {
    if (!PyTuple_Check(addresses) || PyTuple_GET_SIZE(addresses) != ADA_FUNCTIONS) {
        PyErr_SetString(PyExc_TypeError, "bind_ada takes a tuple of 8 function addresses");
        return NULL;
    }
    void *pointers[ADA_FUNCTIONS];
    for (Py_ssize_t i = 0; i < ADA_FUNCTIONS; i++) {
        pointers[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(addresses, i));
        if (pointers[i] == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a null function address");
            return NULL;
        }
    }
    ada_api api;
    /* Function pointers cannot be assigned from void * in ISO C; they have the same size on every
     * platform CPython supports (dlsym relies on it too). */
    memcpy(&api.parse, &pointers[0], sizeof(void *));
    memcpy(&api.parse_with_base, &pointers[1], sizeof(void *));
    memcpy(&api.can_parse, &pointers[2], sizeof(void *));
    memcpy(&api.free, &pointers[3], sizeof(void *));
    memcpy(&api.is_valid, &pointers[4], sizeof(void *));
    memcpy(&api.scheme_type, &pointers[5], sizeof(void *));
    memcpy(&api.get_href, &pointers[6], sizeof(void *));
    memcpy(&api.get_components, &pointers[7], sizeof(void *));
    bool works = api.can_parse("http://a/", 9) && !api.can_parse("x", 1) &&
                 ada_gives(&api, "HTTP://A:80/b?c#d", NULL, SCHEME_HTTP, "http://a/b?c#d", 8, 10, 12) &&
                 ada_gives(&api, "../x", "https://h.test/a/b/c", SCHEME_HTTPS, "https://h.test/a/x", 14,
                           ADA_OMITTED, ADA_OMITTED);
    if (works && !ada_bound) {
        ada = api;
        ada_bound = true;
    }
    return PyBool_FromLong(works);
}

static PyMethodDef module_methods[] = {
    {"bind_ada", bind_ada, METH_O,
     "bind_ada(addresses) -> bool: ada's C API functions (parse, parse_with_base, can_parse, free, "
     "is_valid, get_scheme_type, get_href, get_components); False when they do not behave as ada's"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "polecat.dedup._canon",
    "Native kernel of polecat.dedup.canon.Canonicalizer (canonicalize_links, canonicalize).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__canon(void) {
    if (PyType_Ready(&KernelType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Kernel", (PyObject *)&KernelType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
