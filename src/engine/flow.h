/*
 * Flows (SPEC 9, docs/flows.md): graphs of nodes, each node an item of a
 * queue that may wait for other nodes of its flow. This is the graph's
 * bookkeeping where the runtime is the authority (the embedded default and
 * memory): a count per node of the dependencies not finished yet, so a
 * finish costs O(its dependents) and never a scan of siblings. Queues are
 * named, never held: the owner adds a released node's item to its queue
 * (hooks.release) and reports back when an item of a node finished
 * (wq_flows_finished). No Lua, no libevent, no SQLite.
 */
#ifndef WQ_FLOW_H
#define WQ_FLOW_H

#include "engine/common.h"

#include <stddef.h>
#include <stdint.h>

typedef struct wq_flows wq_flows;
typedef struct wq_flow wq_flow;
typedef struct wq_fnode wq_fnode;

typedef enum {
    WQ_NODE_BLOCKED, /* waits for dependencies */
    WQ_NODE_PENDING, /* its item is in its queue (queued, waiting, running, retrying) */
    WQ_NODE_DONE,
    WQ_NODE_DEAD
} wq_node_state;

/* The state's name as the tables and APIs spell it. */
const char *wq_node_state_name(wq_node_state s);
/* The state of a name, or -1. */
int wq_node_state_parse(const char *s);

/* Read-only outside flow.c. Strings are NUL-terminated copies (keys also have a length). */
struct wq_fnode {
    int64_t id; /* unique, > 0, stable across restarts (the store's row id) */
    wq_flow *flow;
    char *queue;
    char *key;
    size_t keylen;
    wq_node_state state;
    int32_t waits; /* dependencies not finished */
    int ignore_dead;
    char *payload; /* what its item gets when released: JSON text or NULL */
    size_t paylen;
    int32_t priority;
    char *grp; /* NULL: none */
    size_t grplen;
    char *result; /* a done node's result: JSON text or NULL */
    size_t rlen;
    char *error;        /* a dead node's error, NULL otherwise */
    int64_t cause;      /* the dependency whose death killed it, 0 for none */
    double finished_at; /* Unix seconds; 0 while unfinished */
    wq_fnode **deps;    /* in after's order */
    uint32_t ndeps;
    wq_fnode **outs; /* the nodes waiting for this one */
    uint32_t nouts, capouts;
    uint32_t index; /* in flow->nodes */
};

struct wq_flow {
    char *id;
    double keep; /* seconds its results stay after finished_at */
    double created_at, finished_at;
    uint32_t unfinished; /* nodes neither done nor dead */
    int cancelled;
    wq_fnode **nodes; /* in the order they were added */
    uint32_t nnodes, capnodes;
    wq_flow *prev, *next; /* the set's list, in creation order */
};

/* What the owner does for the flow set. */
typedef struct wq_flows_hooks {
    /* Whether a node may be added to queue with key: 0, WQ_ENOENT (no such queue) or
     * WQ_EBUSY (key is pending there outside any flow). */
    int (*check)(void *ud, const char *queue, const char *key, size_t keylen);
    /* Node n became pending: add its item to its queue (key, payload, priority, grp). */
    void (*release)(void *ud, wq_fnode *n);
    /* Flow flow_id's row (node_id 0) or node node_id changed, was created (created: a new
     * node, whose dependencies are to be written too) or went: the store writes it with the
     * next commit (reading the set then). */
    void (*touch)(void *ud, const char *flow_id, int64_t node_id, int created);
    void *ud;
} wq_flows_hooks;

/* A new empty set, or NULL when out of memory. */
wq_flows *wq_flows_new(const wq_flows_hooks *hooks);
void wq_flows_free(wq_flows *fs);

/* A node of a commit: where its item goes and what it waits for. Strings borrowed. */
typedef struct wq_fref {
    const char *queue;
    const char *key;
    size_t keylen;
} wq_fref;

typedef struct wq_fnode_def {
    const char *queue;
    const char *key;
    size_t keylen;
    const char *payload; /* JSON text or NULL */
    size_t paylen;
    int32_t priority;
    const char *grp;
    size_t grplen;
    int ignore_dead;
    const wq_fref *after; /* nodes of this commit or already in the flow */
    size_t nafter;
} wq_fnode_def;

/*
 * Adds defs to flow id (a new flow with keep seconds when there is none; nodes already in
 * the flow are left as they are) at Unix time now, all or nothing: nodes with nothing to wait
 * for are released (hooks.release) in defs' order, nodes whose dependency is dead die. 0, or
 * WQ_EINVAL with err naming the node (added twice, waits for no node of the flow, in a cycle,
 * no such queue, key pending outside the flow), WQ_ENOMEM; nothing changed then. *added: how
 * many nodes were new (NULL is fine).
 */
int wq_flows_commit(wq_flows *fs, const char *id, double keep, double now, const wq_fnode_def *defs,
                    size_t n, size_t *added, char *err, size_t errlen);

/* The flow of id, or NULL. */
wq_flow *wq_flows_get(const wq_flows *fs, const char *id);
/* The node of flow f for queue/key, or NULL. */
wq_fnode *wq_flow_node(const wq_flows *fs, const wq_flow *f, const char *queue, const char *key,
                       size_t keylen);
/* The unfinished (blocked or pending) node of queue/key, or NULL. */
wq_fnode *wq_flows_live(const wq_flows *fs, const char *queue, const char *key, size_t keylen);
/* The node of queue/key added last, whatever its state (the one its key means now), or NULL. */
wq_fnode *wq_flows_last(const wq_flows *fs, const char *queue, const char *key, size_t keylen);
/* The node of queue/key a retry of its dead letter revives: the last one that died of its own
 * failure (not of a dependency's) and is still kept, when no node of the key is unfinished. */
wq_fnode *wq_flows_dead(const wq_flows *fs, const char *queue, const char *key, size_t keylen);
/* Whether any node of queue is blocked (a cheap test before a lookup on every add). */
int wq_flows_blocks(const wq_flows *fs, const char *queue);

/*
 * The item of pending node n finished: done with result (JSON text or NULL), or dead with
 * error. Its dependents' counts go down; those released are added (hooks.release), those that
 * die of it die, and so on down the graph. 0, or WQ_EINVAL if n was not pending.
 */
int wq_flows_finished(wq_flows *fs, wq_fnode *n, int dead, const char *result, size_t rlen,
                      const char *error, double now);
/* A blocked node dies (removed by an operator): as wq_flows_finished with dead. */
int wq_flows_kill(wq_flows *fs, wq_fnode *n, const char *error, double now);
/*
 * A dead node is retried: it becomes pending again (the caller has put its item back) and
 * the nodes that died because of it are blocked again, down the graph. 0, or WQ_EINVAL if n
 * is not dead or its key has another unfinished node.
 */
int wq_flows_revive(wq_flows *fs, wq_fnode *n);
/*
 * Cancels flow f: blocked nodes die with "flow cancelled"; for each pending node, fn(ud, n)
 * (the owner removes its item or cancels its run, and reports the finish as usual). The
 * number of nodes that were unfinished.
 */
size_t wq_flows_cancel(wq_flows *fs, wq_flow *f, double now, void (*fn)(void *ud, wq_fnode *n),
                       void *ud);
/* A blocked node's payload or priority changes (an add of its key): payload replaces, priority
 * only rises. 0 or WQ_ENOMEM. */
int wq_flows_update(wq_flows *fs, wq_fnode *n, const char *payload, size_t paylen, int has_prio,
                    int32_t priority);

/* Deletes up to max flows finished more than their keep before now; the number deleted. */
size_t wq_flows_prune(wq_flows *fs, double now, size_t max);

/* Flows in creation order: *pos starts at 0; NULL at the end. */
wq_flow *wq_flows_next(const wq_flows *fs, size_t *pos);
size_t wq_flows_count(const wq_flows *fs);

/* Restoring (the store): a flow row, then its nodes (any order), then the edges; then
 * wq_flows_restored links everything and checks it. Returns 0, WQ_ENOMEM or WQ_EINVAL. */
int wq_flows_restore_flow(wq_flows *fs, const char *id, double keep, double created_at,
                          double finished_at, int cancelled);
int wq_flows_restore_node(wq_flows *fs, const char *flow, int64_t id, const char *queue,
                          const char *key, size_t keylen, wq_node_state state, int ignore_dead,
                          const char *payload, size_t paylen, int32_t priority, const char *grp,
                          size_t grplen, const char *result, size_t rlen, const char *error,
                          int64_t cause, double finished_at);
int wq_flows_restore_dep(wq_flows *fs, int64_t node, uint32_t ord, int64_t dep);
int wq_flows_restored(wq_flows *fs, char *err, size_t errlen);
/* The node of id, or NULL. */
wq_fnode *wq_flows_node(const wq_flows *fs, int64_t id);

/* Walks the whole set checking its counts and links: 0, or WQ_EINVAL (a test aid). */
int wq_flows_check(const wq_flows *fs);

#endif
