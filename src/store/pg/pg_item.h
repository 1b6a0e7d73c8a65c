/*
 * What the database knows of one key (q:item, GET /queues/NAME/items/KEY,
 * `wqrun show`): the SQL both the runner (pg.c) and the command line
 * (pg_cli.c) read it with, so that they cannot disagree. A pending item
 * wins; else the later of a done memory (within the queue's keep_done) and
 * a dead letter; else the last finished flow node of the key (its result is kept with its
 * flow whatever keep_done says; a node dead of a dependency has no dead letter); else the key's
 * last finished run in the history (SPEC 11).
 */
#ifndef WQ_PG_ITEM_H
#define WQ_PG_ITEM_H

/*
 * A FROM item "k" of at most one row for queue $1 and key $2, with the columns rank, state,
 * key, payload, priority, group, attempt, last_error, ready_at, finished_at, result, error,
 * attempts, failed_at, waits, flow, traceback, progress (times in Unix seconds; NULL where the
 * state has no such field). A blocked flow node (SPEC 9) is an item in state 'blocked' with waits
 * (dependencies not finished) and flow; a pending node's item has flow.
 */
#define WQ_PG_KEY_ROW                                                                              \
    "(SELECT * FROM (SELECT 0 AS rank, state, key, payload, priority, grp AS \"group\","           \
    " attempt, last_error, extract(epoch FROM ready_at)::float8 AS ready_at,"                      \
    " NULL::float8 AS finished_at, NULL::jsonb AS result, NULL::text AS error,"                    \
    " NULL::integer AS attempts, NULL::float8 AS failed_at, waits, flow, NULL::text AS traceback," \
    " progress FROM @S.items WHERE queue = $1 AND key = $2"                                        \
    " UNION ALL SELECT 1, 'done', d.key, NULL, NULL, NULL, NULL, NULL, NULL,"                      \
    " extract(epoch FROM d.finished_at)::float8, d.result, NULL, NULL, NULL, NULL, NULL, NULL,"    \
    " NULL"                                                                                        \
    " FROM @S.done d JOIN @S.queues q ON q.name = d.queue WHERE d.queue = $1 AND d.key = $2"       \
    " AND d.finished_at > now() - make_interval(secs => coalesce(q.keep_done, 0))"                 \
    " UNION ALL SELECT 1, 'dead', key, payload, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"         \
    " error, attempts, extract(epoch FROM failed_at)::float8, NULL, NULL, traceback"               \
    ", NULL FROM @S.dead WHERE queue = $1 AND key = $2"                                            \
    " UNION ALL SELECT 2, n.state, n.key, CASE WHEN n.state = 'dead' THEN n.payload END, NULL,"    \
    " NULL, NULL, NULL, NULL, CASE WHEN n.state = 'done' THEN"                                     \
    " extract(epoch FROM n.finished_at)::float8 END, n.result, n.error, NULL,"                     \
    " CASE WHEN n.state = 'dead' THEN extract(epoch FROM n.finished_at)::float8 END, NULL,"        \
    " n.flow, NULL, NULL FROM (SELECT * FROM @S.flow_nodes x WHERE x.queue = $1 AND x.key = $2"    \
    " AND x.state IN ('done', 'dead') ORDER BY x.finished_at DESC LIMIT 1) n"                      \
    " UNION ALL SELECT 3, h.state, h.key, NULL, NULL, NULL, NULL, NULL, NULL,"                     \
    " CASE WHEN h.state = 'done' THEN extract(epoch FROM h.finished_at)::float8 END, h.result,"    \
    " h.error, CASE WHEN h.state <> 'done' THEN h.attempts END, CASE WHEN h.state <> 'done'"       \
    " THEN extract(epoch FROM h.finished_at)::float8 END, NULL, NULL, NULL, NULL"                  \
    " FROM (SELECT * FROM @S.history x WHERE x.queue = $1 AND x.key = $2"                          \
    " ORDER BY x.id DESC LIMIT 1) h) u"                                                            \
    " ORDER BY rank, coalesce(failed_at, finished_at) DESC LIMIT 1) k"

/* One row: 1 and the JSON object of the key (fields absent when null), or 0 and 'null'. */
#define WQ_PG_KEY_JSON                                                                             \
    "SELECT count(*)::integer, coalesce(max(jsonb_strip_nulls(to_jsonb(k) - 'rank')::text),"       \
    " 'null') FROM " WQ_PG_KEY_ROW

#endif
