/* CPython binding of sam.c: the same automaton as the ctypes route, at a fraction of the per-call cost
 * (one update or draft per request per decode step makes the call overhead matter). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "sam.c"

typedef struct {
    PyObject_HEAD
    Sam *s;
    int depth;
    int32_t *tok, *par, *in;
    double *score;
    Py_ssize_t cap, incap;
} Auto;

static int reserve(Auto *a, Py_ssize_t n) {
    if (n <= a->cap) return 0;
    Py_ssize_t c = n > 2 * a->cap ? n : 2 * a->cap;
    int32_t *t = PyMem_Realloc(a->tok, c * sizeof(int32_t)), *p;
    if (!t) { PyErr_NoMemory(); return -1; }
    a->tok = t;
    p = PyMem_Realloc(a->par, c * sizeof(int32_t));
    if (!p) { PyErr_NoMemory(); return -1; }
    a->par = p;
    double *sc = PyMem_Realloc(a->score, c * sizeof(double));
    if (!sc) { PyErr_NoMemory(); return -1; }
    a->score = sc;
    a->cap = c;
    return 0;
}

/* Copy a sequence of ints into a->in; returns its length or -1 with an exception set. */
static Py_ssize_t read_ints(Auto *a, PyObject *obj) {
    PyObject *fast = PySequence_Fast(obj, "tokens must be a sequence of ints");
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > a->incap) {
        int32_t *b = PyMem_Realloc(a->in, (n > 2 * a->incap ? n : 2 * a->incap) * sizeof(int32_t));
        if (!b) { Py_DECREF(fast); PyErr_NoMemory(); return -1; }
        a->in = b; a->incap = n > 2 * a->incap ? n : 2 * a->incap;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(items[i]);
        if (v == -1 && PyErr_Occurred()) { Py_DECREF(fast); return -1; }
        a->in[i] = (int32_t)v;
    }
    Py_DECREF(fast);
    return n;
}

static int check_seq(Auto *a, int seq) {
    if (!a->s) { PyErr_SetString(PyExc_ValueError, "automaton is closed"); return -1; }
    if (seq < 0 || seq >= a->s->nseq) { PyErr_Format(PyExc_IndexError, "no sequence %d", seq); return -1; }
    return 0;
}

static int Auto_init(Auto *a, PyObject *args, PyObject *kw) {
    static char *names[] = {"max_depth", NULL};
    int depth = 96;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i", names, &depth)) return -1;
    if (depth < 1) { PyErr_SetString(PyExc_ValueError, "max_depth must be >= 1"); return -1; }
    if (a->s) sam_free(a->s);
    a->s = sam_new(depth);
    a->depth = depth;
    if (!a->s || reserve(a, 64)) { PyErr_NoMemory(); return -1; }
    return 0;
}

static void Auto_dealloc(Auto *a) {
    sam_free(a->s);
    PyMem_Free(a->tok); PyMem_Free(a->par); PyMem_Free(a->score); PyMem_Free(a->in);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

static PyObject *Auto_add_sequence(Auto *a, PyObject *Py_UNUSED(x)) {
    if (!a->s) { PyErr_SetString(PyExc_ValueError, "automaton is closed"); return NULL; }
    int32_t id = sam_add_seq(a->s);
    if (id < 0) return PyErr_NoMemory();
    return PyLong_FromLong(id);
}

static PyObject *Auto_extend(Auto *a, PyObject *args) {
    int seq;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "iO", &seq, &obj) || check_seq(a, seq)) return NULL;
    Py_ssize_t n = read_ints(a, obj);
    if (n < 0) return NULL;
    int32_t r = sam_extend(a->s, seq, a->in, (int32_t)n);
    if (r < 0) return PyErr_NoMemory();
    return PyLong_FromLong(r);
}

static PyObject *Auto_length(Auto *a, PyObject *arg) {
    int seq = (int)PyLong_AsLong(arg);
    if ((seq == -1 && PyErr_Occurred()) || check_seq(a, seq)) return NULL;
    return PyLong_FromLong(a->s->seqs[seq].n);
}

static PyObject *Auto_tokens(Auto *a, PyObject *args) {
    int seq, start = 0;
    if (!PyArg_ParseTuple(args, "i|i", &seq, &start) || check_seq(a, seq)) return NULL;
    const Seq *q = &a->s->seqs[seq];
    if (start < 0) start = 0;
    Py_ssize_t n = q->n > start ? q->n - start : 0;
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(out, i, PyLong_FromLong(q->tok[start + i]));
    return out;
}

static PyObject *Auto_count(Auto *a, PyObject *obj) {
    if (!a->s) { PyErr_SetString(PyExc_ValueError, "automaton is closed"); return NULL; }
    Py_ssize_t n = read_ints(a, obj);
    if (n < 0) return NULL;
    return PyLong_FromLong(sam_count(a->s, a->in, (int32_t)n));
}

static PyObject *int_list(const int32_t *v, int32_t n) {
    PyObject *out = PyList_New(n);
    if (out)
        for (int32_t i = 0; i < n; i++) PyList_SET_ITEM(out, i, PyLong_FromLong(v[i]));
    return out;
}

static PyObject *float_list(const double *v, int32_t n) {
    PyObject *out = PyList_New(n);
    if (out)
        for (int32_t i = 0; i < n; i++) PyList_SET_ITEM(out, i, PyFloat_FromDouble(v[i]));
    return out;
}

static PyObject *Auto_draft_frequent(Auto *a, PyObject *args) {
    int head, seq, cap, max_tokens, max_paths, mix_states = 1;
    double min_score, escape = 0.0;
    if (!PyArg_ParseTuple(args, "iiiiid|id", &head, &seq, &cap, &max_tokens, &max_paths, &min_score, &mix_states,
                          &escape))
        return NULL;
    if (check_seq(a, seq) || reserve(a, max_tokens > 0 ? max_tokens : 1)) return NULL;
    int32_t n = sam_draft_freq(a->s, head, seq, cap, max_tokens, max_paths, min_score, mix_states, escape, a->tok,
                               a->par, a->score);
    return Py_BuildValue("(NNN)", int_list(a->tok, n), int_list(a->par, n), float_list(a->score, n));
}

static PyObject *Auto_draft_recent(Auto *a, PyObject *args) {
    int head, seq, cap, max_tokens;
    if (!PyArg_ParseTuple(args, "iiii", &head, &seq, &cap, &max_tokens)) return NULL;
    if (check_seq(a, seq) || reserve(a, max_tokens > 0 ? max_tokens : 1)) return NULL;
    int32_t n = sam_draft_recent(a->s, head, seq, cap, max_tokens, a->tok, a->score);
    return Py_BuildValue("(NN)", int_list(a->tok, n), float_list(a->score, n));
}

static PyObject *Auto_memory_bytes(Auto *a, PyObject *Py_UNUSED(x)) {
    return PyLong_FromSize_t(a->s ? sam_memory(a->s) + (size_t)(a->cap * 16 + a->incap * 4) : 0);
}

static PyObject *Auto_close(Auto *a, PyObject *Py_UNUSED(x)) {
    sam_free(a->s);
    a->s = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef Auto_methods[] = {
    {"add_sequence", (PyCFunction)Auto_add_sequence, METH_NOARGS, "Start a new sequence; returns its id."},
    {"extend", (PyCFunction)Auto_extend, METH_VARARGS, "extend(seq, tokens) -> new length"},
    {"length", (PyCFunction)Auto_length, METH_O, "length(seq) -> tokens stored"},
    {"tokens", (PyCFunction)Auto_tokens, METH_VARARGS, "tokens(seq, start=0) -> list"},
    {"count", (PyCFunction)Auto_count, METH_O, "count(tokens) -> occurrences (strings up to max_depth)"},
    {"draft_frequent", (PyCFunction)Auto_draft_frequent, METH_VARARGS,
     "draft_frequent(head, seq, match_cap, max_tokens, max_paths, min_score, mix_states=1, escape=0.0) "
     "-> (tokens, parents, scores)"},
    {"draft_recent", (PyCFunction)Auto_draft_recent, METH_VARARGS,
     "draft_recent(head, seq, match_cap, max_tokens) -> (tokens, scores)"},
    {"memory_bytes", (PyCFunction)Auto_memory_bytes, METH_NOARGS, "Bytes held."},
    {"close", (PyCFunction)Auto_close, METH_NOARGS, "Free the automaton now."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Auto_members[] = {
    {"depth", T_INT, offsetof(Auto, depth), READONLY, "max_depth"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject AutoType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_sam.SuffixAutomaton",
    .tp_basicsize = sizeof(Auto),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Generalized suffix automaton with occurrence counts (see sam.c).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Auto_init,
    .tp_dealloc = (destructor)Auto_dealloc,
    .tp_methods = Auto_methods,
    .tp_members = Auto_members,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_sam", .m_doc = "Native suffix automaton.", .m_size = -1};

PyMODINIT_FUNC PyInit__sam(void) {
    if (PyType_Ready(&AutoType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&AutoType);
    if (PyModule_AddObject(m, "SuffixAutomaton", (PyObject *)&AutoType) < 0) {
        Py_DECREF(&AutoType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
