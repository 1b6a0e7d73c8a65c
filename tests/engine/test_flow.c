/*
 * The flow set: a node is released exactly once, when its last dependency
 * finishes; dead dependencies kill down the graph unless ignored; a retried
 * dead node brings back what died of it; commits are all or nothing and
 * refuse duplicates, unknown dependencies, cycles and keys pending
 * elsewhere; cancel, prune and restore. The whole structure is checked
 * (wq_flows_check) after every step, and no allocation leaks.
 */
#include <criterion/criterion.h>

#include "engine/flow.h"
#include "support/counting_alloc.h"

#include <stdio.h>
#include <string.h>

static wq_flows *fs;
static char released[4096]; /* "q/k " per release, in order */
static int busy_key;        /* check: "busy" is pending outside flows */
static int touches;

static int h_check(void *ud, const char *queue, const char *key, size_t keylen)
{
    (void)ud;
    if (strcmp(queue, "nope") == 0)
        return WQ_ENOENT;
    if (busy_key && keylen == 4 && memcmp(key, "busy", 4) == 0)
        return WQ_EBUSY;
    return 0;
}

static void h_release(void *ud, wq_fnode *n)
{
    (void)ud;
    size_t at = strlen(released);
    snprintf(released + at, sizeof released - at, "%s/%s ", n->queue, n->key);
}

static void h_touch(void *ud, const char *flow, int64_t node, int created)
{
    (void)ud;
    (void)flow;
    (void)node;
    (void)created;
    touches++;
}

static void setup(void)
{
    live = 0;
    wq_set_allocator(counting_realloc, NULL);
    wq_flows_hooks h = {h_check, h_release, h_touch, NULL};
    fs = wq_flows_new(&h);
    cr_assert_not_null(fs);
    released[0] = '\0';
    busy_key = 0;
    touches = 0;
}

static void finish(void)
{
    wq_flows_free(fs);
    cr_assert_eq(live, 0, "%ld blocks leaked", live);
    wq_set_allocator(NULL, NULL);
}

TestSuite(flow, .init = setup);

#define REF(q, k)                                                                                  \
    {                                                                                              \
        q, k, sizeof k - 1                                                                         \
    }
#define NODE(q, k) .queue = q, .key = k, .keylen = sizeof k - 1

static wq_fnode *node(const char *flow, const char *q, const char *k)
{
    wq_flow *f = wq_flows_get(fs, flow);
    cr_assert_not_null(f, "no flow %s", flow);
    wq_fnode *n = wq_flow_node(fs, f, q, k, strlen(k));
    cr_assert_not_null(n, "no node %s/%s", q, k);
    return n;
}

static void ok(void)
{
    cr_assert_eq(wq_flows_check(fs), 0, "the set is inconsistent");
}

/* parts p1..p3 -> join */
static void fan_in(const char *id)
{
    static const wq_fref parts[] = {REF("parts", "p1"), REF("parts", "p2"), REF("parts", "p3")};
    wq_fnode_def defs[] = {
        {NODE("parts", "p1")},
        {NODE("parts", "p2")},
        {NODE("parts", "p3")},
        {NODE("reports", "join"), .after = parts, .nafter = 3},
    };
    char err[256] = "";
    size_t added = 0;
    cr_assert_eq(wq_flows_commit(fs, id, 100, 1000, defs, 4, &added, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(added, 4);
    ok();
}

Test(flow, the_join_is_released_once_when_its_last_dependency_finishes)
{
    fan_in("f");
    cr_assert_str_eq(released, "parts/p1 parts/p2 parts/p3 ");
    wq_fnode *join = node("f", "reports", "join");
    cr_assert_eq(join->state, WQ_NODE_BLOCKED);
    cr_assert_eq(join->waits, 3);
    cr_assert(wq_flows_blocks(fs, "reports"));
    cr_assert_eq(wq_flows_live(fs, "reports", "join", 4), join);
    released[0] = '\0';
    cr_assert_eq(wq_flows_finished(fs, node("f", "parts", "p2"), 0, "2", 1, NULL, 1001), 0);
    cr_assert_eq(wq_flows_finished(fs, node("f", "parts", "p1"), 0, NULL, 0, NULL, 1002), 0);
    ok();
    cr_assert_str_eq(released, "");
    cr_assert_eq(join->waits, 1);
    cr_assert_eq(wq_flows_finished(fs, node("f", "parts", "p3"), 0, "{\"n\":3}", 7, NULL, 1003), 0);
    cr_assert_str_eq(released, "reports/join ");
    cr_assert_eq(join->state, WQ_NODE_PENDING);
    cr_assert_not(wq_flows_blocks(fs, "reports"));
    /* a second finish of a finished node changes nothing */
    cr_assert_eq(wq_flows_finished(fs, node("f", "parts", "p3"), 0, NULL, 0, NULL, 1004),
                 WQ_EINVAL);
    cr_assert_str_eq(released, "reports/join ");
    cr_assert_str_eq(node("f", "parts", "p2")->result, "2");
    wq_flow *f = wq_flows_get(fs, "f");
    cr_assert_eq(f->unfinished, 1);
    cr_assert_eq(f->finished_at, 0);
    cr_assert_eq(wq_flows_finished(fs, join, 0, NULL, 0, NULL, 1005), 0);
    cr_assert_eq(f->unfinished, 0);
    cr_assert_eq(f->finished_at, 1005);
    cr_assert_null(wq_flows_live(fs, "reports", "join", 4));
    ok();
    finish();
}

Test(flow, a_dead_dependency_kills_down_the_graph_unless_ignored)
{
    /* a -> b -> c, a -> d (ignore_dead) */
    static const wq_fref a[] = {REF("q", "a")}, b[] = {REF("q", "b")};
    wq_fnode_def defs[] = {
        {NODE("q", "a")},
        {NODE("q", "b"), .after = a, .nafter = 1},
        {NODE("q", "c"), .after = b, .nafter = 1},
        {NODE("q", "d"), .after = a, .nafter = 1, .ignore_dead = 1},
    };
    char err[256];
    cr_assert_eq(wq_flows_commit(fs, "g", 100, 1, defs, 4, NULL, err, sizeof err), 0, "%s", err);
    released[0] = '\0';
    cr_assert_eq(wq_flows_finished(fs, node("g", "q", "a"), 1, NULL, 0, "boom", 2), 0);
    ok();
    cr_assert_eq(node("g", "q", "b")->state, WQ_NODE_DEAD);
    cr_assert_str_eq(node("g", "q", "b")->error, "dependency q/a is dead: boom");
    cr_assert_eq(node("g", "q", "c")->state, WQ_NODE_DEAD);
    cr_assert_str_eq(node("g", "q", "c")->error,
                     "dependency q/b is dead: dependency q/a is dead: boom");
    cr_assert_eq(node("g", "q", "c")->cause, node("g", "q", "b")->id);
    cr_assert_str_eq(released, "q/d ", "the node that ignores dead dependencies runs");
    cr_assert_eq(wq_flows_get(fs, "g")->unfinished, 1);
    /* the dead letter to retry is a, not what died of it */
    cr_assert_eq(wq_flows_dead(fs, "q", "a", 1), node("g", "q", "a"));
    cr_assert_null(wq_flows_dead(fs, "q", "b", 1));
    finish();
}

Test(flow, retrying_a_dead_node_brings_back_what_died_of_it)
{
    /* a -> c <- b, c -> e; b dies after a, then a is retried: c stays dead of b */
    static const wq_fref ab[] = {REF("q", "a"), REF("q", "b")}, c[] = {REF("q", "c")};
    wq_fnode_def defs[] = {
        {NODE("q", "a")},
        {NODE("q", "b")},
        {NODE("q", "c"), .after = ab, .nafter = 2},
        {NODE("q", "e"), .after = c, .nafter = 1},
    };
    char err[256];
    cr_assert_eq(wq_flows_commit(fs, "h", 100, 1, defs, 4, NULL, err, sizeof err), 0, "%s", err);
    wq_fnode *na = node("h", "q", "a"), *nb = node("h", "q", "b"), *nc = node("h", "q", "c"),
             *ne = node("h", "q", "e");
    cr_assert_eq(wq_flows_finished(fs, na, 1, NULL, 0, "a failed", 2), 0);
    cr_assert_eq(wq_flows_finished(fs, nb, 1, NULL, 0, "b failed", 3), 0);
    cr_assert_eq(nc->cause, na->id);
    cr_assert_eq(wq_flows_get(fs, "h")->unfinished, 0);
    cr_assert_eq(wq_flows_get(fs, "h")->finished_at, 3);
    ok();
    cr_assert_eq(wq_flows_revive(fs, na), 0);
    ok();
    cr_assert_eq(na->state, WQ_NODE_PENDING);
    cr_assert_eq(nc->state, WQ_NODE_DEAD, "b is still dead");
    cr_assert_eq(nc->cause, nb->id);
    cr_assert_eq(wq_flows_revive(fs, nb), 0);
    ok();
    cr_assert_eq(nc->state, WQ_NODE_BLOCKED);
    cr_assert_eq(nc->waits, 2);
    cr_assert_eq(ne->state, WQ_NODE_BLOCKED);
    cr_assert_eq(ne->waits, 1);
    cr_assert_null(nc->error);
    cr_assert_eq(wq_flows_get(fs, "h")->unfinished, 4);
    cr_assert_eq(wq_flows_get(fs, "h")->finished_at, 0);
    released[0] = '\0';
    cr_assert_eq(wq_flows_finished(fs, na, 0, NULL, 0, NULL, 4), 0);
    cr_assert_eq(wq_flows_finished(fs, nb, 0, NULL, 0, NULL, 5), 0);
    cr_assert_str_eq(released, "q/c ");
    cr_assert_eq(wq_flows_finished(fs, nc, 0, NULL, 0, NULL, 6), 0);
    cr_assert_str_eq(released, "q/c q/e ");
    ok();
    /* reviving what is not dead: refused */
    cr_assert_eq(wq_flows_revive(fs, nc), WQ_EINVAL);
    finish();
}

static void refused(const wq_fnode_def *defs, size_t n, const char *want)
{
    char err[256] = "";
    cr_assert_eq(wq_flows_commit(fs, "bad", 1, 1, defs, n, NULL, err, sizeof err), WQ_EINVAL);
    cr_assert_str_eq(err, want);
    cr_assert_null(wq_flows_get(fs, "bad"), "nothing is added");
    cr_assert_str_eq(released, "");
    ok();
}

Test(flow, a_commit_refuses_bad_graphs_naming_the_node_and_adds_nothing)
{
    static const wq_fref x[] = {REF("q", "x")}, b[] = {REF("q", "b")}, c[] = {REF("q", "c")},
                         a[] = {REF("q", "a")};
    wq_fnode_def twice[] = {{NODE("q", "a")}, {NODE("q", "a")}};
    refused(twice, 2, "flow bad: node q/a is added twice");
    wq_fnode_def unknown[] = {{NODE("q", "a")}, {NODE("q", "b"), .after = x, .nafter = 1}};
    refused(unknown, 2, "flow bad: node q/b waits for q/x, which is no node of the flow");
    wq_fnode_def cycle[] = {{NODE("q", "r")},
                            {NODE("q", "a"), .after = c, .nafter = 1},
                            {NODE("q", "b"), .after = a, .nafter = 1},
                            {NODE("q", "c"), .after = b, .nafter = 1}};
    refused(cycle, 4, "flow bad: node q/c is in a cycle");
    wq_fnode_def self[] = {{NODE("q", "a"), .after = a, .nafter = 1}};
    refused(self, 1, "flow bad: node q/a is in a cycle");
    wq_fnode_def noqueue[] = {{NODE("nope", "a")}};
    refused(noqueue, 1, "flow bad: node nope/a: no queue named nope");
    busy_key = 1;
    wq_fnode_def busy[] = {{NODE("q", "a")}, {NODE("q", "busy")}};
    refused(busy, 2, "flow bad: node q/busy is already pending outside the flow");
    fan_in("f");
    released[0] = '\0';
    wq_fnode_def other[] = {{NODE("parts", "p2")}};
    refused(other, 1, "flow bad: node parts/p2 is already pending outside the flow");
    finish();
}

Test(flow, appending_skips_nodes_already_in_the_flow_and_may_wait_for_finished_ones)
{
    fan_in("f");
    cr_assert_eq(wq_flows_finished(fs, node("f", "parts", "p1"), 0, "1", 1, NULL, 2), 0);
    released[0] = '\0';
    static const wq_fref p1[] = {REF("parts", "p1")}, p4[] = {REF("parts", "p4")};
    wq_fnode_def more[] = {
        {NODE("parts", "p1")}, /* already there: nothing */
        {NODE("parts", "p5"), .after = p4, .nafter = 1},
        {NODE("parts", "p4"), .after = p1, .nafter = 1}, /* p1 finished: runs at once */
    };
    char err[256];
    size_t added = 9;
    cr_assert_eq(wq_flows_commit(fs, "f", 100, 3, more, 3, &added, err, sizeof err), 0, "%s", err);
    cr_assert_eq(added, 2);
    cr_assert_str_eq(released, "parts/p4 ");
    cr_assert_eq(node("f", "parts", "p5")->state, WQ_NODE_BLOCKED);
    cr_assert_eq(wq_flows_get(fs, "f")->nnodes, 6);
    ok();
    /* the same again: nothing new */
    released[0] = '\0';
    cr_assert_eq(wq_flows_commit(fs, "f", 100, 3, more, 3, &added, err, sizeof err), 0);
    cr_assert_eq(added, 0);
    cr_assert_str_eq(released, "");
    finish();
}

static void cancel_fn(void *ud, wq_fnode *n)
{
    (void)ud;
    wq_flows_finished(fs, n, 1, NULL, 0, "flow cancelled", 9);
}

Test(flow, cancel_kills_blocked_nodes_and_asks_for_the_pending_ones)
{
    fan_in("f");
    cr_assert_eq(wq_flows_finished(fs, node("f", "parts", "p1"), 0, NULL, 0, NULL, 2), 0);
    cr_assert_eq(wq_flows_cancel(fs, wq_flows_get(fs, "f"), 9, cancel_fn, NULL), 3);
    ok();
    cr_assert_eq(node("f", "reports", "join")->state, WQ_NODE_DEAD);
    cr_assert_str_eq(node("f", "reports", "join")->error, "flow cancelled");
    cr_assert_eq(node("f", "parts", "p1")->state, WQ_NODE_DONE);
    cr_assert_eq(node("f", "parts", "p2")->state, WQ_NODE_DEAD);
    cr_assert_eq(wq_flows_get(fs, "f")->finished_at, 9);
    finish();
}

Test(flow, finished_flows_are_pruned_after_their_keep)
{
    fan_in("f");
    const char *keys[] = {"p1", "p2", "p3"};
    for (int i = 0; i < 3; i++)
        wq_flows_finished(fs, node("f", "parts", keys[i]), 0, NULL, 0, NULL, 10);
    wq_flows_finished(fs, node("f", "reports", "join"), 0, NULL, 0, NULL, 20);
    cr_assert_eq(wq_flows_prune(fs, 119, 10), 0, "kept for 100 s after 20");
    cr_assert_eq(wq_flows_prune(fs, 121, 10), 1);
    cr_assert_null(wq_flows_get(fs, "f"));
    cr_assert_eq(wq_flows_count(fs), 0);
    cr_assert_null(wq_flows_dead(fs, "parts", "p1", 2));
    ok();
    /* the key is free for a new flow */
    fan_in("f2");
    finish();
}

Test(flow, a_restored_set_has_the_same_states_and_counts)
{
    wq_flows_hooks h = {h_check, h_release, h_touch, NULL};
    wq_flows *r = wq_flows_new(&h);
    cr_assert_eq(wq_flows_restore_flow(r, "f", 100, 1, 0, 0), 0);
    cr_assert_eq(wq_flows_restore_node(r, "f", 7, "parts", "p1", 2, WQ_NODE_DONE, 0, NULL, 0, 0,
                                       NULL, 0, "1", 1, NULL, 0, 5),
                 0);
    cr_assert_eq(wq_flows_restore_node(r, "f", 8, "parts", "p2", 2, WQ_NODE_PENDING, 0, NULL, 0, 0,
                                       NULL, 0, NULL, 0, NULL, 0, 0),
                 0);
    cr_assert_eq(wq_flows_restore_node(r, "f", 9, "reports", "join", 4, WQ_NODE_BLOCKED, 0, "{}", 2,
                                       3, "g", 1, NULL, 0, NULL, 0, 0),
                 0);
    cr_assert_eq(wq_flows_restore_dep(r, 9, 1, 8), 0);
    cr_assert_eq(wq_flows_restore_dep(r, 9, 0, 7), 0);
    cr_assert_eq(wq_flows_restore_dep(r, 9, 0, 99), WQ_EINVAL);
    char err[64];
    cr_assert_eq(wq_flows_restored(r, err, sizeof err), 0);
    cr_assert_eq(wq_flows_check(r), 0);
    wq_fnode *join = wq_flows_node(r, 9);
    cr_assert_eq(join->waits, 1);
    cr_assert_eq(join->deps[0]->id, 7);
    cr_assert_eq(wq_flows_get(r, "f")->unfinished, 2);
    released[0] = '\0';
    cr_assert_eq(wq_flows_finished(r, wq_flows_node(r, 8), 0, NULL, 0, NULL, 6), 0);
    cr_assert_str_eq(released, "reports/join ");
    /* new ids continue after the restored ones */
    wq_fnode_def more[] = {{NODE("parts", "p3")}};
    cr_assert_eq(wq_flows_commit(r, "f", 100, 7, more, 1, NULL, err, sizeof err), 0);
    cr_assert_eq(wq_flow_node(r, wq_flows_get(r, "f"), "parts", "p3", 2)->id, 10);
    wq_flows_free(r);
    finish();
}

Test(flow, a_wide_fan_in_costs_one_step_per_finish)
{
    enum { N = 20000 };
    static char keys[N][8];
    static wq_fnode_def defs[N + 1];
    static wq_fref after[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        defs[i] = (wq_fnode_def){.queue = "parts", .key = keys[i], .keylen = strlen(keys[i])};
        after[i] = (wq_fref){"parts", keys[i], strlen(keys[i])};
    }
    defs[N] = (wq_fnode_def){NODE("reports", "join"), .after = after, .nafter = N};
    char err[256];
    cr_assert_eq(wq_flows_commit(fs, "wide", 1, 1, defs, N + 1, NULL, err, sizeof err), 0, "%s",
                 err);
    wq_flow *f = wq_flows_get(fs, "wide");
    wq_fnode *join = f->nodes[N];
    for (int i = 0; i < N; i++) {
        released[0] = '\0';
        cr_assert_eq(wq_flows_finished(fs, f->nodes[i], 0, NULL, 0, NULL, 2), 0);
        cr_assert_eq(join->waits, N - 1 - i);
    }
    cr_assert_eq(join->state, WQ_NODE_PENDING);
    ok();
    finish();
}

/* Every allocation failing in turn: a commit either fails whole or succeeds whole. */
static long fail_at;
static void *failing_realloc(void *ud, void *p, size_t size)
{
    if (size > 0 && fail_at-- == 0)
        return NULL;
    return counting_realloc(ud, p, size);
}

Test(flow, out_of_memory_in_a_commit_leaves_nothing_behind)
{
    static const wq_fref parts[] = {REF("parts", "p1"), REF("parts", "p2")};
    wq_fnode_def defs[] = {
        {NODE("parts", "p1"), .payload = "{}", .paylen = 2},
        {NODE("parts", "p2"), .grp = "g", .grplen = 1},
        {NODE("reports", "join"), .after = parts, .nafter = 2},
    };
    int worked = 0;
    for (long i = 0; i < 200 && !worked; i++) {
        fail_at = i;
        wq_set_allocator(failing_realloc, NULL);
        char err[256];
        released[0] = '\0';
        int r = wq_flows_commit(fs, "m", 1, 1, defs, 3, NULL, err, sizeof err);
        wq_set_allocator(counting_realloc, NULL);
        ok();
        if (r == 0) {
            worked = 1;
            cr_assert_str_eq(released, "parts/p1 parts/p2 ");
        } else {
            cr_assert_eq(r, WQ_ENOMEM);
            cr_assert_null(wq_flows_get(fs, "m"));
            cr_assert_str_eq(released, "");
        }
    }
    cr_assert(worked);
    finish();
}
