/* polecat.dedup._minhash: the page fingerprint of polecat/dedup/minhash.py in one pass over the text.
 *
 * The numpy code in minhash_numpy.py is the specification (minhash.py's docstring has the algorithm); this
 * kernel computes the same Fingerprint parts, bit for bit, for every str:
 *
 * 1. Bytes: an ASCII str (exact type) is read in place, each word byte lowercased inline (a word byte of
 *    an ASCII text is a letter or digit, so OR 0x20 lowercases it). Any other str is lowercased as its
 *    own lower() lowers it (full case mappings that can change length) and UTF-8 encoded with
 *    surrogatepass, exactly as minhash_numpy.py does, in one pass of this module's: str.lower() maps each
 *    code point on its own except U+03A3 (final sigma looks at its neighbours), so each non-ASCII code
 *    point's chr(c).lower(), as UTF-8, is asked of Python once per process and kept in a table (BMP; an
 *    astral code point asks every time). A text holding U+03A3, or a str subclass, is lowered by its own
 *    lower() and encoded by Python. On real documentation pages this is 3x faster than lower() + encode
 *    (benchmarks/README.md, "Issue 17, seventh pass").
 * 2. Words: maximal runs of [a-z0-9] or non-ASCII bytes, found 64 bytes at a time from a bit mask of word
 *    bytes (no branch per byte). A word of at most 16 bytes hashes from its first and last 8 bytes and
 *    its length; a longer one calls back into xxhash.xxh3_64_intdigest (rare: CJK runs, long tokens).
 * 3. Each word hash updates the 64 index bins and, with the previous hash, the 512 verify bins at once:
 *    the word hashes are never stored.
 *
 * Memory: the sketch state is fixed (576 minima on the stack); nothing is sized by the input but the
 * lowered/encoded copy of a non-ASCII text and one bytes object per long word (the word's length). The
 * lowering table (8 bytes for each of the 65,536 BMP code points, 512 KiB of address space of which only
 * the pages of the code points met are touched) is allocated at the first non-ASCII text. Positions are
 * Py_ssize_t within one buffer; the chunk loop refuses a buffer within 64 bytes of PY_SSIZE_T_MAX so that
 * no index arithmetic can overflow.
 *
 * The GIL is held throughout: a page costs tens of microseconds, and taking the GIL back after releasing
 * it can wait a whole switch interval (5 ms) behind another thread, which would stall the event loop.
 * Across calls the module state holds the xxh3 function, set at import, and the lowering table, which only
 * ever caches what str.lower() returns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define INDEX_BINS 64
#define INDEX_SHIFT (64 - 6)
#define VERIFY_BINS 512
#define VERIFY_SHIFT (64 - 9)
#define VERIFY_BYTES (VERIFY_BINS / 4)
#define SHORT_WORD 16

static const uint64_t M1 = UINT64_C(0xBF58476D1CE4E5B9);
static const uint64_t M2 = UINT64_C(0x94D049BB133111EB);
static const uint64_t GOLDEN = UINT64_C(0x9E3779B97F4A7C15);
static const uint64_t VERIFY_SEED = UINT64_C(0x243F6A8885A308D3);
static const uint64_t LOW_MASK = (UINT64_C(1) << 58) - 1;
static const uint64_t EMPTY = UINT64_MAX;
/* minhash._ONE_THRESHOLD: int(0.4 * 2**64), exported as ONE_THRESHOLD and tested equal. */
static const uint64_t ONE_THRESHOLD = UINT64_C(0x6666666666666800);
static const uint64_t LAST_BIT = UINT64_C(1) << 63;
static const uint64_t ASCII_FOLD = UINT64_C(0x2020202020202020);

typedef struct {
    PyObject *xxh3_64_intdigest;
    uint64_t *lower; /* NULL, or a lowering entry per BMP code point (lower_entry), 0 where not asked yet */
} module_state;

typedef struct {
    uint64_t index[INDEX_BINS];
    uint64_t verify[VERIFY_BINS];
    uint64_t first;     /* the first word's hash: a lone word is its own "bigram" */
    Py_ssize_t words;
} sketch;

/* splitmix64's finalizer (minhash_numpy._mix). */
static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= M1;
    x ^= x >> 27;
    x *= M2;
    return x ^ (x >> 31);
}

/* 1 for a word byte: ASCII letter (either case) or digit, or any non-ASCII byte. Uppercase ASCII never
 * reaches here from the UTF-8 path (lower() removed it) and is folded inline on the ASCII path. */
static inline uint64_t is_word_byte(uint8_t b)
{
    return ((unsigned)(b - '0') < 10u) | ((unsigned)((b | 0x20) - 'a') < 26u) | (b >= 0x80);
}

/* Bit i set when p[i] is a word byte, for a chunk shorter than 64 bytes (the text's last). */
static inline uint64_t word_mask_tail(const uint8_t *p, Py_ssize_t len)
{
    uint64_t m = 0;
    for (Py_ssize_t i = 0; i < len; i++)
        m |= is_word_byte(p[i]) << i;
    return m;
}

/* Bit i set when p[i] is a word byte, for i in 0..63: SSE2 (every x86-64) compares 16 bytes at once,
 * elsewhere the portable loop. */
static inline uint64_t word_mask64(const uint8_t *p)
{
#if defined(__SSE2__)
    const __m128i fold = _mm_set1_epi8(0x20);
    /* Signed compares: shift each range to start at -128, then "below -128 + width" is "in range". */
    const __m128i letter_shift = _mm_set1_epi8((char)(0x80 - 'a'));
    const __m128i letter_end = _mm_set1_epi8((char)(-128 + 26));
    const __m128i digit_shift = _mm_set1_epi8((char)(0x80 - '0'));
    const __m128i digit_end = _mm_set1_epi8((char)(-128 + 10));
    const __m128i zero = _mm_setzero_si128();
    uint64_t m = 0;
    for (int k = 0; k < 4; k++) {
        __m128i b = _mm_loadu_si128((const __m128i *)(p + 16 * k));
        __m128i letter = _mm_cmplt_epi8(_mm_add_epi8(_mm_or_si128(b, fold), letter_shift), letter_end);
        __m128i digit = _mm_cmplt_epi8(_mm_add_epi8(b, digit_shift), digit_end);
        __m128i high = _mm_cmplt_epi8(b, zero); /* non-ASCII: the byte's top bit */
        __m128i word = _mm_or_si128(_mm_or_si128(letter, digit), high);
        m |= (uint64_t)(uint16_t)_mm_movemask_epi8(word) << (16 * k);
    }
    return m;
#else
    return word_mask_tail(p, 64);
#endif
}

/* The little-endian uint64 at p[0..8). */
static inline uint64_t load8(const uint8_t *p)
{
    uint64_t v = 0;
#if PY_LITTLE_ENDIAN
    memcpy(&v, p, 8);
#else
    for (int k = 7; k >= 0; k--)
        v = (v << 8) | p[k];
#endif
    return v;
}

/* The little-endian uint64 at p[i..i+8), bytes at n and past read as 0 (minhash_numpy.py pads the text with
 * zeros), for the last words of a text. */
static uint64_t load_near_end(const uint8_t *p, Py_ssize_t i, Py_ssize_t n)
{
    if (n - i >= 8)
        return load8(p + i);
    uint64_t v = 0;
    for (Py_ssize_t k = n - i - 1; k >= 0; k--)
        v = (v << 8) | p[i + k];
    return v;
}

static inline uint64_t count_trailing_zeros(uint64_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return (uint64_t)__builtin_ctzll(x);
#else
    uint64_t n = 0;
    while (!(x & 1)) {
        x >>= 1;
        n++;
    }
    return n;
#endif
}

/* xxh3_64 of a word longer than 16 bytes, through the xxhash package (minhash_numpy.py's hash of long words).
 * Returns -1 with an exception set on failure. */
static int long_word_hash(module_state *st, const uint8_t *word, Py_ssize_t len, int fold, uint64_t *out)
{
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)word, len);
    if (bytes == NULL)
        return -1;
    if (fold) {
        char *b = PyBytes_AS_STRING(bytes);
        for (Py_ssize_t k = 0; k < len; k++)
            b[k] |= 0x20;
    }
    PyObject *h = PyObject_CallOneArg(st->xxh3_64_intdigest, bytes);
    Py_DECREF(bytes);
    if (h == NULL)
        return -1;
    *out = PyLong_AsUnsignedLongLong(h);
    Py_DECREF(h);
    if (*out == (uint64_t)-1 && PyErr_Occurred())
        return -1;
    return 0;
}

static inline void bin_min(uint64_t *mins, uint64_t feature, int shift)
{
    uint64_t *slot = &mins[feature >> shift];
    uint64_t value = feature & LOW_MASK;
    *slot = value < *slot ? value : *slot; /* a conditional move: which is smaller is a coin toss early on */
}

/* The hash of the word p[start..end) into *h; -1 with an exception set on failure. */
static inline int word_hash(module_state *st, const uint8_t *p, Py_ssize_t n, Py_ssize_t start,
                            Py_ssize_t end, uint64_t fold, uint64_t *h)
{
    Py_ssize_t len = end - start;
    if (len > SHORT_WORD)
        return long_word_hash(st, p + start, len, fold != 0, h);
    Py_ssize_t part = len < 8 ? len : 8;
    uint64_t mask = UINT64_MAX >> (8 * (8 - part)); /* len >= 1: the shift is at most 56 */
    uint64_t head, tail;
    if (end - part <= n - 8) { /* both 8-byte reads (at start <= end - part) lie within the text */
        head = load8(p + start);
        tail = load8(p + end - part);
    }
    else {
        head = load_near_end(p, start, n);
        tail = load_near_end(p, end - part, n);
    }
    head = (head | fold) & mask;
    tail = (tail | fold) & mask;
    *h = mix((head * GOLDEN + tail) ^ (uint64_t)len);
    return 0;
}

/* Every word of p[0..n), in order, into the sketch. Per 64-byte chunk: a bit mask of word bytes, the
 * word starts and word ends (the byte after a word) pulled from it in step, one word per end. The previous
 * word's hash and the word count live in locals: kept in the sketch, every bin store could alias them. */
static int scan(module_state *st, sketch *s, const uint8_t *p, Py_ssize_t n, uint64_t fold)
{
    if (n > PY_SSIZE_T_MAX - 64) {
        PyErr_SetString(PyExc_OverflowError, "text too long to fingerprint");
        return -1;
    }
    uint64_t *index = s->index, *verify = s->verify;
    uint64_t prev = 0, first = 0;
    Py_ssize_t words = 0;
    Py_ssize_t open_start = 0;
    uint64_t carry = 0; /* 1 when the previous chunk ended inside a word (which began at open_start) */
    for (Py_ssize_t c = 0; c <= n; c += 64) {
        /* One pass past the end (c == n, or a short last chunk) closes a word open at the text's end. */
        Py_ssize_t len = n - c < 64 ? n - c : 64;
        uint64_t m = len == 64 ? word_mask64(p + c) : word_mask_tail(p + c, len);
        uint64_t before = (m << 1) | carry; /* bit i: byte i - 1 is a word byte */
        /* Starts and ends alternate: each end closes the open word, then the next start opens one. When
         * no start is left, OR-ing in bit 63 gives a position no later end uses (nor the carry: a
         * word still open at bit 63 began at a start bit already taken, or before the chunk). */
        uint64_t start_bits = m & ~before, end_bits = ~m & before;
        Py_ssize_t start = open_start;
        if (!carry) {
            start = c + (Py_ssize_t)count_trailing_zeros(start_bits | LAST_BIT);
            start_bits &= start_bits - 1;
        }
        while (end_bits) {
            Py_ssize_t end = c + (Py_ssize_t)count_trailing_zeros(end_bits);
            end_bits &= end_bits - 1;
            uint64_t h;
            if (word_hash(st, p, n, start, end, fold, &h) < 0)
                return -1;
            bin_min(index, h, INDEX_SHIFT);
            if (words)
                bin_min(verify, mix((prev * M1 + h) ^ VERIFY_SEED), VERIFY_SHIFT);
            else
                first = h;
            prev = h;
            words++;
            start = c + (Py_ssize_t)count_trailing_zeros(start_bits | LAST_BIT);
            start_bits &= start_bits - 1;
        }
        if (len < 64)
            break;
        carry = m >> 63;
        open_start = start;
    }
    s->first = first;
    s->words = words;
    return 0;
}

/* Fill each empty bin from the next non-empty one (wrapping), mixed with its own index (minhash_numpy._densify).
 * Donors are always non-empty bins, whose values this loop never changes. */
static void densify(uint64_t *mins, int bins)
{
    int next = -1;
    for (int i = 0; i < bins && next < 0; i++)
        if (mins[i] != EMPTY)
            next = i;
    if (next < 0)
        return;
    for (int i = bins - 1; i >= 0; i--) {
        if (mins[i] != EMPTY)
            next = i;
        else
            mins[i] = mix(mins[next] ^ ((uint64_t)i * GOLDEN));
    }
}

static PyObject *sketch_result(sketch *s)
{
    uint64_t index = 0;
    unsigned char verify[VERIFY_BYTES] = {0};
    if (s->words) {
        if (s->words == 1)
            bin_min(s->verify, mix(s->first ^ VERIFY_SEED), VERIFY_SHIFT);
        densify(s->index, INDEX_BINS);
        densify(s->verify, VERIFY_BINS);
        for (int i = 0; i < INDEX_BINS; i++)
            index |= (uint64_t)(mix(s->index[i] ^ (uint64_t)i) < ONE_THRESHOLD) << i;
        for (int i = 0; i < VERIFY_BINS; i++)
            verify[i / 4] |= (unsigned char)((mix(s->verify[i] ^ (uint64_t)i) >> 62) << (2 * (i % 4)));
    }
    PyObject *index_obj = PyLong_FromUnsignedLongLong(index);
    if (index_obj == NULL)
        return NULL;
    PyObject *verify_obj = PyBytes_FromStringAndSize((const char *)verify, VERIFY_BYTES);
    if (verify_obj == NULL) {
        Py_DECREF(index_obj);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, index_obj, verify_obj);
    Py_DECREF(index_obj);
    Py_DECREF(verify_obj);
    return result;
}

/* ---- lowering (rule 1) ---------------------------------------------------------------------------- */

/* An entry is chr(c).lower() as UTF-8 (surrogatepass): its length in the low byte, its bytes above it.
 * LOWER_WHOLE: the text must be lowered as a whole (U+03A3, or a lowering longer than 7 bytes). */
#define LOWER_WHOLE UINT64_C(0xFF)
#define BMP 0x10000

/* The entry of code point c, asked of Python; 0 with an exception set on failure. */
static uint64_t ask_lower(Py_UCS4 c)
{
    if (c == 0x3A3)
        return LOWER_WHOLE;
    PyObject *ch = PyUnicode_FromOrdinal((int)c);
    if (ch == NULL)
        return 0;
    PyObject *low = PyObject_CallMethod(ch, "lower", NULL);
    Py_DECREF(ch);
    if (low == NULL)
        return 0;
    PyObject *enc = PyUnicode_Check(low) ? PyUnicode_AsEncodedString(low, "utf-8", "surrogatepass") : NULL;
    if (enc == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "fingerprint(): lower() did not return a str");
    Py_DECREF(low);
    if (enc == NULL)
        return 0;
    Py_ssize_t n = PyBytes_GET_SIZE(enc);
    const uint8_t *b = (const uint8_t *)PyBytes_AS_STRING(enc);
    uint64_t entry = LOWER_WHOLE;
    if (n >= 1 && n <= 7) {
        entry = (uint64_t)n;
        for (Py_ssize_t i = 0; i < n; i++)
            entry |= (uint64_t)b[i] << (8 * (i + 1));
    }
    Py_DECREF(enc);
    return entry;
}

/* The entry of non-ASCII code point c, from the table or asked (and kept); 0 with an exception set. */
static inline uint64_t lower_entry(module_state *st, Py_UCS4 c)
{
    if (c >= BMP)
        return ask_lower(c);
    uint64_t entry = st->lower[c];
    if (entry == 0)
        entry = st->lower[c] = ask_lower(c);
    return entry;
}

/* text (an exact str of one kind) lowered and encoded into buf, which has room for cap bytes. Returns the
 * length; -1 with an exception set, -2 when the text must be lowered as a whole. */
static inline Py_ssize_t lower_kind(module_state *st, int kind, const void *data, Py_ssize_t n,
                                    uint8_t **buf, Py_ssize_t cap)
{
    uint8_t *out = *buf;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x80) {
            out[pos++] = (uint8_t)(c + (((unsigned)(c - 'A') < 26u) << 5));
            continue;
        }
        uint64_t entry = lower_entry(st, c);
        if (entry == 0)
            return -1;
        if (entry == LOWER_WHOLE)
            return -2;
        /* Room for this entry (7 bytes at most) and one byte for each code point after it. */
        if (cap - pos < (n - i) + 7) {
            if (cap > PY_SSIZE_T_MAX / 2 - 8) {
                PyErr_NoMemory();
                return -1;
            }
            cap = 2 * cap + 8;
            uint8_t *grown = PyMem_Realloc(out, (size_t)cap);
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            *buf = out = grown;
        }
        int len = (int)(entry & 0xFF);
        for (int k = 0; k < len; k++)
            out[pos++] = (uint8_t)(entry >> (8 * (k + 1)));
    }
    return pos;
}

/* The UTF-8 (surrogatepass) of text.lower() for an exact str, in a new PyMem buffer *out of *len bytes.
 * Returns 0; 1 when the text must be lowered as a whole by its lower() (nothing allocated); -1 with an
 * exception set. */
static int lower_utf8(module_state *st, PyObject *text, uint8_t **out, Py_ssize_t *len)
{
    if (st->lower == NULL) {
        st->lower = PyMem_Calloc(BMP, sizeof(uint64_t));
        if (st->lower == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (n > (PY_SSIZE_T_MAX - 8) / 3) {
        PyErr_SetString(PyExc_OverflowError, "text too long to fingerprint");
        return -1;
    }
    /* A BMP code point lowers to at most 3 UTF-8 bytes but for U+0130 (3 bytes from a 2-byte code
     * point): 3 a code point is nearly always enough; lower_kind grows the buffer when it is not. */
    Py_ssize_t cap = 3 * n + 8;
    uint8_t *buf = PyMem_Malloc((size_t)cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t got;
    if (kind == PyUnicode_1BYTE_KIND)
        got = lower_kind(st, PyUnicode_1BYTE_KIND, data, n, &buf, cap);
    else if (kind == PyUnicode_2BYTE_KIND)
        got = lower_kind(st, PyUnicode_2BYTE_KIND, data, n, &buf, cap);
    else
        got = lower_kind(st, PyUnicode_4BYTE_KIND, data, n, &buf, cap);
    if (got < 0) {
        PyMem_Free(buf);
        return got == -2 ? 1 : -1;
    }
    *out = buf;
    *len = got;
    return 0;
}

static PyObject *fingerprint(PyObject *module, PyObject *text)
{
    module_state *st = (module_state *)PyModule_GetState(module);
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "fingerprint() needs a str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0)
        return NULL;
#endif
    sketch s;
    for (int i = 0; i < INDEX_BINS; i++)
        s.index[i] = EMPTY;
    for (int i = 0; i < VERIFY_BINS; i++)
        s.verify[i] = EMPTY;
    s.first = 0;
    s.words = 0;

    if (PyUnicode_CheckExact(text) && PyUnicode_IS_ASCII(text)) {
        if (scan(st, &s, PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text), ASCII_FOLD) < 0)
            return NULL;
        return sketch_result(&s);
    }
    if (PyUnicode_CheckExact(text)) {
        uint8_t *buf;
        Py_ssize_t len;
        int lowered = lower_utf8(st, text, &buf, &len);
        if (lowered < 0)
            return NULL;
        if (lowered == 0) {
            int failed = scan(st, &s, buf, len, 0);
            PyMem_Free(buf);
            return failed ? NULL : sketch_result(&s);
        }
    }
    PyObject *lowered = PyObject_CallMethod(text, "lower", NULL);
    if (lowered == NULL)
        return NULL;
    if (!PyUnicode_Check(lowered)) {
        PyErr_SetString(PyExc_TypeError, "fingerprint(): lower() did not return a str");
        Py_DECREF(lowered);
        return NULL;
    }
    PyObject *encoded = PyUnicode_AsEncodedString(lowered, "utf-8", "surrogatepass");
    Py_DECREF(lowered);
    if (encoded == NULL)
        return NULL;
    int failed = scan(st, &s, (const uint8_t *)PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded), 0);
    Py_DECREF(encoded);
    return failed ? NULL : sketch_result(&s);
}

/* lowered(text): the bytes rule 1 fingerprints, for tests to hold equal to text.lower().encode(). */
static PyObject *lowered(PyObject *module, PyObject *text)
{
    module_state *st = (module_state *)PyModule_GetState(module);
    if (!PyUnicode_CheckExact(text)) {
        PyErr_Format(PyExc_TypeError, "lowered() needs a str, not %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    uint8_t *buf;
    Py_ssize_t len;
    int got = lower_utf8(st, text, &buf, &len);
    if (got < 0)
        return NULL;
    if (got == 1)
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize((const char *)buf, len);
    PyMem_Free(buf);
    return out;
}

static PyMethodDef methods[] = {
    {"lowered", lowered, METH_O,
     "lowered(text) -> bytes | None: text.lower() as UTF-8 (surrogatepass) as fingerprint() lowers a\n"
     "non-ASCII str, or None for a text that fingerprint() hands to its own lower()."},
    {"fingerprint", fingerprint, METH_O,
     "fingerprint(text) -> (index, verify): polecat.dedup.minhash.fingerprint's two parts, computed in C."},
    {NULL, NULL, 0, NULL},
};

static int traverse(PyObject *module, visitproc visit, void *arg)
{
    module_state *st = (module_state *)PyModule_GetState(module);
    Py_VISIT(st->xxh3_64_intdigest);
    return 0;
}

static int clear(PyObject *module)
{
    module_state *st = (module_state *)PyModule_GetState(module);
    Py_CLEAR(st->xxh3_64_intdigest);
    return 0;
}

static void free_module(void *module)
{
    clear((PyObject *)module);
    module_state *st = (module_state *)PyModule_GetState((PyObject *)module);
    if (st != NULL) {
        PyMem_Free(st->lower);
        st->lower = NULL;
    }
}

static int exec_module(PyObject *module)
{
    module_state *st = (module_state *)PyModule_GetState(module);
    PyObject *xxhash = PyImport_ImportModule("xxhash");
    if (xxhash == NULL)
        return -1;
    st->xxh3_64_intdigest = PyObject_GetAttrString(xxhash, "xxh3_64_intdigest");
    Py_DECREF(xxhash);
    if (st->xxh3_64_intdigest == NULL)
        return -1;
    PyObject *threshold = PyLong_FromUnsignedLongLong(ONE_THRESHOLD);
    if (threshold == NULL)
        return -1;
    if (PyModule_AddObject(module, "ONE_THRESHOLD", threshold) < 0) {
        Py_DECREF(threshold);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "polecat.dedup._minhash",
    .m_doc = "Native kernel of polecat.dedup.minhash.fingerprint (see _minhash.c).",
    .m_size = sizeof(module_state),
    .m_methods = methods,
    .m_slots = slots,
    .m_traverse = traverse,
    .m_clear = clear,
    .m_free = free_module,
};

PyMODINIT_FUNC PyInit__minhash(void)
{
    return PyModuleDef_Init(&module_def);
}
