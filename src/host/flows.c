/*
 * Flows in the runner: flow documents in, releases out (docs/flows.md).
 *
 * A document is parsed here whatever the backend, so that both answer a
 * malformed one with the same words and a missing id is made once. On a
 * database shared by runners the (completed) document goes to the
 * database's add_flow(), which keeps the graph; otherwise to the runner's
 * flow set (engine/flow.c), whose releases become adds of the queues, as an
 * HTTP add would be, forced past keep_done: a node runs once it is
 * released, whatever ran under its key before.
 *
 * The set is written behind by the state file (wq_backend_flows_attach):
 * a finish, the counts it changes and the items it releases go into the
 * same group commit as the outcome that caused them.
 */
#include "host/flows.h"

#include "engine/flow.h"
#include "engine/group.h"
#include "host/json.h"
#include "host/timer.h"
#include "store/backend.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define TO_STRING_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)
#define KEEP_DEFAULT (7 * 86400.0)
#define FLOW_ID_MAX 200
#define PRUNE_EVERY_S 60.0
#define PRUNE_BATCH 1000

static double now_unix(const wq_host *h)
{
    return wq_host_unix(h, wq_host_now(h));
}

/* ---- the flow set's hooks ---- */

static int h_check(void *ud, const char *queue, const char *key, size_t keylen)
{
    wq_host *h = ud;
    const wq_hqueue *hq = wq_host_find_queue(h, queue);
    if (!hq)
        return WQ_ENOENT;
    return hq->ops->has && hq->ops->has(hq->q, key, keylen) ? WQ_EBUSY : 0;
}

static void h_release(void *ud, wq_fnode *n)
{
    wq_host *h = ud;
    const wq_hqueue *hq = wq_host_find_queue(h, n->queue);
    char shown[WQ_SHOWN_KEY];
    if (!hq) {
        wq_show_key(shown, n->key, n->keylen);
        wq_host_logl(h, WQ_LOG_WARN,
                     "wqrun: flow %s: node %s/%s cannot run: this script defines no queue %s",
                     n->flow->id, n->queue, shown, n->queue);
        return;
    }
    char why[256] = "";
    wq_ext_item it = {.key = n->key,
                      .keylen = n->keylen,
                      .payload = n->payload,
                      .paylen = n->paylen,
                      .has_priority = 1,
                      .priority = n->priority,
                      .force = 1,
                      .group = n->grp,
                      .grouplen = n->grplen,
                      .why = why,
                      .whysize = sizeof why};
    int r = hq->ops->add(hq->q, &it);
    if (r < 0 && r != WQ_ESHUTDOWN) {
        wq_show_key(shown, n->key, n->keylen);
        wq_host_logl(h, WQ_LOG_WARN, "wqrun: flow %s: node %s/%s was not queued: %s", n->flow->id,
                     n->queue, shown, why[0] ? why : wq_strerror(r));
    }
}

static void h_touch(void *ud, const char *flow, int64_t node, int created)
{
    wq_host *h = ud;
    if (h->backend)
        wq_backend_flow_touch(h->backend, flow, node, created);
}

static void prune(wq_host *h, void *data, uint64_t id)
{
    (void)data;
    (void)id;
    h->flow_prune_timer = 0;
    if (!h->flows)
        return;
    wq_flows_prune(h->flows, now_unix(h), PRUNE_BATCH);
    h->flow_prune_timer = wq_timer_start_weak(
        h, wq_add_sat(wq_host_now(h), (int64_t)(PRUNE_EVERY_S * 1e9)), prune, NULL);
}

int wq_host_flows_open(wq_host *h)
{
    if (wq_backend_shared(h->backend))
        return 0;
    wq_flows_hooks hooks = {h_check, h_release, h_touch, h};
    h->flows = wq_flows_new(&hooks);
    if (!h->flows) {
        fprintf(stderr, "wqrun: out of memory\n");
        return -1;
    }
    if (h->backend) {
        int r = wq_backend_restore_flows(h->backend, h->flows);
        if (r < 0) {
            fprintf(stderr, "wqrun: cannot restore the flows of %s: %s\n",
                    wq_backend_where(h->backend),
                    r == WQ_ENOMEM ? "out of memory" : wq_backend_errmsg(h->backend));
            return -1;
        }
        wq_backend_flows_attach(h->backend, h->flows);
    }
    h->flow_prune_timer = wq_timer_start_weak(
        h, wq_add_sat(wq_host_now(h), (int64_t)(PRUNE_EVERY_S * 1e9)), prune, NULL);
    return 0;
}

void wq_host_flows_close(wq_host *h)
{
    wq_flows_free(h->flows);
    h->flows = NULL;
}

/* ---- documents ---- */

typedef struct {
    json_object *root;
    const char *id;
    double keep;
    wq_fnode_def *defs;
    wq_fref *refs;
    size_t n;
} doc;

static void doc_free(doc *d)
{
    free(d->defs);
    free(d->refs);
    json_object_put(d->root);
}

/* A string member of o (NULL when absent), or -1 with err set when it is not one. */
static int str_member(json_object *o, const char *name, const char **out, size_t *len)
{
    json_object *v;
    *out = NULL;
    if (!json_object_object_get_ex(o, name, &v) || json_object_is_type(v, json_type_null))
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return -1;
    *out = json_object_get_string(v);
    if (len)
        *len = (size_t)json_object_get_string_len(v);
    return 0;
}

static int check_ref(json_object *r, wq_fref *out, size_t i, char *err, size_t errlen)
{
    if (!json_object_is_type(r, json_type_object)) {
        snprintf(err, errlen, "flow: nodes[%zu].after: {\"queue\", \"key\"} objects expected", i);
        return WQ_EINVAL;
    }
    json_object_object_foreach(r, k, v)
    {
        (void)v;
        if (strcmp(k, "queue") != 0 && strcmp(k, "key") != 0) {
            snprintf(err, errlen,
                     "flow: nodes[%zu].after: unknown field '%s' (expected queue, key)", i, k);
            return WQ_EINVAL;
        }
    }
    if (str_member(r, "queue", &out->queue, NULL) < 0 || !out->queue ||
        str_member(r, "key", &out->key, &out->keylen) < 0 || !out->key) {
        snprintf(err, errlen, "flow: nodes[%zu].after: each entry needs a string queue and key", i);
        return WQ_EINVAL;
    }
    return 0;
}

static const char *const node_fields[] = {"queue",       "key",      "payload", "after",
                                          "ignore_dead", "priority", "group",   NULL};

static int field_known(const char *k, const char *const *names)
{
    for (; *names; names++)
        if (strcmp(k, *names) == 0)
            return 1;
    return 0;
}

/* Parses text into d: the shape only (the graph is checked by whoever commits it). */
static int doc_parse(const char *text, size_t len, doc *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->keep = KEEP_DEFAULT;
    if (len > WQ_FLOW_DOC_MAX) {
        snprintf(err, errlen, "flow: the document is larger than %u bytes", WQ_FLOW_DOC_MAX);
        return WQ_EINVAL;
    }
    const char *why = wq_json_parse(text, len, &d->root);
    if (why) {
        snprintf(err, errlen, "flow: the document is not JSON: %s", why);
        return WQ_EINVAL;
    }
    if (!json_object_is_type(d->root, json_type_object)) {
        snprintf(err, errlen, "flow: a JSON object {\"id\", \"keep\", \"nodes\"} expected");
        return WQ_EINVAL;
    }
    json_object *nodes = NULL;
    json_object_object_foreach(d->root, fk, fv)
    {
        const char *k = fk;
        json_object *v = fv;
        if (strcmp(k, "id") == 0) {
            if (json_object_is_type(v, json_type_null))
                continue;
            if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0 ||
                json_object_get_string_len(v) > FLOW_ID_MAX) {
                snprintf(err, errlen, "flow: id: a string of 1 to %d bytes expected", FLOW_ID_MAX);
                return WQ_EINVAL;
            }
            d->id = json_object_get_string(v);
        } else if (strcmp(k, "keep") == 0) {
            if (!json_object_is_type(v, json_type_int) &&
                !json_object_is_type(v, json_type_double)) {
                snprintf(err, errlen, "flow: keep: seconds (a number >= 0) expected");
                return WQ_EINVAL;
            }
            d->keep = json_object_get_double(v);
            if (!(d->keep >= 0) || d->keep > 1e10) {
                snprintf(err, errlen, "flow: keep: seconds (a number >= 0) expected");
                return WQ_EINVAL;
            }
        } else if (strcmp(k, "nodes") == 0) {
            nodes = v;
        } else {
            snprintf(err, errlen, "flow: unknown field '%s' (expected id, keep, nodes)", k);
            return WQ_EINVAL;
        }
    }
    if (!nodes || !json_object_is_type(nodes, json_type_array)) {
        snprintf(err, errlen, "flow: nodes: an array of nodes expected");
        return WQ_EINVAL;
    }
    size_t n = json_object_array_length(nodes), nrefs = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(nodes, i), *a;
        if (json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, "after", &a) &&
            json_object_is_type(a, json_type_array))
            nrefs += json_object_array_length(a);
    }
    d->defs = n ? calloc(n, sizeof *d->defs) : NULL;
    d->refs = nrefs ? calloc(nrefs, sizeof *d->refs) : NULL;
    if ((n && !d->defs) || (nrefs && !d->refs)) {
        snprintf(err, errlen, "out of memory");
        return WQ_ENOMEM;
    }
    d->n = n;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(nodes, i), *v;
        wq_fnode_def *def = &d->defs[i];
        (void)fk;
        if (!json_object_is_type(o, json_type_object)) {
            snprintf(err, errlen, "flow: nodes[%zu]: an object expected", i);
            return WQ_EINVAL;
        }
        json_object_object_foreach(o, k, unused)
        {
            (void)unused;
            if (!field_known(k, node_fields)) {
                snprintf(err, errlen,
                         "flow: nodes[%zu]: unknown field '%s' (expected queue, key, payload, "
                         "after, ignore_dead, priority, group)",
                         i, k);
                return WQ_EINVAL;
            }
        }
        if (str_member(o, "queue", &def->queue, NULL) < 0 || !def->queue) {
            snprintf(err, errlen, "flow: nodes[%zu].queue: a queue name expected", i);
            return WQ_EINVAL;
        }
        if (str_member(o, "key", &def->key, &def->keylen) < 0 || !def->key ||
            def->keylen > WQ_KEY_MAX) {
            snprintf(err, errlen, "flow: nodes[%zu].key: a string key expected", i);
            return WQ_EINVAL;
        }
        if (json_object_object_get_ex(o, "payload", &v) &&
            !json_object_is_type(v, json_type_null)) {
            size_t plen;
            def->payload = json_object_to_json_string_length(v, TO_STRING_FLAGS, &plen);
            def->paylen = plen;
        }
        if (str_member(o, "group", &def->grp, &def->grplen) < 0 ||
            (def->grp && (def->grplen == 0 || def->grplen > WQ_GROUP_MAX))) {
            snprintf(err, errlen, "flow: nodes[%zu].group: a string of 1 to %d bytes expected", i,
                     WQ_GROUP_MAX);
            return WQ_EINVAL;
        }
        if (json_object_object_get_ex(o, "priority", &v) &&
            !json_object_is_type(v, json_type_null)) {
            int64_t p = json_object_get_int64(v);
            if (!json_object_is_type(v, json_type_int) || p < INT32_MIN || p > INT32_MAX) {
                snprintf(err, errlen, "flow: nodes[%zu].priority: a 32-bit integer expected", i);
                return WQ_EINVAL;
            }
            def->priority = (int32_t)p;
        }
        if (json_object_object_get_ex(o, "ignore_dead", &v) &&
            !json_object_is_type(v, json_type_null)) {
            if (!json_object_is_type(v, json_type_boolean)) {
                snprintf(err, errlen, "flow: nodes[%zu].ignore_dead: a boolean expected", i);
                return WQ_EINVAL;
            }
            def->ignore_dead = json_object_get_boolean(v);
        }
        if (json_object_object_get_ex(o, "after", &v) && !json_object_is_type(v, json_type_null)) {
            if (!json_object_is_type(v, json_type_array)) {
                snprintf(err, errlen, "flow: nodes[%zu].after: an array expected", i);
                return WQ_EINVAL;
            }
            size_t m = json_object_array_length(v);
            def->after = d->refs + at;
            def->nafter = m;
            for (size_t j = 0; j < m; j++) {
                int r = check_ref(json_object_array_get_idx(v, j), &d->refs[at++], i, err, errlen);
                if (r < 0)
                    return r;
            }
        }
    }
    return 0;
}

/* A fresh flow id: "f-" and 16 hex digits of randomness. */
static void make_id(char out[32])
{
    unsigned char b[8];
    if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
        static unsigned long long n;
        unsigned long long x = (unsigned long long)wq_real_now() ^ (++n << 40);
        memcpy(b, &x, sizeof b);
    }
    snprintf(out, 32, "f-%02x%02x%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5],
             b[6], b[7]);
}

int wq_host_flow_add(wq_host *h, const char *text, size_t len, wq_bop_fn fn, void *ud)
{
    char err[512];
    doc d;
    int r = doc_parse(text, len, &d, err, sizeof err);
    if (r < 0) {
        doc_free(&d);
        fn(ud, r, err);
        return 0;
    }
    char idbuf[32];
    if (!d.id) {
        make_id(idbuf);
        d.id = idbuf;
        json_object_object_add(d.root, "id", json_object_new_string(idbuf));
    }
    if (!h->flows) { /* a database shared by runners keeps the graph */
        size_t dlen;
        const char *full = json_object_to_json_string_length(d.root, TO_STRING_FLAGS, &dlen);
        wq_fop op = {.kind = WQ_FOP_ADD, .doc = full, .doclen = dlen, .id = d.id};
        r = full ? wq_backend_flow_op(h->backend, &op, fn, ud) : WQ_ENOMEM;
        doc_free(&d);
        return r == WQ_BACKEND_LOCAL ? WQ_EINVAL : r;
    }
    r = wq_flows_commit(h->flows, d.id, d.keep, now_unix(h), d.defs, d.n, NULL, err, sizeof err);
    if (r == WQ_ENOMEM)
        snprintf(err, sizeof err, "out of memory");
    char id[FLOW_ID_MAX + 1];
    snprintf(id, sizeof id, "%s", d.id);
    doc_free(&d);
    fn(ud, r, r == 0 ? id : err);
    wq_host_settle(h);
    return 0;
}

int wq_host_flow_commit(wq_host *h, const char *id, double keep, const wq_fnode_def *defs, size_t n,
                        char *idout, size_t idsize, char *err, size_t errlen)
{
    if (!h->flows)
        return WQ_BACKEND_LOCAL;
    char idbuf[32];
    if (!id) {
        make_id(idbuf);
        id = idbuf;
    }
    int r = wq_flows_commit(h->flows, id, keep < 0 ? KEEP_DEFAULT : keep, now_unix(h), defs, n,
                            NULL, err, errlen);
    if (r == WQ_ENOMEM)
        snprintf(err, errlen, "out of memory");
    if (r == 0)
        snprintf(idout, idsize, "%s", id);
    wq_host_settle(h);
    return r;
}

/* ---- items that left their queues ---- */

void wq_host_flow_gone(wq_host *h, const char *queue, const char *key, size_t len, int dead,
                       const char *result, size_t rlen, const char *error)
{
    if (!h->flows || wq_flows_count(h->flows) == 0)
        return;
    wq_fnode *n = wq_flows_live(h->flows, queue, key, len);
    if (!n || n->state != WQ_NODE_PENDING)
        return;
    if (dead && n->flow->cancelled)
        error = "flow cancelled";
    wq_flows_finished(h->flows, n, dead, result, rlen, error, now_unix(h));
}

int wq_host_flow_pending(const wq_host *h, const char *queue, const char *key, size_t len)
{
    if (!h->flows || wq_flows_count(h->flows) == 0)
        return 0;
    wq_fnode *n = wq_flows_live(h->flows, queue, key, len);
    return n && n->state == WQ_NODE_PENDING;
}

wq_fnode *wq_host_flow_blocked(const wq_host *h, const char *queue, const char *key, size_t len)
{
    if (!h->flows || !wq_flows_blocks(h->flows, queue))
        return NULL;
    wq_fnode *n = wq_flows_live(h->flows, queue, key, len);
    return n && n->state == WQ_NODE_BLOCKED ? n : NULL;
}

wq_fnode *wq_host_flow_last(const wq_host *h, const char *queue, const char *key, size_t len)
{
    if (!h->flows || wq_flows_count(h->flows) == 0)
        return NULL;
    return wq_flows_last(h->flows, queue, key, len);
}

void wq_host_flow_retried(wq_host *h, const char *queue, const char *key, size_t len)
{
    if (!h->flows || wq_flows_count(h->flows) == 0)
        return;
    wq_fnode *n = wq_flows_dead(h->flows, queue, key, len);
    if (n)
        wq_flows_revive(h->flows, n);
}

int wq_host_flow_remove_blocked(wq_host *h, const char *queue, const char *key, size_t len)
{
    wq_fnode *n = wq_host_flow_blocked(h, queue, key, len);
    if (!n)
        return 0;
    wq_flows_kill(h->flows, n, n->flow->cancelled ? "flow cancelled" : "removed", now_unix(h));
    return 1;
}

/* ---- what a handler sees ---- */

static void put_str(json_object *o, const char *k, const char *s, size_t len)
{
    json_object_object_add(o, k, json_object_new_string_len(s, (int)len));
}

/* The JSON value of a result text (a string value when it does not parse: never lost). */
static json_object *result_value(const char *text, size_t len)
{
    json_object *v = NULL;
    if (wq_json_parse(text, len, &v) == NULL)
        return v;
    return json_object_new_string_len(text, (int)len);
}

/* ---- listing, showing, cancelling ---- */

static void add_counts(json_object *o, const wq_flow *f)
{
    uint64_t c[4] = {0, 0, 0, 0};
    for (uint32_t i = 0; i < f->nnodes; i++)
        c[f->nodes[i]->state]++;
    json_object_object_add(o, "id", json_object_new_string(f->id));
    json_object_object_add(o, "created_at", json_object_new_double(f->created_at));
    if (f->finished_at > 0)
        json_object_object_add(o, "finished_at", json_object_new_double(f->finished_at));
    json_object_object_add(o, "keep", json_object_new_double(f->keep));
    json_object_object_add(o, "cancelled", json_object_new_boolean(f->cancelled));
    json_object_object_add(o, "nodes", json_object_new_int64(f->nnodes));
    for (int s = 0; s < 4; s++)
        json_object_object_add(o, wq_node_state_name((wq_node_state)s),
                               json_object_new_int64((int64_t)c[s]));
}

json_object *wq_host_flow_list(wq_host *h, const char *state, size_t limit)
{
    json_object *a = json_object_new_array();
    if (!a || !h->flows)
        return a;
    int want = state ? (strcmp(state, "finished") == 0 ? 2 : 1) : 0;
    /* newest first */
    size_t pos = 0, total = wq_flows_count(h->flows);
    const wq_flow **all = total ? malloc(total * sizeof *all) : NULL;
    size_t n = 0;
    for (wq_flow *f; all && (f = wq_flows_next(h->flows, &pos));)
        all[n++] = f;
    for (size_t i = n; i-- > 0 && json_object_array_length(a) < limit;) {
        const wq_flow *f = all[i];
        if ((want == 1 && f->unfinished == 0) || (want == 2 && f->unfinished > 0))
            continue;
        json_object *o = json_object_new_object();
        add_counts(o, f);
        json_object_array_add(a, o);
    }
    free(all);
    return a;
}

struct attempt_ud {
    int64_t attempt;
    const char *last_error;
    char err[512];
};

static void read_attempt(void *ud, const wq_key_view *v)
{
    struct attempt_ud *a = ud;
    if (v->item.key) {
        a->attempt = v->item.attempt;
        if (v->item.last_error)
            snprintf(a->err, sizeof a->err, "%s", v->item.last_error);
    }
}

json_object *wq_host_flow_show(wq_host *h, const char *id)
{
    wq_flow *f = h->flows ? wq_flows_get(h->flows, id) : NULL;
    if (!f)
        return NULL;
    json_object *o = json_object_new_object();
    add_counts(o, f);
    json_object *nodes = json_object_new_array_ext((int)f->nnodes);
    for (uint32_t i = 0; i < f->nnodes; i++) {
        const wq_fnode *n = f->nodes[i];
        json_object *x = json_object_new_object();
        put_str(x, "queue", n->queue, strlen(n->queue));
        put_str(x, "key", n->key, n->keylen);
        json_object_object_add(x, "state", json_object_new_string(wq_node_state_name(n->state)));
        if (n->state == WQ_NODE_BLOCKED)
            json_object_object_add(x, "waits", json_object_new_int(n->waits));
        if (n->state == WQ_NODE_PENDING) {
            const wq_hqueue *hq = wq_host_find_queue(h, n->queue);
            struct attempt_ud a = {0, NULL, ""};
            if (hq && hq->ops->item(hq->q, n->key, n->keylen, read_attempt, &a) == 1) {
                json_object_object_add(x, "attempt", json_object_new_int64(a.attempt));
                if (a.err[0])
                    json_object_object_add(x, "error", json_object_new_string(a.err));
            }
        }
        if (n->error)
            json_object_object_add(x, "error", json_object_new_string(n->error));
        if (n->result)
            json_object_object_add(x, "result", result_value(n->result, n->rlen));
        if (n->finished_at > 0)
            json_object_object_add(x, "finished_at", json_object_new_double(n->finished_at));
        json_object_object_add(x, "ignore_dead", json_object_new_boolean(n->ignore_dead));
        json_object *after = json_object_new_array_ext((int)n->ndeps);
        for (uint32_t j = 0; j < n->ndeps; j++) {
            json_object *r = json_object_new_object();
            put_str(r, "queue", n->deps[j]->queue, strlen(n->deps[j]->queue));
            put_str(r, "key", n->deps[j]->key, n->deps[j]->keylen);
            json_object_array_add(after, r);
        }
        json_object_object_add(x, "after", after);
        json_object_array_add(nodes, x);
    }
    json_object_object_add(o, "nodes", nodes);
    return o;
}

static void cancel_node(void *ud, wq_fnode *n)
{
    wq_host *h = ud;
    const wq_hqueue *hq = wq_host_find_queue(h, n->queue);
    if (!hq)
        return;
    /* not started: removed (the queue reports the finish); running: its handler is cancelled */
    if (hq->ops->remove(hq->q, n->key, n->keylen) == WQ_EBUSY)
        hq->ops->cancel(hq->q, n->key, n->keylen);
}

int wq_host_flow_cancel(wq_host *h, const char *id)
{
    wq_flow *f = h->flows ? wq_flows_get(h->flows, id) : NULL;
    if (!f)
        return WQ_ENOENT;
    size_t n = wq_flows_cancel(h->flows, f, now_unix(h), cancel_node, h);
    wq_host_settle(h);
    return (int)n;
}
