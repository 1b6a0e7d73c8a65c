/*
 * Flows in the runner (SPEC 9, docs/flows.md): flow documents (JSON, as POST /flows takes
 * them) are committed here, to the runner's own flow set (the embedded default and memory:
 * the runtime is the authority, the state file writes it behind) or to a database shared by
 * runners (its functions keep the graph). The queues tell this module when an item of a
 * flow's node left them, and it releases what waited for it.
 */
#ifndef WQ_HOST_FLOWS_H
#define WQ_HOST_FLOWS_H

#include "host/host.h"

#include <json-c/json_object.h>

/* Creates the flow set of a runner whose backend does not share its queues and restores it
 * from the state file: 0, or -1 after printing why. */
int wq_host_flows_open(wq_host *h);
/* Frees it (after the backend's last commit). */
void wq_host_flows_close(wq_host *h);

/* Largest flow document accepted (bytes). */
#define WQ_FLOW_DOC_MAX (64u << 20)

/*
 * Commits the flow document doc (JSON text; "id" may be absent: a fresh one is made). fn(ud,
 * result, text) tells the outcome: 0 with text the flow's id, WQ_EINVAL with text the error
 * naming the node (nothing added), WQ_EIO or WQ_ENOMEM with text saying why. On the runner's
 * own set fn is called before this returns; on a shared database once it answered. Returns 0
 * (fn called or to be called) or a WQ_E* code with fn never called.
 */
int wq_host_flow_add(wq_host *h, const char *doc, size_t len, wq_bop_fn fn, void *ud);

/*
 * The same for a flow already in pieces (the Lua API on the runner's own set, without a JSON
 * round trip): id NULL makes a fresh one, keep < 0 the default. 0 with the id in idout, or a
 * WQ_E* code with err naming the node; WQ_BACKEND_LOCAL when the database keeps the graph
 * (send it the document instead).
 */
int wq_host_flow_commit(wq_host *h, const char *id, double keep, const wq_fnode_def *defs, size_t n,
                        char *idout, size_t idsize, char *err, size_t errlen);

/*
 * The item of queue/key left its queue (nothing is pending for the key any more): done with
 * result (JSON text or NULL), or dead with error. Releases what its node's dependents were
 * waiting for. Nothing when the key is no flow's pending node.
 */
void wq_host_flow_gone(wq_host *h, const char *queue, const char *key, size_t len, int dead,
                       const char *result, size_t rlen, const char *error);
/* Whether queue/key is a pending node of the runner's own flow set (its result is wanted). */
int wq_host_flow_pending(const wq_host *h, const char *queue, const char *key, size_t len);
/* The node of queue/key that is blocked in the runner's own set, or NULL. */
wq_fnode *wq_host_flow_blocked(const wq_host *h, const char *queue, const char *key, size_t len);
/* The node of queue/key added last in the runner's own set (any state), or NULL. */
wq_fnode *wq_host_flow_last(const wq_host *h, const char *queue, const char *key, size_t len);
/* A dead letter of queue/key was re-queued: the dead node it was (if any) runs again and what
 * died of it waits again. */
void wq_host_flow_retried(wq_host *h, const char *queue, const char *key, size_t len);
/* An operator removed queue/key while its node was blocked: it dies ("removed"). 1 if there
 * was such a node, else 0. */
int wq_host_flow_remove_blocked(wq_host *h, const char *queue, const char *key, size_t len);

/*
 * Listing and cancelling on the runner's own set (HTTP, CLI through the state file): the
 * JSON objects of backend.h's wq_fop comment. show: NULL when there is no such flow. cancel:
 * the number of nodes cancelled or removed, WQ_ENOENT for no such flow.
 */
json_object *wq_host_flow_list(wq_host *h, const char *state, size_t limit);
json_object *wq_host_flow_show(wq_host *h, const char *id);
int wq_host_flow_cancel(wq_host *h, const char *id);

#endif
